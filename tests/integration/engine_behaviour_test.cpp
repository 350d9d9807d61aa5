// The engine's promises, on the real CPU plugin and the embedded model:
// batch invariance, preemption under a tiny KV pool, abort, seeded sampling
// independent of batch neighbours, and the async streaming API.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <map>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "engine/async_engine.h"
#include "demo_engine.h"

namespace fs = std::filesystem;
using namespace halo;
using namespace halo::engine;

namespace {

const std::string kPluginPath = test_support::kCpuPlugin;
using test_support::demo_model;
using test_support::greedy;

EngineConfig config(int kv_tokens = 1 << 15) {
  EngineConfig c;
  c.device = kPluginPath;
  c.max_model_len = 256;
  c.max_num_seqs = 64;
  c.max_kv_tokens = kv_tokens;
  c.block_size = 16;
  return c;
}

// Prompts of mixed lengths; every fourth shares a 40-token prefix with the
// previous one so that prefix caching has something to find.
std::vector<std::vector<int32_t>> random_prompts(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(7, 4095);
  std::uniform_int_distribution<int> len(1, 90);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p;
    if (i % 4 == 3) p.assign(out.back().begin(), out.back().begin() + std::min<size_t>(40, out.back().size()));
    int l = len(rng);
    for (int k = 0; k < l; ++k) p.push_back(tok(rng));
    out.push_back(std::move(p));
  }
  return out;
}


// Runs every prompt in one engine, all submitted at once.
std::vector<std::vector<int32_t>> run_together(LLMEngine& eng, const std::vector<std::vector<int32_t>>& prompts,
                                               const std::vector<SamplingParams>& params) {
  for (size_t i = 0; i < prompts.size(); ++i) eng.add_request(std::to_string(i), prompts[i], params[i]);
  std::vector<std::vector<int32_t>> out(prompts.size());
  while (eng.has_unfinished())
    for (auto& o : eng.step()) {
      auto& v = out[std::stoul(o.request_id)];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  return out;
}

std::vector<std::vector<int32_t>> run_alone(const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<SamplingParams>& params) {
  LLMEngine eng(config(), demo_model());
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < prompts.size(); ++i) out.push_back(run_together(eng, {prompts[i]}, {params[i]})[0]);
  return out;
}

// The demo model's tokenizer, and its chat prompt asking "What is curl?".
text::Tokenizer pkgchat_tokenizer() {
  return text::Tokenizer::from_model_dir(fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m");
}
std::vector<int32_t> curl_prompt(const text::Tokenizer& tok) {
  return tok.encode("<s><|user|>\nWhat is curl?<|end|>\n<|assistant|>\n", false);
}

}  // namespace

struct Mode {
  const char* name;
  bool chunked;
  bool prefix_caching;
  int max_batched_tokens;
};

class BatchInvariance : public ::testing::TestWithParam<Mode> {};

TEST_P(BatchInvariance, GreedyIdsAreTheSameAloneOrTogether) {
  const Mode m = GetParam();
  auto prompts = random_prompts(64, 7);
  std::vector<SamplingParams> params(prompts.size(), greedy(8));
  static const auto alone = run_alone(prompts, params);  // shared by every mode
  EngineConfig c = config();
  c.enable_chunked_prefill = m.chunked;
  c.enable_prefix_caching = m.prefix_caching;
  c.max_num_batched_tokens = m.max_batched_tokens;
  LLMEngine eng(c, demo_model());
  auto together = run_together(eng, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(together[i], alone[i]) << "prompt " << i;
  // A second pass over the same prompts hits the cache for most of them.
  if (m.prefix_caching) {
    EXPECT_GT(eng.stats().prefix_cache_hits, 0u);
    auto again = run_together(eng, prompts, params);
    for (size_t i = 0; i < prompts.size(); ++i) EXPECT_EQ(again[i], alone[i]) << "cached prompt " << i;
  }
}

INSTANTIATE_TEST_SUITE_P(Modes, BatchInvariance,
                         ::testing::Values(Mode{"chunked", true, false, 64}, Mode{"whole_prompts", false, false, 256},
                                           Mode{"chunked_prefix_cache", true, true, 64},
                                           Mode{"whole_prompts_prefix_cache", false, true, 256}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(EngineStress, FiveHundredRequestsOnATinyPoolAllFinishCorrectlyAndLeakNothing) {
  auto prompts = random_prompts(500, 11);
  std::mt19937_64 rng(3);
  std::vector<SamplingParams> params;
  for (size_t i = 0; i < prompts.size(); ++i)
    params.push_back(greedy(std::uniform_int_distribution<int>(1, 24)(rng)));
  EngineConfig c = config(48 * 16);  // 48 blocks for 500 requests
  c.max_model_len = 160;  // longest prompt 130 + 24 tokens: no request is cut short
  LLMEngine eng(c, demo_model());
  ASSERT_EQ(eng.num_kv_blocks(), 48);
  auto out = run_together(eng, prompts, params);
  for (size_t i = 0; i < prompts.size(); ++i)
    ASSERT_EQ(static_cast<int>(out[i].size()), params[i].max_tokens) << "request " << i;
  EXPECT_GT(eng.stats().num_preemptions, 0u) << "the pool was meant to be too small";
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f) << "blocks leaked";
  // Correct, not just complete: a sample checked against runs alone.
  std::vector<std::vector<int32_t>> sample_prompts;
  std::vector<SamplingParams> sample_params;
  for (size_t i = 0; i < prompts.size(); i += 25) {
    sample_prompts.push_back(prompts[i]);
    sample_params.push_back(params[i]);
  }
  auto alone = run_alone(sample_prompts, sample_params);
  for (size_t k = 0; k < alone.size(); ++k) EXPECT_EQ(out[k * 25], alone[k]) << "request " << k * 25;
}

TEST(EngineAbort, AbortingHalfFreesTheirBlocksAndLeavesTheOthersUnchanged) {
  auto prompts = random_prompts(16, 5);
  std::vector<SamplingParams> params(prompts.size(), greedy(20));
  auto alone = run_alone(prompts, params);
  LLMEngine eng(config(), demo_model());
  for (size_t i = 0; i < prompts.size(); ++i) eng.add_request(std::to_string(i), prompts[i], params[i]);
  std::vector<std::vector<int32_t>> out(prompts.size());
  for (int s = 0; s < 5; ++s)
    for (auto& o : eng.step()) {
      auto& v = out[std::stoul(o.request_id)];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  float before = eng.stats().kv_cache_usage;
  for (size_t i = 0; i < prompts.size(); i += 2) EXPECT_TRUE(eng.abort_request(std::to_string(i)));
  EXPECT_LT(eng.stats().kv_cache_usage, before) << "aborted blocks were not freed at once";
  while (eng.has_unfinished())
    for (auto& o : eng.step()) {
      ASSERT_NE(std::stoul(o.request_id) % 2, 0u) << "an aborted request produced output";
      auto& v = out[std::stoul(o.request_id)];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  for (size_t i = 1; i < prompts.size(); i += 2) EXPECT_EQ(out[i], alone[i]) << "request " << i;
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f);
}

TEST(EngineSampling, SeededRequestIsIndependentOfItsBatchNeighbours) {
  auto prompts = random_prompts(12, 9);
  SamplingParams seeded;
  seeded.temperature = 1.0f;
  seeded.top_p = 0.95f;
  seeded.seed = 4242;
  seeded.max_tokens = 24;
  seeded.ignore_eos = true;
  auto alone = run_alone({prompts[0]}, {seeded})[0];
  std::vector<SamplingParams> params(prompts.size(), seeded);
  for (size_t i = 1; i < params.size(); ++i) params[i].seed = 1000 + i;  // other seeds around it
  LLMEngine eng(config(), demo_model());
  auto together = run_together(eng, prompts, params);
  EXPECT_EQ(together[0], alone);
}

TEST(AsyncEngine, StreamsTextThatEqualsTheFinalDecodeAndHonoursStopStrings) {
  auto tok = pkgchat_tokenizer();
  AsyncEngine eng(config(), demo_model(), tok);
  auto prompt = curl_prompt(tok);
  RequestOptions o;
  o.sampling = greedy(60);
  o.sampling.ignore_eos = false;
  auto stream = eng.add_request("a", prompt, o);
  std::string text;
  std::vector<int32_t> ids;
  StreamEvent ev;
  int events = 0;
  while (stream->next(ev) == RequestStream::Poll::kEvent) {
    ++events;
    text += ev.text;
    ids.insert(ids.end(), ev.token_ids.begin(), ev.token_ids.end());
  }
  ASSERT_GT(ids.size(), 3u);
  EXPECT_GT(events, 3);
  // Streamed text continues the prompt's text: decode(prompt + ids) past decode(prompt).
  std::vector<int32_t> all = prompt;
  all.insert(all.end(), ids.begin(), ids.end());
  std::string whole = tok.decode(all, true), head = tok.decode(prompt, true);
  ASSERT_EQ(whole.compare(0, head.size(), head), 0);
  EXPECT_EQ(text, whole.substr(head.size()));

  // A stop string taken from the middle of that answer cuts it there.
  std::string stop = text.substr(text.size() / 2, 6);
  RequestOptions s = o;
  s.stop = {stop};
  auto r = eng.generate({{prompt, s}});
  ASSERT_EQ(r.size(), 1u);
  const auto& c = r[0].choices.at(0);
  EXPECT_EQ(c.finish_reason, FinishReason::kStop);
  EXPECT_EQ(c.stop_reason, stop);
  EXPECT_EQ(c.text, text.substr(0, text.find(stop)));
}

TEST(AsyncEngine, NAndBestOfReturnNChoicesAndAbortEndsAStream) {
  auto tok = pkgchat_tokenizer();
  AsyncEngine eng(config(), demo_model(), tok);
  auto prompt = tok.encode("The package", true);
  RequestOptions o;
  o.sampling.temperature = 1.0f;
  o.sampling.seed = 1;
  o.sampling.max_tokens = 12;
  o.sampling.ignore_eos = true;
  o.n = 3;
  auto r = eng.generate({{prompt, o}});
  ASSERT_EQ(r[0].choices.size(), 3u);
  std::set<std::vector<int32_t>> distinct;
  for (auto& c : r[0].choices) {
    EXPECT_EQ(c.token_ids.size(), 12u);
    distinct.insert(c.token_ids);
  }
  EXPECT_GT(distinct.size(), 1u) << "n choices should differ";

  o.n = 2;
  o.best_of = 4;
  o.sampling.logprobs = 0;
  r = eng.generate({{prompt, o}});
  ASSERT_EQ(r[0].choices.size(), 2u);
  auto sum = [](const ChoiceResult& c) {
    double s = 0;
    for (auto& l : c.logprobs) s += l.logprob;
    return s;
  };
  EXPECT_GE(sum(r[0].choices[0]), sum(r[0].choices[1])) << "best_of keeps the most likely first";

  RequestOptions longrun = o;
  longrun.n = 1;
  longrun.best_of = 0;
  longrun.sampling.max_tokens = 200;
  auto stream = eng.add_request("long", prompt, longrun);
  StreamEvent ev;
  ASSERT_EQ(stream->next(ev), RequestStream::Poll::kEvent);
  eng.abort("long");
  FinishReason last = FinishReason::kNone;
  int tokens = 1;
  while (stream->next(ev, std::chrono::seconds(10)) == RequestStream::Poll::kEvent) {
    tokens += ev.token_ids.size();
    if (ev.finished) last = ev.finish_reason;
  }
  EXPECT_EQ(last, FinishReason::kAbort);
  EXPECT_LT(tokens, 200);
  for (int i = 0; i < 100 && eng.metrics().kv_cache_usage > 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_EQ(eng.metrics().num_running, 0u);
}

TEST(AsyncEngine, InvalidRequestIsRefusedBeforeAnyStreamExists) {
  auto tok = pkgchat_tokenizer();
  AsyncEngine eng(config(), demo_model(), tok);
  RequestOptions o;
  EXPECT_THROW(eng.add_request("x", {}, o), Error);
  EXPECT_THROW(eng.add_request("x", std::vector<int32_t>(300, 5), o), Error);  // over max_model_len
  o.sampling.temperature = -1;
  EXPECT_THROW(eng.add_request("x", {1, 2}, o), Error);
  RequestOptions bad_n;
  bad_n.n = 3;
  bad_n.best_of = 2;
  EXPECT_THROW(eng.add_request("x", {1, 2}, bad_n), Error);
}

// Reasoning before a guided answer (SamplingParams::guide_gate): while the
// reasoning is open the guide does not hold, so the output is the free
// greedy output up to and including the gate's end token; from there on only
// the guide's strings (here three digits) can follow. The gate tokens are
// taken from the free output itself, so the test needs no reasoning model.
TEST(EngineGuided, AReasoningGateDefersTheGuideUntilItsEndToken) {
  auto tok = pkgchat_tokenizer();
  AsyncEngine eng(config(), demo_model(), tok);
  auto prompt = curl_prompt(tok);
  RequestOptions free;
  free.sampling = greedy(12);
  const std::vector<int32_t> ids = eng.generate({{prompt, free}})[0].choices.at(0).token_ids;
  ASSERT_EQ(ids.size(), 12u);
  // The gate's end: the first token not seen before it in the free output.
  size_t k = 2;
  while (k < ids.size() && std::find(ids.begin(), ids.begin() + static_cast<long>(k), ids[k]) != ids.begin() + static_cast<long>(k)) ++k;
  ASSERT_LT(k, ids.size() - 4);
  auto digits_after = [&](const std::vector<int32_t>& out, size_t from) {
    return tok.decode(std::vector<int32_t>(out.begin() + static_cast<long>(from), out.end()), true);
  };
  RequestOptions guided = free;
  guided.sampling.ignore_eos = false;
  guided.guided_regex = "[0-9]{3}";

  // Without a gate the guide holds from the first token.
  auto plain = eng.generate({{prompt, guided}})[0].choices.at(0);
  EXPECT_TRUE(std::regex_match(plain.text, std::regex("[0-9]{3}"))) << plain.text;

  // Opened by the prompt: free up to ids[k], then three digits.
  RequestOptions open = guided;
  open.sampling.guide_gate = ReasoningGate{-1, ids[k], true};
  auto o = eng.generate({{prompt, open}})[0].choices.at(0);
  ASSERT_GT(o.token_ids.size(), k + 1);
  EXPECT_EQ(std::vector<int32_t>(o.token_ids.begin(), o.token_ids.begin() + static_cast<long>(k) + 1),
            std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(k) + 1));
  EXPECT_TRUE(std::regex_match(digits_after(o.token_ids, k + 1), std::regex("[0-9]{3}")))
      << digits_after(o.token_ids, k + 1);

  // Opened by a first token the guide itself would refuse (ids[0], not a digit).
  RequestOptions opened_by_output = guided;
  opened_by_output.sampling.guide_gate = ReasoningGate{ids[0], ids[k], false};
  auto f = eng.generate({{prompt, opened_by_output}})[0].choices.at(0);
  ASSERT_GT(f.token_ids.size(), k + 1);
  EXPECT_EQ(std::vector<int32_t>(f.token_ids.begin(), f.token_ids.begin() + static_cast<long>(k) + 1),
            std::vector<int32_t>(ids.begin(), ids.begin() + static_cast<long>(k) + 1));
  EXPECT_TRUE(std::regex_match(digits_after(f.token_ids, k + 1), std::regex("[0-9]{3}")));

}

// min_tokens beyond the longest text of the constraint: refused (naming both)
// when the guide holds from the first token; with a reasoning gate (whose
// tokens count) it is taken, and the constraint wins over min_tokens at the
// end: the text stays in the language and ends, never one token outside it.
TEST(EngineGuided, MinTokensBeyondTheConstraintIsRefusedOrLosesToIt) {
  auto tok = pkgchat_tokenizer();
  AsyncEngine eng(config(), demo_model(), tok);
  auto prompt = curl_prompt(tok);
  RequestOptions o;
  o.sampling = greedy(30);
  o.sampling.ignore_eos = false;
  o.sampling.min_tokens = 20;
  for (const char* re : {"ab", "(true|false)", "[0-9]{3}"}) {
    o.guided_regex = re;
    try {
      eng.add_request("m", prompt, o);
      ADD_FAILURE() << re << ": accepted";
    } catch (const FieldError& e) {
      EXPECT_EQ(e.field(), "min_tokens");
      EXPECT_NE(std::string(e.what()).find("guided_regex"), std::string::npos) << e.what();
    }
  }
  o.guided_regex = "[0-9]+";  // unbounded: taken
  EXPECT_NO_THROW(eng.generate({{prompt, o}}));
  o.sampling.min_tokens = 3;  // within the bound: taken
  o.guided_regex = "[0-9]{3}";
  EXPECT_NO_THROW(eng.generate({{prompt, o}}));

  o.sampling.min_tokens = 25;
  const std::vector<int32_t> free_ids = [&] {
    RequestOptions f;
    f.sampling = greedy(4);
    return eng.generate({{prompt, f}})[0].choices.at(0).token_ids;
  }();
  o.sampling.guide_gate = ReasoningGate{-1, free_ids[1], true};  // opened by the prompt
  auto c = eng.generate({{prompt, o}})[0].choices.at(0);
  const auto end = std::find(c.token_ids.begin(), c.token_ids.end(), free_ids[1]);
  ASSERT_NE(end, c.token_ids.end());
  // Special tokens kept: a token outside the language (the bug sampled one
  // with every logit at -inf) shows, whatever it decodes to.
  const std::string answer = tok.decode(std::vector<int32_t>(end + 1, c.token_ids.end()), false);
  EXPECT_TRUE(std::regex_match(answer, std::regex("[0-9]{3}(</s>|<\\|end\\|>)?"))) << answer;
  EXPECT_LT(c.token_ids.size(), 25u);
}
