// resolve_adapter (model/hf_hub.h): PEFT LoRA adapters from a Hugging Face
// cache laid out by hand and from tests/hub/fake_hub.py, a stand-in of the
// Hub on a real local socket. Adapters come from tools/make_test_lora.py.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "fake_hub.h"
#include "model/hf_hub.h"
#include "model/lora_adapter.h"
#include "model/model_loader.h"

namespace halo::model::testing {
namespace {

const char* kAdapter = "halo-test/sql-lora";
const std::vector<std::string> kAdapterFiles = {"adapter_config.json", "adapter_model.safetensors"};

class HfHubAdapterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    repos_ = tmp_ / "repos";
    cache_ = tmp_ / "cache";
    fs::create_directories(repos_ / "halo-test");
  }

  // Options reading only this environment (never the developer's own cache).
  HubOptions opts(std::map<std::string, std::string> env = {}) const {
    return isolated_hub_options(cache_, tmp_ / "home", std::move(env));
  }

  // tools/make_test_lora.py for pkgchat-5m into `out`; "" on success.
  static std::string make_lora(const fs::path& out, const std::string& args = "") {
    const std::string cmd = shell_quote(HALO_PYTHON_EXE) + " " +
                            shell_quote(std::string(HALO_SOURCE_DIR) + "/tools/make_test_lora.py") +
                            " --base " + shell_quote(pkgchat_dir().string()) + " --out " +
                            shell_quote(out.string()) + " --rank 4 --targets q_proj,v_proj " +
                            args + " > /dev/null 2>&1";
    return std::system(cmd.c_str()) == 0 ? "" : "failed: " + cmd;
  }

  // The Hub's repos: an adapter with files halo does not read (README.md,
  // tokenizer files), one saved as a pickle only, one without its config.
  // Empty when the repos cannot be made (no python).
  std::string make_repos() {
    if (!have_python()) return "no python3 (HALO_PYTHON) to run tests/hub/fake_hub.py";
    const fs::path good = repos_ / kAdapter;
    if (auto why = make_lora(good); !why.empty()) return why;
    write_file(good / "README.md", "# sql-lora\n");
    fs::copy_file(pkgchat_dir() / "tokenizer.json", good / "tokenizer.json");
    fs::copy_file(pkgchat_dir() / "tokenizer_config.json", good / "tokenizer_config.json");
    if (auto why = make_lora(repos_ / "halo-test" / "bin-lora", "--break bin"); !why.empty())
      return why;
    fs::create_directories(repos_ / "halo-test" / "no-config-lora");
    fs::copy_file(good / "adapter_model.safetensors",
                  repos_ / "halo-test" / "no-config-lora" / "adapter_model.safetensors");
    write_file(repos_ / "halo-test" / "no-config-lora" / "README.md", "# no config\n");
    return {};
  }

  std::unique_ptr<FakeHubProcess> start_hub() {
    return std::make_unique<FakeHubProcess>(repos_, std::vector<std::string>{});
  }

  // A cache as huggingface_hub leaves it: blobs, relative symlinks, refs/main.
  fs::path lay_out_cache(const std::string& sha, const std::map<std::string, std::string>& files) {
    const fs::path repo = cache_ / "models--halo-test--sql-lora";
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / sha);
    fs::create_directories(repo / "refs");
    int i = 0;
    for (const auto& [name, data] : files) {
      const std::string etag = "etag" + std::to_string(i++);
      write_file(repo / "blobs" / etag, data);
      fs::create_symlink(fs::path("../../blobs") / etag, repo / "snapshots" / sha / name);
    }
    write_file(repo / "refs" / "main", sha);
    return repo / "snapshots" / sha;
  }

  TempDir tmp_;
  fs::path repos_, cache_;
};

#define NEED_REPOS()                       \
  do {                                     \
    const std::string why = make_repos();  \
    if (!why.empty()) GTEST_SKIP() << why; \
  } while (0)

TEST_F(HfHubAdapterTest, DirectoryIsReturnedUnchanged) {
  const fs::path dir = tmp_ / "my-adapter";
  fs::create_directories(dir);
  EXPECT_EQ(resolve_adapter(dir.string(), opts()), dir);
  EXPECT_TRUE(throws_error(
      [&] { resolve_adapter("./no/such/adapter", opts()); },
      {"adapter './no/such/adapter'", "no/such/adapter", "not a Hugging Face Hub id"}));
  write_file(tmp_ / "adapter.safetensors", "x");
  EXPECT_TRUE(
      throws_error([&] { resolve_adapter((tmp_ / "adapter.safetensors").string(), opts()); },
                   {"adapter '", "is a file, not an adapter directory"}));
}

TEST_F(HfHubAdapterTest, FoundInPreparedCache) {
  const std::string sha(40, 'c');
  const fs::path snap =
      lay_out_cache(sha, {{"adapter_config.json", "{}"}, {"adapter_model.safetensors", "w"}});
  EXPECT_EQ(resolve_adapter(kAdapter, opts({{"HF_HUB_OFFLINE", "1"}})), snap);
  HubOptions by_sha = opts({{"HF_HUB_OFFLINE", "1"}});
  by_sha.revision = sha;
  EXPECT_EQ(resolve_adapter(kAdapter, by_sha), snap);
  // Usable as an adapter is not usable as a model.
  EXPECT_TRUE(throws_error(
      [&] {
        resolve_model(kAdapter, opts({{"HF_HUB_OFFLINE", "1"}}));
      },
      {"model 'halo-test/sql-lora'", "no config.json", snap.string()}));
}

TEST_F(HfHubAdapterTest, CachedSnapshotWithoutSafetensorsIsNotUsed) {
  const fs::path snap = lay_out_cache(
      std::string(40, 'd'), {{"adapter_config.json", "{}"}, {"adapter_model.bin", "pickle"}});
  EXPECT_TRUE(throws_error(
      [&] {
        resolve_adapter(kAdapter, opts({{"HF_HUB_OFFLINE", "1"}}));
      },
      {"adapter 'halo-test/sql-lora'", "no adapter_model.safetensors in " + snap.string(), "pickle",
       "safe_serialization=True", "offline mode"}));
}

TEST_F(HfHubAdapterTest, OfflineWithNothingCachedNamesOfflineMode) {
  EXPECT_TRUE(throws_error(
      [&] {
        resolve_adapter(kAdapter, opts({{"HF_HUB_OFFLINE", "1"}}));
      },
      {"adapter 'halo-test/sql-lora'", cache_.string(), "models--halo-test--sql-lora/refs/main",
       "not downloading: offline mode", "HF_HUB_OFFLINE"}));
  HubOptions o = opts();
  o.offline = true;
  EXPECT_TRUE(throws_error([&] { resolve_adapter(kAdapter, o); },
                           {"adapter 'halo-test/sql-lora'", "offline mode"}));
  EXPECT_FALSE(fs::exists(cache_ / "models--halo-test--sql-lora"));
}

TEST_F(HfHubAdapterTest, DownloadsFromHubThenResolvesOffline) {
  NEED_REPOS();
  auto hub = start_hub();
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  const fs::path dir = resolve_adapter(kAdapter, o);
  const fs::path repo = cache_ / "models--halo-test--sql-lora";
  EXPECT_EQ(dir, repo / "snapshots" / read_file(repo / "refs" / "main"));
  for (const auto& f : kAdapterFiles)
    EXPECT_EQ(read_file(dir / f), read_file(repos_ / kAdapter / f)) << f;
  for (const char* f : {"README.md", "tokenizer.json", "tokenizer_config.json"})
    EXPECT_FALSE(fs::exists(dir / f)) << f;  // halo does not read them
  // Relative links into blobs/, the LFS blob named by its sha256.
  EXPECT_EQ(fs::read_symlink(dir / "adapter_config.json").parent_path(), fs::path("../../blobs"));
  EXPECT_EQ(fs::read_symlink(dir / "adapter_model.safetensors").parent_path(),
            fs::path("../../blobs"));
  EXPECT_EQ(fs::read_symlink(dir / "adapter_model.safetensors").filename().string().size(), 64u);
  for (const auto& e : fs::directory_iterator(repo / "blobs"))
    EXPECT_NE(e.path().extension(), ".incomplete");
  const std::vector<json> served = hub->settled_requests();
  size_t gets = 0;
  for (const auto& r : served) gets += r["method"] == "GET" && r["status"] == 200;
  EXPECT_EQ(gets, 1 + kAdapterFiles.size());  // the revision info, then the two files

  EXPECT_EQ(resolve_adapter(kAdapter, opts({{"HF_HUB_OFFLINE", "1"}})), dir);
  EXPECT_EQ(resolve_adapter(kAdapter, o), dir);  // cached: the Hub is not asked again
  EXPECT_EQ(hub->settled_requests().size(), served.size());
  const LoraAdapter ad = LoraAdapter::load(dir, load_config(pkgchat_dir()), 0);
  EXPECT_EQ(ad.max_rank(), 4);
}

TEST_F(HfHubAdapterTest, PickleOnlyRepoIsRefused) {
  NEED_REPOS();
  auto hub = start_hub();
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  EXPECT_TRUE(throws_error(
      [&] { resolve_adapter("halo-test/bin-lora", o); },
      {"adapter 'halo-test/bin-lora'", "no adapter_model.safetensors",
       "adapter_model.bin is a pickle, which halo does not read", "safe_serialization=True"}));
  EXPECT_FALSE(fs::exists(cache_ / "models--halo-test--bin-lora" / "blobs"));
}

TEST_F(HfHubAdapterTest, RepoWithoutAdapterConfigIsRefused) {
  NEED_REPOS();
  auto hub = start_hub();
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  EXPECT_TRUE(throws_error(
      [&] { resolve_adapter("halo-test/no-config-lora", o); },
      {"adapter 'halo-test/no-config-lora'", "no adapter_config.json", "download failed"}));
  EXPECT_FALSE(fs::exists(cache_ / "models--halo-test--no-config-lora" / "blobs"));
  EXPECT_TRUE(throws_error([&] { resolve_adapter("halo-test/nope", o); },
                           {"adapter 'halo-test/nope'", "HTTP 404", "RepoNotFound"}));
}

}  // namespace
}  // namespace halo::model::testing
