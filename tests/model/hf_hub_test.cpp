// resolve_model against a Hugging Face cache laid out by hand and against
// tests/hub/fake_hub.py, a stand-in of the Hub on a real local socket.
#include "model/hf_hub.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../hub/fake_hub.h"
#include "model/hf_config.h"
#include "model/model_loader.h"
#include "test_util.h"

namespace halo::model::testing {
namespace {

const char* kRepo = "halo-test/pkgchat-5m";
const std::vector<std::string> kWanted = {"config.json", "generation_config.json", "model.safetensors",
                                          "special_tokens_map.json", "tokenizer.json", "tokenizer_config.json"};

class HfHubTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fs::create_directories(tmp_ / "repos" / "halo-test" / "bin-only");
    fs::create_directory_symlink(pkgchat_dir(), tmp_ / "repos" / "halo-test" / "pkgchat-5m");
    fs::copy_file(pkgchat_dir() / "config.json", tmp_ / "repos" / "halo-test" / "bin-only" / "config.json");
    write_file(tmp_ / "repos" / "halo-test" / "bin-only" / "pytorch_model.bin", "not really weights");
    cache_ = tmp_ / "cache";
  }

  // Options reading only this environment (never the developer's own cache).
  HubOptions opts(std::map<std::string, std::string> env = {}) const {
    return isolated_hub_options(cache_, tmp_ / "home", std::move(env));
  }

  std::unique_ptr<FakeHubProcess> start_hub(const std::vector<std::string>& extra = {}) {
    if (!have_python()) return nullptr;
    return std::make_unique<FakeHubProcess>(tmp_ / "repos", extra);
  }

  // A cache as huggingface_hub leaves it: blobs, relative symlinks, refs/main.
  fs::path lay_out_cache(const fs::path& cache, const std::string& sha) {
    const fs::path repo = cache / "models--halo-test--pkgchat-5m";
    fs::create_directories(repo / "blobs");
    fs::create_directories(repo / "snapshots" / sha);
    fs::create_directories(repo / "refs");
    int i = 0;
    for (const auto& f : kWanted) {
      const std::string etag = "etag" + std::to_string(i++);
      fs::copy_file(pkgchat_dir() / f, repo / "blobs" / etag);
      fs::create_symlink(fs::path("../../blobs") / etag, repo / "snapshots" / sha / f);
    }
    write_file(repo / "refs" / "main", sha);
    return repo / "snapshots" / sha;
  }

  void expect_same_files(const fs::path& dir) {
    for (const auto& f : kWanted) EXPECT_EQ(read_file(dir / f), read_file(pkgchat_dir() / f)) << f;
  }

  TempDir tmp_;
  fs::path cache_;
};

#define NEED_HUB(hub) \
  if (!(hub)) GTEST_SKIP() << "no python3 (HALO_PYTHON) to run tests/hub/fake_hub.py"

TEST(HfHubId, LooksLikeHubId) {
  EXPECT_TRUE(looks_like_hub_id("meta-llama/Llama-2-7b-chat-hf"));
  EXPECT_TRUE(looks_like_hub_id("gpt2"));
  EXPECT_TRUE(looks_like_hub_id("Qwen/Qwen2.5-0.5B-Instruct"));
  for (const char* s : {"", "/abs/dir", "./rel", "../up", "~/models/x", "a/b/c", "a--b/c", "a/b..c", "-a/b", "a/b.",
                        "a b/c", "org/name.git"})
    EXPECT_FALSE(looks_like_hub_id(s)) << s;
  EXPECT_FALSE(looks_like_hub_id(std::string(HALO_SOURCE_DIR) + "/models/pkgchat-5m"));
}

TEST(HfHubId, CacheDirFromEnvironment) {
  EXPECT_EQ(hub_cache_dir({{"HF_HUB_CACHE", "/c"}, {"HF_HOME", "/h"}}), fs::path("/c"));
  EXPECT_EQ(hub_cache_dir({{"HF_HOME", "/h"}, {"XDG_CACHE_HOME", "/x"}}), fs::path("/h/hub"));
  EXPECT_EQ(hub_cache_dir({{"XDG_CACHE_HOME", "/x"}, {"HOME", "/home/u"}}), fs::path("/x/huggingface/hub"));
  EXPECT_EQ(hub_cache_dir({{"HOME", "/home/u"}}), fs::path("/home/u/.cache/huggingface/hub"));
  EXPECT_EQ(hub_cache_dir({{"HF_HOME", "~/hf"}, {"HOME", "/home/u"}}), fs::path("/home/u/hf/hub"));
}

TEST_F(HfHubTest, DirectoryIsReturnedAsIs) {
  EXPECT_EQ(resolve_model(pkgchat_dir().string(), opts()), pkgchat_dir());
  EXPECT_TRUE(throws_error([&] { resolve_model("./no/such/dir", opts()); }, {"no/such/dir", "not a Hugging Face model id"}));
}

TEST_F(HfHubTest, ResolvesFromCacheByIdRevisionAndEnvironment) {
  const std::string sha(40, 'a');
  const fs::path snap = lay_out_cache(cache_, sha);
  EXPECT_EQ(resolve_model(kRepo, opts()), snap);
  HubOptions by_sha = opts({{"HF_HUB_OFFLINE", "1"}});
  by_sha.revision = sha;
  EXPECT_EQ(resolve_model(kRepo, by_sha), snap);
  EXPECT_EQ(load_model_config(resolve_model(kRepo, opts())).architecture(),
            load_model_config(pkgchat_dir()).architecture());

  // $HF_HOME/hub and $XDG_CACHE_HOME/huggingface/hub, with no HF_HUB_CACHE.
  const fs::path in_home = lay_out_cache(tmp_ / "hfhome" / "hub", sha);
  HubOptions home;
  home.env = {{"HF_HOME", (tmp_ / "hfhome").string()}, {"HF_HUB_OFFLINE", "1"}};
  EXPECT_EQ(resolve_model(kRepo, home), in_home);
  const fs::path in_xdg = lay_out_cache(tmp_ / "xdg" / "huggingface" / "hub", sha);
  home.env = {{"XDG_CACHE_HOME", (tmp_ / "xdg").string()}, {"HF_HUB_OFFLINE", "true"}};
  EXPECT_EQ(resolve_model(kRepo, home), in_xdg);
}

TEST_F(HfHubTest, IncompleteSnapshotIsNotUsed) {
  const fs::path snap = lay_out_cache(cache_, std::string(40, 'b'));
  fs::remove(snap / "model.safetensors");
  EXPECT_TRUE(throws_error([&] { resolve_model(kRepo, opts({{"HF_HUB_OFFLINE", "1"}})); },
                           {"no model.safetensors", snap.string(), "HF_HUB_OFFLINE"}));
}

TEST_F(HfHubTest, MissingAndOfflineNamesCacheAndOfflineMode) {
  EXPECT_TRUE(throws_error([&] { resolve_model(kRepo, opts({{"HF_HUB_OFFLINE", "1"}})); },
                           {cache_.string(), "models--halo-test--pkgchat-5m/refs/main", "HF_HUB_OFFLINE",
                            "no directory"}));
}

TEST_F(HfHubTest, DownloadsThenResolvesOffline) {
  auto hub = start_hub();
  NEED_HUB(hub);
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  const fs::path dir = resolve_model(kRepo, o);
  expect_same_files(dir);
  EXPECT_FALSE(fs::exists(dir / "README.md"));  // halo does not read it
  const fs::path repo = cache_ / "models--halo-test--pkgchat-5m";
  EXPECT_EQ(dir, repo / "snapshots" / read_file(repo / "refs" / "main"));
  // Relative links into blobs/, LFS blobs named by their sha256.
  EXPECT_EQ(fs::read_symlink(dir / "config.json").parent_path(), fs::path("../../blobs"));
  EXPECT_EQ(fs::read_symlink(dir / "model.safetensors").filename().string().size(), 64u);
  for (const auto& e : fs::directory_iterator(repo / "blobs")) EXPECT_NE(e.path().extension(), ".incomplete");

  // The CDN never saw the token (none here) and each file came once.
  size_t gets = 0;
  for (const auto& r : hub->settled_requests(1 + kWanted.size())) gets += r["method"] == "GET" && r["status"] == 200;
  EXPECT_EQ(gets, 1 + kWanted.size());  // the revision info, then the files

  const size_t served = hub->settled_requests().size();
  EXPECT_EQ(resolve_model(kRepo, opts({{"HF_HUB_OFFLINE", "1"}})), dir);
  EXPECT_EQ(resolve_model(kRepo, o), dir);  // cached: the Hub is not asked again
  EXPECT_EQ(hub->settled_requests().size(), served);
  LoadedModel model = LoadedModel::load(dir);
  EXPECT_GT(model.weights().size(), 0u);
}

TEST_F(HfHubTest, InterruptedDownloadResumesWithRange) {
  auto hub = start_hub({"--cut-after", "3000000"});
  NEED_HUB(hub);
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  const fs::path dir = resolve_model(kRepo, o);
  expect_same_files(dir);
  bool resumed = false;
  for (const auto& r : hub->settled_requests())
    resumed |= r["range"] == "bytes=3000000-" && r["status"] == 206;
  EXPECT_TRUE(resumed) << "no Range request after the cut";
  for (const auto& e : fs::directory_iterator(cache_ / "models--halo-test--pkgchat-5m" / "blobs"))
    EXPECT_NE(e.path().extension(), ".incomplete") << e.path();
}

// A partial blob left by an earlier process is resumed; a corrupt one fails
// the sha256 check (when built with OpenSSL) or the size check.
TEST_F(HfHubTest, LeftoverIncompleteBlobIsResumedAndChecked) {
  auto hub = start_hub();
  NEED_HUB(hub);
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  const std::string blob_name = fs::read_symlink(resolve_model(kRepo, o) / "model.safetensors").filename();
  const std::string weights = read_file(pkgchat_dir() / "model.safetensors");

  cache_ = tmp_ / "cache2";
  o = opts();
  o.endpoint = hub->endpoint();
  const fs::path blobs = cache_ / "models--halo-test--pkgchat-5m" / "blobs";
  fs::create_directories(blobs);
  write_file(blobs / (blob_name + ".incomplete"), weights.substr(0, 1 << 20));
  expect_same_files(resolve_model(kRepo, o));
  bool resumed = false;
  for (const auto& r : hub->settled_requests()) resumed |= r["range"] == "bytes=1048576-" && r["status"] == 206;
  EXPECT_TRUE(resumed);

  cache_ = tmp_ / "cache3";
  o = opts();
  o.endpoint = hub->endpoint();
  fs::create_directories(cache_ / "models--halo-test--pkgchat-5m" / "blobs");
  write_file(cache_ / "models--halo-test--pkgchat-5m" / "blobs" / (blob_name + ".incomplete"),
             std::string(1 << 20, 'x'));
  EXPECT_TRUE(throws_error([&] { resolve_model(kRepo, o); }, {"sha256", "does not match"}));
  EXPECT_FALSE(fs::exists(cache_ / "models--halo-test--pkgchat-5m" / "refs" / "main"));
  expect_same_files(resolve_model(kRepo, o));  // the bad partial was removed: a clean retry works
}

TEST_F(HfHubTest, TokenRequiredFor401AndNotSentToCdn) {
  auto hub = start_hub({"--token", "s3cret"});
  NEED_HUB(hub);
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  EXPECT_TRUE(throws_error([&] { resolve_model(kRepo, o); },
                           {"HTTP 401", "HF_TOKEN", hub->endpoint() + "/api/models/halo-test/pkgchat-5m/revision/main",
                            "gated"}));
  o.token = "wrong";
  EXPECT_TRUE(throws_error([&] { resolve_model(kRepo, o); }, {"HTTP 401", "token sent was refused"}));

  // From $HF_HOME/token; the CDN (another host name) answers 400 to a token.
  fs::create_directories(tmp_ / "hfhome");
  write_file(tmp_ / "hfhome" / "token", "s3cret\n");
  o = opts({{"HF_HOME", (tmp_ / "hfhome").string()}});
  o.endpoint = hub->endpoint();
  expect_same_files(resolve_model(kRepo, o));
  for (const auto& r : hub->settled_requests())
    if (r["path"].get<std::string>().rfind("/cdn/", 0) == 0) {
      EXPECT_TRUE(r["auth"].is_null());
    }
}

TEST_F(HfHubTest, TokenFromEnvironment) {
  auto hub = start_hub({"--token", "s3cret"});
  NEED_HUB(hub);
  HubOptions o = opts({{"HF_TOKEN", "s3cret"}, {"HF_ENDPOINT", hub->endpoint()}});
  expect_same_files(resolve_model(kRepo, o));
}

TEST_F(HfHubTest, NotFoundNamesUrl) {
  auto hub = start_hub();
  NEED_HUB(hub);
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  EXPECT_TRUE(throws_error([&] { resolve_model("halo-test/nope", o); },
                           {"HTTP 404", hub->endpoint() + "/api/models/halo-test/nope/revision/main", "RepoNotFound",
                            "no such repo"}));
  o.revision = "v9";
  EXPECT_TRUE(throws_error([&] { resolve_model(kRepo, o); }, {"HTTP 404", "/revision/v9", "RevisionNotFound"}));
}

TEST_F(HfHubTest, RepoWithoutSafetensorsFails) {
  auto hub = start_hub();
  NEED_HUB(hub);
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  EXPECT_TRUE(throws_error([&] { resolve_model("halo-test/bin-only", o); },
                           {"halo needs safetensors", "pytorch_model.bin"}));
  EXPECT_FALSE(fs::exists(cache_ / "models--halo-test--bin-only" / "blobs"));
}

TEST_F(HfHubTest, UnreachableEndpointSaysWhatWasTried) {
  HubOptions o = opts();
  o.endpoint = "http://127.0.0.1:1";  // nothing listens on port 1
  EXPECT_TRUE(throws_error([&] { resolve_model(kRepo, o); },
                           {"http://127.0.0.1:1/api/models/halo-test/pkgchat-5m/revision/main", "download failed"}));
}

// huggingface_hub (Python) finds what halo downloaded, when it is installed.
TEST_F(HfHubTest, PythonHuggingfaceHubReadsHaloCache) {
  if (!have_python() || std::system((shell_quote(HALO_PYTHON_EXE) + " -c 'import huggingface_hub' 2>/dev/null").c_str()))
    GTEST_SKIP() << "python3 module huggingface_hub not installed (Debian 12 has no python3-huggingface-hub)";
  auto hub = start_hub();
  HubOptions o = opts();
  o.endpoint = hub->endpoint();
  const fs::path dir = resolve_model(kRepo, o);
  const fs::path out = tmp_ / "py.out";
  const std::string script =
      "import sys\n"
      "from huggingface_hub import snapshot_download, try_to_load_from_cache\n"
      "c = sys.argv[1]\n"
      "print(snapshot_download('halo-test/pkgchat-5m', cache_dir=c, local_files_only=True))\n"
      "print(try_to_load_from_cache('halo-test/pkgchat-5m', 'model.safetensors', cache_dir=c))\n";
  write_file(tmp_ / "check.py", script);
  const std::string cmd = "HF_HUB_OFFLINE=1 " + shell_quote(HALO_PYTHON_EXE) + " " + shell_quote((tmp_ / "check.py").string()) +
                          " " + shell_quote(cache_.string()) + " >" + shell_quote(out.string()) + " 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0) << read_file(out);
  EXPECT_EQ(read_file(out), dir.string() + "\n" + (dir / "model.safetensors").string() + "\n");
}

}  // namespace
}  // namespace halo::model::testing
