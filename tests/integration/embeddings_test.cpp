// Pooling requests (embeddings) through the engine and the real CPU plugin:
// LAST, MEAN and CLS pooling against the independent numpy forward pass
// (tests/reference/forward.py --pool) for several families, and the engine's
// promises: an embedding does not depend on what else runs in its steps,
// on chunked prefill, preemption or the prefix cache.
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "common/error.h"
#include "demo_engine.h"
#include "engine/llm_engine.h"

namespace fs = std::filesystem;
using namespace halo;
using namespace halo::engine;
using halo::test_support::demo_model;
using halo::test_support::greedy;
using halo::test_support::kCpuPlugin;

namespace {

const std::vector<int32_t> kPrompt = {1, 3,  287,  1002, 45, 3001, 17,  998, 2047,
                                      5, 76, 4000, 12,   9,  31,   600, 7};

int run(const std::string& cmd) {
  int rc = std::system(cmd.c_str());
  return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

EngineConfig config(int max_batched = 256, int kv_tokens = 1 << 14) {
  EngineConfig c;
  c.device = kCpuPlugin;
  c.max_model_len = 256;
  c.max_num_seqs = 16;
  c.max_num_batched_tokens = max_batched;
  c.max_kv_tokens = kv_tokens;
  c.block_size = 4;
  c.threads = 2;
  return c;
}

SamplingParams pooling(PoolingType type, bool normalize = true) {
  SamplingParams p;
  p.max_tokens = 1;
  p.pooling.type = type;
  p.pooling.normalize = normalize;
  return p;
}

// Runs every request to the end; the embeddings (and generated ids) by request id.
struct Results {
  std::map<std::string, std::vector<float>> embeddings;
  std::map<std::string, std::vector<int32_t>> tokens;
  std::map<std::string, int> preemptions;  // of each finished request
};

Results run_all(LLMEngine& eng) {
  Results r;
  while (eng.has_unfinished())
    for (const auto& out : eng.step()) {
      auto& t = r.tokens[out.request_id];
      t.insert(t.end(), out.new_token_ids.begin(), out.new_token_ids.end());
      if (out.finished && !out.seq->embedding.empty())
        r.embeddings[out.request_id] = out.seq->embedding;
      if (out.finished) r.preemptions[out.request_id] = out.seq->num_preemptions;
    }
  return r;
}

std::vector<float> embed_alone(const std::shared_ptr<const model::LoadedModel>& m,
                               const std::vector<int32_t>& prompt, PoolingType type,
                               EngineConfig c = config()) {
  LLMEngine eng(c, m);
  eng.add_request("e", prompt, pooling(type));
  return run_all(eng).embeddings.at("e");
}

std::vector<double> reference(const fs::path& dir, const std::vector<int32_t>& prompt,
                              PoolingType type) {
  const fs::path out = fs::temp_directory_path() / fmt::format("halo-embed-ref-{}.json", getpid());
  const int rc =
      run(fmt::format("{} {}/tests/reference/forward.py {} --prompt-ids {} --pool {} > {}",
                      HALO_PYTHON, HALO_SOURCE_DIR, dir.string(), fmt::join(prompt, ","),
                      pooling_type_name(type), out.string()));
  if (rc != 0)
    throw std::runtime_error(
        "tests/reference/forward.py failed (python3-numpy: scripts/install-deps.sh --test)");
  std::ifstream in(out);
  auto j = nlohmann::json::parse(in);
  fs::remove(out);
  return j.at("embedding").get<std::vector<double>>();
}

struct Family {
  std::string name;
  std::string generator_args;  // empty: the embedded pkgchat-5m model
};
std::ostream& operator<<(std::ostream& os, const Family& f) { return os << f.name; }

class EmbeddingsReference : public ::testing::TestWithParam<Family> {
 protected:
  fs::path model_dir() {
    const Family& f = GetParam();
    if (f.generator_args.empty()) return fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m";
    fs::path dir = fs::temp_directory_path() / fmt::format("halo-embed-{}-{}", f.name, getpid());
    fs::remove_all(dir);
    EXPECT_EQ(run(fmt::format("{} {}/tools/make_test_model.py --out {} {}", HALO_PYTHON,
                              HALO_SOURCE_DIR, dir.string(), f.generator_args)),
              0);
    cleanup_ = dir;
    return dir;
  }
  void TearDown() override {
    if (!cleanup_.empty()) fs::remove_all(cleanup_);
  }
  fs::path cleanup_;
};

// Every pooling type, in one batch and with the prompt cut into 5-token
// chunks, equals the numpy pooling of the float64 forward pass: unit vectors
// with cosine > 0.9999 and every value within 1% of the largest.
TEST_P(EmbeddingsReference, PoolingMatchesNumpy) {
  const fs::path dir = model_dir();
  auto m = std::make_shared<const model::LoadedModel>(model::LoadedModel::load(dir));
  for (int chunk : {256, 5}) {
    LLMEngine eng(config(chunk), m);
    for (PoolingType t : {PoolingType::kLast, PoolingType::kMean, PoolingType::kCls})
      eng.add_request(pooling_type_name(t), kPrompt, pooling(t));
    const Results r = run_all(eng);
    for (PoolingType t : {PoolingType::kLast, PoolingType::kMean, PoolingType::kCls}) {
      SCOPED_TRACE(fmt::format("{} chunk {}", pooling_type_name(t), chunk));
      const auto ref = reference(dir, kPrompt, t);
      const auto& got = r.embeddings.at(pooling_type_name(t));
      ASSERT_EQ(got.size(), ref.size());
      ASSERT_EQ(got.size(), static_cast<size_t>(m->config().spec.hidden_size));
      double dot = 0, norm = 0, worst = 0, peak = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        dot += got[i] * ref[i];
        norm += double(got[i]) * got[i];
        worst = std::max(worst, std::fabs(got[i] - ref[i]));
        peak = std::max(peak, std::fabs(ref[i]));
      }
      std::printf("%s %s chunk %d: cosine %.7f, max |diff| %.2e of peak %.3f\n",
                  GetParam().name.c_str(), pooling_type_name(t), chunk, dot, worst, peak);
      EXPECT_NEAR(norm, 1.0, 1e-5);
      EXPECT_GT(dot, 0.9999);
      EXPECT_LT(worst, 0.01 * peak);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Families, EmbeddingsReference,
    ::testing::Values(Family{"pkgchat5m", ""},
                      Family{"llama_bf16", "--family llama --dtype bf16 --seed 1"},
                      Family{"qwen2_bias", "--family qwen2 --dtype bf16 --seed 4"},
                      Family{"phi3_fused", "--family phi3 --dtype fp32 --seed 6"}),
    [](const auto& info) { return info.param.name; });

// Pooling types differ (the test above could not pass with one for another).
TEST(Embeddings, PoolingTypesGiveDifferentVectors) {
  const auto last = embed_alone(demo_model(), kPrompt, PoolingType::kLast);
  const auto mean = embed_alone(demo_model(), kPrompt, PoolingType::kMean);
  const auto cls = embed_alone(demo_model(), kPrompt, PoolingType::kCls);
  EXPECT_NE(last, mean);
  EXPECT_NE(mean, cls);
  EXPECT_NE(last, cls);
}

// An embedding is the same bits whatever shares its steps: generation
// requests, other embeddings, a prefill chunk boundary elsewhere; and the
// generated tokens are those of the generation alone.
TEST(Embeddings, BatchedWithGenerationEqualsAlone) {
  auto m = demo_model();
  const std::vector<int32_t> other = {1, 400, 401, 402, 403, 404, 405, 406, 407};
  const auto alone_mean = embed_alone(m, kPrompt, PoolingType::kMean);
  const auto alone_last = embed_alone(m, other, PoolingType::kLast);
  std::vector<int32_t> gen_alone;
  {
    LLMEngine eng(config(), m);
    eng.add_request("g", other, greedy(24));
    gen_alone = run_all(eng).tokens.at("g");
  }
  LLMEngine eng(config(12), m);  // prompts cut into chunks, decodes beside them
  eng.add_request("g", other, greedy(24));
  std::vector<int32_t> first;  // "g"'s tokens before the others arrive
  for (int i = 0; i < 3; ++i)
    for (const auto& out : eng.step())
      first.insert(first.end(), out.new_token_ids.begin(), out.new_token_ids.end());
  eng.add_request("mean", kPrompt, pooling(PoolingType::kMean));
  eng.add_request("last", other, pooling(PoolingType::kLast));
  eng.add_request("g2", kPrompt, greedy(8));
  Results r = run_all(eng);
  r.tokens["g"].insert(r.tokens["g"].begin(), first.begin(), first.end());
  EXPECT_EQ(r.embeddings.at("mean"), alone_mean);
  EXPECT_EQ(r.embeddings.at("last"), alone_last);
  EXPECT_EQ(r.tokens.at("g"), gen_alone);
  EXPECT_TRUE(r.tokens.at("mean").empty()) << "a pooling request generates nothing";
}

// Preempted and recomputed (a KV pool too small for everything at once), the
// pooled sums are not counted twice.
TEST(Embeddings, PreemptionRecomputesWithoutCountingTwice) {
  auto m = demo_model();
  std::vector<int32_t> long_prompt;
  for (int i = 0; i < 120; ++i) long_prompt.push_back(10 + (i * 37) % 3000);
  const auto alone = embed_alone(m, long_prompt, PoolingType::kMean);
  EngineConfig c = config(16, 160);  // 40 blocks of 4
  c.max_model_len = 160;
  LLMEngine eng(c, m);
  for (int i = 0; i < 3; ++i) eng.add_request(fmt::format("g{}", i), kPrompt, greedy(40));
  eng.add_request("mean", long_prompt, pooling(PoolingType::kMean));
  const Results r = run_all(eng);
  EXPECT_GT(r.preemptions.at("mean"), 0) << "the pool was meant to preempt the pooling request";
  const auto& got = r.embeddings.at("mean");
  ASSERT_EQ(got.size(), alone.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], alone[i], 1e-5) << i;
}

// With the prefix cache on, a MEAN request after a generation of the same
// prompt still pools every position (it must not start from cached blocks),
// and a LAST request may and gives the same vector.
TEST(Embeddings, PrefixCacheKeepsEveryPooledPosition) {
  auto m = demo_model();
  EngineConfig c = config();
  c.enable_prefix_caching = true;
  const auto mean = embed_alone(m, kPrompt, PoolingType::kMean, c);
  const auto last = embed_alone(m, kPrompt, PoolingType::kLast, c);
  LLMEngine eng(c, m);
  eng.add_request("warm", kPrompt, greedy(4));
  run_all(eng);
  eng.add_request("mean", kPrompt, pooling(PoolingType::kMean));
  eng.add_request("last", kPrompt, pooling(PoolingType::kLast));
  const Results r = run_all(eng);
  EXPECT_GT(eng.stats().prefix_cache_hits, 0u) << "the LAST request should reuse the cached prompt";
  const auto& got_mean = r.embeddings.at("mean");
  for (size_t i = 0; i < mean.size(); ++i) ASSERT_NEAR(got_mean[i], mean[i], 1e-5) << i;
  const auto& got_last = r.embeddings.at("last");
  for (size_t i = 0; i < last.size(); ++i) ASSERT_NEAR(got_last[i], last[i], 1e-5) << i;
}

TEST(Embeddings, DimensionsKeepTheFirstValuesRenormalised) {
  auto m = demo_model();
  LLMEngine eng(config(), m);
  auto p = pooling(PoolingType::kMean, false);
  eng.add_request("raw", kPrompt, p);
  p.pooling.normalize = true;
  p.pooling.dimensions = 16;
  eng.add_request("d16", kPrompt, p);
  const Results r = run_all(eng);
  const auto& raw = r.embeddings.at("raw");
  const auto& d16 = r.embeddings.at("d16");
  ASSERT_EQ(d16.size(), 16u);
  double n = 0;
  for (int i = 0; i < 16; ++i) n += double(raw[i]) * raw[i];
  for (int i = 0; i < 16; ++i) EXPECT_NEAR(d16[i], raw[i] / std::sqrt(n), 1e-6);
}

TEST(Embeddings, BadRequestsAreRefusedByName) {
  LLMEngine eng(config(), demo_model());
  auto p = pooling(PoolingType::kMean);
  p.logprobs = 2;
  try {
    eng.add_request("x", kPrompt, p);
    FAIL() << "logprobs on a pooling request was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("pooling"), std::string::npos) << e.what();
  }
  EXPECT_THROW(eng.add_beam_request("b", kPrompt, pooling(PoolingType::kLast), BeamParams{2}),
               Error);
  std::vector<int32_t> too_long(257, 5);
  EXPECT_THROW(eng.add_request("l", too_long, pooling(PoolingType::kLast)), Error);
  std::vector<int32_t> exactly(256, 5);  // no room to generate is fine: nothing is generated
  EXPECT_NO_THROW(eng.add_request("ok", exactly, pooling(PoolingType::kLast)));
  EXPECT_FALSE(run_all(eng).embeddings.at("ok").empty());
}

}  // namespace
