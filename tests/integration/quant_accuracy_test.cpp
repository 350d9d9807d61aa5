// Accuracy of every quantized format against the unquantized model, through
// the real CPU plugin: for each prefix of a few prompts, the next-token
// logits of the quantized model vs the original's. Prints top-1 agreement and
// mean |Δlogit| (docs/quantization.md quotes them) and holds the 8-bit
// formats on the demo model to near-identical choices.
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <random>

#include "common/error.h"
#include "engine/kv_block_manager.h"
#include "engine/model_runner.h"
#include "model/model_loader.h"

namespace fs = std::filesystem;
using namespace halo;

namespace {

const std::string kPluginPath = std::string(HALO_PLUGIN_DIR) + "/libhalo_plugin_cpu.so";

int run(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

// One model prepared on the cpu plugin; last-position logits of any prompt.
class Evaluator {
 public:
  explicit Evaluator(std::shared_ptr<const model::LoadedModel> m) : model_(std::move(m)) {
    auto plugin = device::Plugin::load(kPluginPath);
    auto dev = std::make_shared<device::Device>(plugin, 0, device::Options{{"threads", "2"}});
    halo_limits limits{};
    limits.max_num_seqs = 4;
    limits.max_model_len = 128;
    limits.max_num_batched_tokens = 128;
    limits.block_size = 16;
    std::vector<halo_named_tensor> weights(model_->weights().begin(), model_->weights().end());
    exe_ = std::make_shared<device::Executable>(dev, model_->config().spec, weights, limits,
                                                device::Options{}, model_->quantized_weights());
    cache_ = std::make_unique<device::KvCache>(exe_, 16, limits.block_size);
    blocks_ = std::make_unique<engine::KvBlockManager>(16, limits.block_size);
    runner_ = std::make_unique<engine::ModelRunner>(*cache_, model_->config().spec.vocab_size);
  }

  std::vector<float> last_logits(const std::vector<int32_t>& prompt) {
    engine::Sequence seq;
    seq.prompt_ids = prompt;
    EXPECT_TRUE(blocks_->allocate_slots(seq, seq.num_tokens()));
    engine::SchedulerOutput step;
    step.scheduled.push_back({&seq, seq.num_tokens()});
    runner_->execute(step);
    const float* row = runner_->logits_at(runner_->sample_rows(0).first_row);
    std::vector<float> out(row, row + model_->config().spec.vocab_size);
    blocks_->free(seq);
    return out;
  }

 private:
  std::shared_ptr<const model::LoadedModel> model_;
  std::shared_ptr<device::Executable> exe_;
  std::unique_ptr<device::KvCache> cache_;
  std::unique_ptr<engine::KvBlockManager> blocks_;
  std::unique_ptr<engine::ModelRunner> runner_;
};

struct Agreement {
  double top1 = 0, mean_abs = 0, logit_std = 0;
};

// Prefixes of 8 random prompts (lengths 4..60 by 8): next-token choices and
// logits of `quant` against `plain`.
Agreement compare(Evaluator& plain, Evaluator& quant, int32_t vocab) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<int32_t> tok(3, vocab - 1);
  int n = 0, same = 0;
  double abs_sum = 0, sq = 0, cnt = 0;
  for (int p = 0; p < 8; ++p) {
    std::vector<int32_t> prompt(60);
    for (auto& t : prompt) t = tok(rng);
    for (size_t len = 4; len <= prompt.size(); len += 8) {
      const std::vector<int32_t> pre(prompt.begin(), prompt.begin() + static_cast<long>(len));
      const auto a = plain.last_logits(pre), b = quant.last_logits(pre);
      same += std::max_element(a.begin(), a.end()) - a.begin() ==
              std::max_element(b.begin(), b.end()) - b.begin();
      ++n;
      for (size_t i = 0; i < a.size(); ++i) {
        abs_sum += std::fabs(double(a[i]) - b[i]);
        sq += double(a[i]) * a[i];
        cnt += 1;
      }
    }
  }
  return {double(same) / n, abs_sum / cnt, std::sqrt(sq / cnt)};
}

struct Format {
  std::string name;
  std::string loader;    // "int8", "int4", "int4-g128" (load-time) or a make_quantized_checkpoint /
                         // make_gguf format
  double min_top1_demo;  // on pkgchat-5m
};

const std::vector<Format>& formats() {
  static const std::vector<Format> f = {
      {"int8", "int8", 0.9},           {"int4_g32", "int4", 0.6},
      {"int4_g128", "int4-g128", 0.5}, {"gguf_q8_0", "gguf:q8_0", 0.9},
      {"gguf_q4_0", "gguf:q4_0", 0.5}, {"gptq4_g32", "ckpt:gptq4", 0.5},
      {"ct_w8a8", "ckpt:ct-w8a8", 0.9}};
  return f;
}

std::shared_ptr<const model::LoadedModel> load_format(const fs::path& dir, const Format& f,
                                                      const fs::path& tmp) {
  if (f.loader == "int8" || f.loader == "int4")
    return std::make_shared<model::LoadedModel>(model::LoadedModel::load(dir, {f.loader, 0}));
  if (f.loader == "int4-g128")
    return std::make_shared<model::LoadedModel>(model::LoadedModel::load(dir, {"int4", 128}));
  const fs::path out = tmp / f.name;
  const bool gguf = f.loader.starts_with("gguf:");
  const std::string arg = f.loader.substr(f.loader.find(':') + 1);
  const std::string cmd =
      gguf ? fmt::format("{} {}/tools/make_gguf.py {} {}.gguf --outtype {} > /dev/null",
                         HALO_PYTHON, HALO_SOURCE_DIR, dir.string(), out.string(), arg)
           : fmt::format("{} {}/tests/model/make_quantized_checkpoint.py {} {} {} --group 32",
                         HALO_PYTHON, HALO_SOURCE_DIR, dir.string(), out.string(), arg);
  EXPECT_EQ(run(cmd), 0) << cmd;
  return std::make_shared<model::LoadedModel>(
      model::LoadedModel::load(gguf ? fs::path(out.string() + ".gguf") : out));
}

struct ModelCase {
  std::string name;
  std::string generator_args;  // empty: pkgchat-5m
};

class QuantAccuracy : public ::testing::TestWithParam<ModelCase> {};

TEST_P(QuantAccuracy, AgainstTheUnquantizedModel) {
  const ModelCase& mc = GetParam();
  const fs::path tmp =
      fs::temp_directory_path() / fmt::format("halo-qacc-{}-{}", mc.name, getpid());
  fs::remove_all(tmp);
  fs::create_directories(tmp);
  fs::path dir = fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m";
  if (!mc.generator_args.empty()) {
    dir = tmp / "model";
    ASSERT_EQ(run(fmt::format("{} {}/tools/make_test_model.py --out {} {}", HALO_PYTHON,
                              HALO_SOURCE_DIR, dir.string(), mc.generator_args)),
              0);
  }
  auto plain_model = std::make_shared<model::LoadedModel>(model::LoadedModel::load(dir));
  Evaluator plain(plain_model);
  const int32_t vocab = plain_model->config().spec.vocab_size;
  for (const Format& f : formats()) {
    std::shared_ptr<const model::LoadedModel> qm;
    try {
      qm = load_format(dir, f, tmp);
    } catch (const Error& e) {  // e.g. a group of 128 that does not divide the model's matrices
      std::cout << fmt::format("[ accuracy ] {:<12} {:<11} not applicable: {}\n", mc.name, f.name,
                               e.what());
      EXPECT_NE(f.loader.find("128"), std::string::npos) << f.name << ": " << e.what();
      continue;
    }
    Evaluator quant(qm);
    const Agreement a = compare(plain, quant, vocab);
    std::cout << fmt::format(
        "[ accuracy ] {:<12} {:<11} top-1 agreement {:.3f}, mean |dlogit| {:.4f} (logit rms "
        "{:.3f})\n",
        mc.name, f.name, a.top1, a.mean_abs, a.logit_std);
    EXPECT_TRUE(std::isfinite(a.mean_abs)) << f.name;
    EXPECT_LT(a.mean_abs, a.logit_std)
        << f.name << ": the logits moved by more than their own size";
    if (mc.generator_args.empty()) {
      EXPECT_GE(a.top1, f.min_top1_demo) << f.name;
    }
  }
  fs::remove_all(tmp);
}

INSTANTIATE_TEST_SUITE_P(
    Models, QuantAccuracy,
    ::testing::Values(ModelCase{"pkgchat-5m", ""},
                      ModelCase{"llama",
                                "--family llama --hidden 256 --intermediate 512 --dtype fp32"},
                      ModelCase{"qwen3",
                                "--family qwen3 --hidden 256 --intermediate 512 --heads 4 "
                                "--head-dim 64 --dtype fp32"}),
    [](const auto& info) {
      std::string n = info.param.name;
      for (char& c : n)
        if (c == '-') c = '_';
      return n;
    });

}  // namespace
