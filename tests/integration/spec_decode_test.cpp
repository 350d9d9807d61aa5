// Speculative decoding on the real CPU plugin and the embedded model: greedy
// output with proposals is the output without them, token for token, in
// every scheduling mode (the CPU fast path is bitwise batch invariant, so a
// verify row equals the decode row it replaces); sampling keeps the target's
// distribution (two-sample chi-square against plain sampling, with a wrong
// acceptance rule as the control that must fail); no block leaks.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <random>
#include <regex>

#include <unistd.h>

#include "common/error.h"
#include "engine/async_engine.h"
#include "demo_engine.h"

namespace fs = std::filesystem;
using namespace halo;
using namespace halo::engine;

namespace {

const std::string kPluginPath = test_support::kCpuPlugin;
using test_support::demo_model;
using test_support::greedy;

EngineConfig config(const std::string& spec = "", int kv_tokens = 1 << 15) {
  EngineConfig c;
  c.device = kPluginPath;
  c.max_model_len = 256;
  c.max_num_seqs = 64;
  c.max_kv_tokens = kv_tokens;
  c.block_size = 16;
  c.threads = 2;
  c.speculative_config = spec;
  return c;
}

std::string model_dir(const char* name) { return (fs::path(HALO_SOURCE_DIR) / "models" / name).string(); }

// A draft model as proposer: the shipped distilled draft, or the target itself.
std::string draft(const char* name, int k) {
  return R"({"model": ")" + model_dir(name) + R"(", "num_speculative_tokens": )" + std::to_string(k) +
         R"(, "disable_by_batch_size": 1000})";
}

std::string ngram(int k) {
  return R"({"method": "ngram", "num_speculative_tokens": )" + std::to_string(k) +
         R"(, "prompt_lookup_max": 4, "prompt_lookup_min": 2, "disable_by_batch_size": 1000})";
}

// Prompts that quote themselves (random snippets repeated), so prompt lookup
// finds matches, and plain random ones, where it mostly finds none.
std::vector<std::vector<int32_t>> quoting_prompts(int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> tok(7, 4095);
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> snippet(8 + i % 9), p;
    for (auto& t : snippet) t = tok(rng);
    for (int r = 0; r < 2 + i % 3; ++r) {
      p.insert(p.end(), snippet.begin(), snippet.end());
      if (i % 4 == 3) p.push_back(tok(rng));  // quotes with a word between
    }
    if (i % 5 == 4) p.assign(snippet.begin(), snippet.end());  // no repetition at all
    out.push_back(std::move(p));
  }
  return out;
}


std::vector<std::vector<int32_t>> run_together(LLMEngine& eng,
                                               const std::vector<std::vector<int32_t>>& prompts,
                                               const SamplingParams& params) {
  for (size_t i = 0; i < prompts.size(); ++i)
    eng.add_request(std::to_string(i), prompts[i], params);
  std::vector<std::vector<int32_t>> out(prompts.size());
  while (eng.has_unfinished())
    for (auto& o : eng.step()) {
      auto& v = out[std::stoul(o.request_id)];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
      EXPECT_EQ(v, o.seq->output_ids) << "the outputs' new tokens add up to the sequence";
    }
  EXPECT_EQ(eng.stats().kv_cache_usage, 0.0f) << "blocks leaked";
  return out;
}

const std::vector<std::vector<int32_t>>& plain_outputs() {
  static const auto out = [] {
    LLMEngine eng(config(), demo_model());
    return run_together(eng, quoting_prompts(32, 11), greedy(40));
  }();
  return out;
}

struct Mode {
  const char* name;
  int k;
  bool chunked = true;
  bool prefix_caching = false;
  int max_batched_tokens = 0;
  int kv_tokens = 1 << 15;
  bool one_at_a_time = false;
  const char* draft = nullptr;  // a draft model's directory under models/, else prompt lookup
};

void PrintTo(const Mode& m, std::ostream* os) { *os << m.name; }

class SpecGreedy : public ::testing::TestWithParam<Mode> {};

TEST_P(SpecGreedy, OutputEqualsPlainDecoding) {
  const Mode m = GetParam();
  EngineConfig c = config(m.draft ? draft(m.draft, m.k) : ngram(m.k), m.kv_tokens);
  c.enable_chunked_prefill = m.chunked;
  c.enable_prefix_caching = m.prefix_caching;
  c.max_num_batched_tokens = m.max_batched_tokens;
  LLMEngine eng(c, demo_model());
  const auto prompts = quoting_prompts(32, 11);
  std::vector<std::vector<int32_t>> got;
  if (m.one_at_a_time) {
    for (const auto& p : prompts) got.push_back(run_together(eng, {p}, greedy(40))[0]);
  } else {
    got = run_together(eng, prompts, greedy(40));
  }
  for (size_t i = 0; i < prompts.size(); ++i)
    EXPECT_EQ(got[i], plain_outputs()[i]) << "prompt " << i;
  const auto st = eng.stats();
  EXPECT_GT(st.spec_num_accepted_tokens, 0u)
      << "nothing was accepted: the test would pass vacuously";
  const bool self_draft = m.draft && std::string(m.draft) == "pkgchat-5m";
  if (self_draft) {  // the target as its own draft proposes its argmax: every proposal is accepted
    EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
  } else {
    EXPECT_LT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens) << "nothing was rejected";
  }
  if (m.kv_tokens < 4096) {
    EXPECT_GT(st.num_preemptions, 0u);
  }
  ASSERT_EQ(st.spec_accepted_per_pos.size(), static_cast<size_t>(m.k));
  uint64_t sum = 0;
  for (size_t j = 0; j < st.spec_accepted_per_pos.size(); ++j) {
    sum += st.spec_accepted_per_pos[j];
    if (j > 0) {
      EXPECT_LE(st.spec_accepted_per_pos[j], st.spec_accepted_per_pos[j - 1]);
    }
  }
  EXPECT_EQ(sum, st.spec_num_accepted_tokens);
}

INSTANTIATE_TEST_SUITE_P(Modes, SpecGreedy,
                         ::testing::Values(Mode{"k1", 1}, Mode{"k3", 3}, Mode{"k5", 5},
                                           Mode{"alone", 3, true, false, 0, 1 << 15, true},
                                           Mode{"chunked64", 4, true, false, 64},
                                           Mode{"prefix_cache", 4, true, true},
                                           Mode{"preemption", 4, true, false, 0, 1024},
                      Mode{"draft_self", 4, true, false, 0, 1 << 15, false, "pkgchat-5m"},
                      Mode{"draft", 4, true, false, 0, 1 << 15, false, "pkgchat-5m-draft"},
                      Mode{"draft_alone", 3, true, false, 0, 1 << 15, true, "pkgchat-5m-draft"},
                      Mode{"draft_chunked64", 4, true, false, 64, 1 << 15, false, "pkgchat-5m-draft"},
                      Mode{"draft_prefix_cache", 4, true, true, 0, 1 << 15, false, "pkgchat-5m-draft"},
                      Mode{"draft_self_preemption", 4, true, false, 0, 1024, false, "pkgchat-5m"}),
                         [](const auto& info) { return std::string(info.param.name); });

// The target's own greedy continuation as proposals: everything is accepted
// (each verify ends with the bonus token); corrupted at random, proposals are
// rejected mid-way. The output never changes.
TEST(SpecReplay, AcceptAllAndRejectMidwayGiveTheSameOutput) {
  const auto prompts = quoting_prompts(32, 11);
  for (double corrupt : {0.0, 0.5}) {
    LLMEngine eng(config(ngram(4)), demo_model());  // ngram's proposer replaced
    auto replay = std::make_unique<spec::ReplayProposer>(4096, corrupt, 5);
    for (size_t i = 0; i < prompts.size(); ++i)
      replay->set_script(std::to_string(i), plain_outputs()[i]);
    eng.set_proposer(std::move(replay), 4);
    auto got = run_together(eng, prompts, greedy(40));
    for (size_t i = 0; i < prompts.size(); ++i)
      EXPECT_EQ(got[i], plain_outputs()[i]) << corrupt << " prompt " << i;
    const auto st = eng.stats();
    if (corrupt == 0.0) {
      EXPECT_EQ(st.spec_num_accepted_tokens, st.spec_num_draft_tokens);
      EXPECT_GT(st.spec_num_drafts, 0u);
    } else {
      EXPECT_GT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens / 10);
      EXPECT_LT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens * 8 / 10);
    }
  }
}

// An EAGLE/MTP-style proposer reads the target's hidden states (ABI v1.5).
// This one proposes nothing and keeps, per request, the token each hidden row
// predicts through the tied embeddings, computed here in double precision:
// under greedy decoding that is the token the engine emits (near ties aside).
class HiddenStateReader : public spec::Proposer {
 public:
  explicit HiddenStateReader(const model::LoadedModel& m) : hidden_(m.config().spec.hidden_size) {
    for (const auto& w : m.weights())
      if (std::string(w.name) == HALO_WEIGHT_EMBED_TOKENS) embed_ = to_f32(*w.tensor);
  }
  bool wants_hidden_states() const override { return true; }
  void propose(std::span<const spec::ProposeRequest>) override {}
  void after_step(const SchedulerOutput& step, const ModelRunner& target) override {
    for (size_t i = 0; i < step.scheduled.size(); ++i) {
      const auto rows = target.sample_rows(i);
      if (rows.count == 0) continue;
      const float* h = target.hidden_at(rows.first_row);
      ASSERT_NE(h, nullptr);
      predicted[step.scheduled[i].seq->request_id].push_back(argmax_through_embeddings(h));
    }
  }
  std::map<std::string, std::vector<int32_t>> predicted;

 private:
  static std::vector<float> to_f32(const DLTensor& t) {
    size_t n = 1;
    for (int d = 0; d < t.ndim; ++d) n *= static_cast<size_t>(t.shape[d]);
    std::vector<float> v(n);
    const auto* p = static_cast<const uint16_t*>(t.data);  // bf16, as the demo model stores it
    for (size_t j = 0; j < n; ++j) {
      const uint32_t u = uint32_t{p[j]} << 16;
      std::memcpy(&v[j], &u, 4);
    }
    return v;
  }
  int32_t argmax_through_embeddings(const float* h) const {
    const auto H = static_cast<size_t>(hidden_);
    int32_t best = 0;
    double best_v = -1e300;
    for (size_t v = 0; v < embed_.size() / H; ++v) {
      double acc = 0;
      for (size_t k = 0; k < H; ++k) acc += double(h[k]) * double(embed_[v * H + k]);
      if (acc > best_v) best_v = acc, best = static_cast<int32_t>(v);
    }
    return best;
  }
  int hidden_;
  std::vector<float> embed_;
};

TEST(SpecHiddenStates, AProposerReadsTheRowsLmHeadTook) {
  const auto m = demo_model();
  ASSERT_EQ(m->weights()[0].tensor->dtype.code, kDLBfloat);
  LLMEngine eng(config(), m);
  auto reader = std::make_unique<HiddenStateReader>(*m);
  HiddenStateReader* seen = reader.get();
  eng.set_proposer(std::move(reader), 2);
  const auto prompts = quoting_prompts(8, 11);
  const auto got = run_together(eng, prompts, greedy(20));
  size_t same = 0, total = 0;
  for (size_t i = 0; i < prompts.size(); ++i) {
    const auto& p = seen->predicted[std::to_string(i)];
    ASSERT_EQ(p.size(), got[i].size()) << "one hidden row per sampled token";
    for (size_t j = 0; j < p.size(); ++j) same += p[j] == got[i][j], ++total;
  }
  EXPECT_GE(same, total * 97 / 100) << same << " of " << total << " tokens are the argmax of hidden x embeddings";
}

// End of sequence, stop ids, max_tokens, n > 1 and stop strings with
// proposals, through the async API: results equal plain decoding's.
TEST(SpecAsync, StopsGroupsAndStopStringsMatchPlainDecoding) {
  auto tok = text::Tokenizer::from_model_dir(fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m");
  AsyncEngine plain(config(), demo_model(), tok), spec(config(ngram(4)), demo_model(), tok);
  auto prompt = tok.encode(
      "<s><|user|>\nWhat is curl? What is curl? What is wget?<|end|>\n<|assistant|>\n", false);
  RequestOptions free;
  free.sampling = greedy(60);
  free.sampling.ignore_eos = false;
  const auto base = plain.generate({{prompt, free}})[0].choices.at(0);
  ASSERT_GT(base.token_ids.size(), 12u);
  std::vector<RequestOptions> variants;
  variants.push_back(free);
  RequestOptions stop_id = free;
  stop_id.sampling.stop_token_ids = {base.token_ids[9]};
  variants.push_back(stop_id);
  RequestOptions stop_str = free;
  const std::vector<int32_t> quoted = {base.token_ids[7], base.token_ids[8]};
  stop_str.stop = {tok.decode(quoted, true)};
  variants.push_back(stop_str);
  RequestOptions group = free;
  group.n = 3;
  group.sampling.max_tokens = 13;
  group.sampling.logprobs = 2;
  variants.push_back(group);
  for (size_t v = 0; v < variants.size(); ++v) {
    auto a = plain.generate({{prompt, variants[v]}})[0],
         b = spec.generate({{prompt, variants[v]}})[0];
    ASSERT_EQ(a.choices.size(), b.choices.size());
    for (size_t c = 0; c < a.choices.size(); ++c) {
      EXPECT_EQ(a.choices[c].token_ids, b.choices[c].token_ids) << "variant " << v;
      EXPECT_EQ(a.choices[c].text, b.choices[c].text) << "variant " << v;
      EXPECT_EQ(a.choices[c].finish_reason, b.choices[c].finish_reason) << "variant " << v;
      EXPECT_EQ(a.choices[c].stop_reason, b.choices[c].stop_reason) << "variant " << v;
      ASSERT_EQ(a.choices[c].logprobs.size(), b.choices[c].logprobs.size());
      for (size_t t = 0; t < a.choices[c].logprobs.size(); ++t) {
        EXPECT_EQ(a.choices[c].logprobs[t].logprob, b.choices[c].logprobs[t].logprob);
        EXPECT_EQ(a.choices[c].logprobs[t].top, b.choices[c].logprobs[t].top);
      }
    }
  }
  EXPECT_GT(spec.engine().stats().spec_num_accepted_tokens, 0u);
}

// Structured output: the guide filters proposals and the verify applies it
// to every row; the output is plain decoding's and matches the regex.
TEST(SpecAsync, GuidedOutputMatchesPlainDecoding) {
  auto tok = text::Tokenizer::from_model_dir(fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m");
  AsyncEngine plain(config(), demo_model(), tok), spec(config(ngram(4)), demo_model(), tok);
  auto prompt = tok.encode("<s><|user|>\nList 7 7 7 7 7 7 7<|end|>\n<|assistant|>\n", false);
  RequestOptions o;
  o.sampling = greedy(40);
  o.sampling.ignore_eos = false;
  o.guided_regex = "(7 ){3,12}(ab|cd)";
  auto a = plain.generate({{prompt, o}})[0].choices.at(0),
       b = spec.generate({{prompt, o}})[0].choices.at(0);
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_TRUE(std::regex_match(b.text, std::regex("(7 ){3,12}(ab|cd)"))) << b.text;
}

// {"model": ID} names the draft as vLLM does: a Hugging Face id, found here
// in an offline Hub cache laid out as huggingface_hub lays it out.
TEST(SpecConfigInEngine, ADraftGivenAsAHubIdIsFoundInTheCache) {
  const fs::path cache = fs::temp_directory_path() / ("halo-spec-hub-" + std::to_string(::getpid()));
  const fs::path snap = cache / "models--halo-test--pkgchat-5m-draft" / "snapshots" / "0123456789abcdef0123456789abcdef01234567";
  fs::create_directories(snap);
  fs::create_directories(snap.parent_path().parent_path() / "refs");
  std::ofstream(snap.parent_path().parent_path() / "refs" / "main") << snap.filename().string();
  for (const auto& f : fs::directory_iterator(model_dir("pkgchat-5m-draft")))
    if (f.is_regular_file()) fs::create_symlink(f.path(), snap / f.path().filename());
  ::setenv("HF_HUB_CACHE", cache.c_str(), 1);
  ::setenv("HF_HUB_OFFLINE", "1", 1);
  const std::string spec =
      R"({"model": "halo-test/pkgchat-5m-draft", "num_speculative_tokens": 3, "disable_by_batch_size": 1000})";
  std::vector<std::vector<int32_t>> got;
  {
    LLMEngine eng(config(spec), demo_model());
    got = run_together(eng, quoting_prompts(8, 11), greedy(40));
    EXPECT_GT(eng.stats().spec_num_accepted_tokens, 0u);
  }
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], plain_outputs()[i]) << "prompt " << i;
  try {
    LLMEngine eng(config(R"({"model": "halo-test/no-such-draft", "num_speculative_tokens": 3})"), demo_model());
    FAIL() << "a draft missing from the offline cache was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("halo-test/no-such-draft"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("HF_HUB_OFFLINE"), std::string::npos) << e.what();
  }
  ::unsetenv("HF_HUB_CACHE");
  ::unsetenv("HF_HUB_OFFLINE");
  fs::remove_all(cache);
}

TEST(SpecConfigInEngine, BeamSearchAndBadConfigsAreRefused) {
  LLMEngine eng(config(ngram(3)), demo_model());
  BeamParams beam;
  beam.width = 2;
  try {
    eng.add_beam_request("b", {1, 2, 3}, greedy(4), beam);
    FAIL() << "beam search with speculation was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("speculative"), std::string::npos) << e.what();
  }
  EXPECT_THROW(
      LLMEngine(config(R"({"method": "eagle", "num_speculative_tokens": 3})"), demo_model()),
      Error);
  EXPECT_THROW(LLMEngine(config(R"({"method": "ngram"})"), demo_model()), Error);
}

// A seeded request is reproducible with speculation: every draw (the draft's
// proposals, the acceptance tests, the residual) comes from its generator in
// a fixed order. Also runs the draft's sampled path in the quick sanitizer run.
TEST(SpecSeeds, SeededSamplingWithADraftIsReproducible) {
  const auto prompts = quoting_prompts(8, 3);
  SamplingParams p;
  p.temperature = 0.8f;
  p.top_p = 0.95f;
  p.max_tokens = 24;
  p.ignore_eos = true;
  p.seed = 42;
  std::vector<std::vector<int32_t>> runs[2];
  uint64_t accepted = 0, proposed = 0;
  for (auto& run : runs) {
    LLMEngine eng(config(draft("pkgchat-5m-draft", 3)), demo_model());
    run = run_together(eng, prompts, p);
    accepted = eng.stats().spec_num_accepted_tokens;
    proposed = eng.stats().spec_num_draft_tokens;
  }
  EXPECT_EQ(runs[0], runs[1]);
  EXPECT_GT(accepted, 0u);
  EXPECT_LT(accepted, proposed);
}

TEST(SpecConfigInEngine, ADraftWithAnotherVocabularyOrMissingIsRefused) {
  try {
    LLMEngine(config(draft("does-not-exist", 3)), demo_model());
    FAIL() << "a missing draft was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("does-not-exist"), std::string::npos) << e.what();
  }
}

// ------------------------------------------------------------ sampling

// Draws the first `len` tokens of `n` seeded requests at temperature 0.6
// with top-k and top-p.
std::vector<std::vector<int32_t>> sample_many(LLMEngine& eng, const std::vector<int32_t>& prompt,
                                              int n, int len, uint64_t seed0) {
  std::vector<std::vector<int32_t>> out(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) {
    SamplingParams p;
    p.temperature = 0.6f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.max_tokens = len;
    p.ignore_eos = true;
    p.seed = seed0 + static_cast<uint64_t>(i);
    eng.add_request(std::to_string(i), prompt, p);
  }
  while (eng.has_unfinished())
    for (auto& o : eng.step()) {
      auto& v = out[std::stoul(o.request_id)];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  return out;
}

// Two-sample chi-square of the token at `pos` (bins under 10 in total pooled);
// statistic minus the alpha = 1e-3 critical value.
double two_sample_excess(const std::vector<std::vector<int32_t>>& a,
                         const std::vector<std::vector<int32_t>>& b, size_t pos) {
  std::map<int32_t, std::pair<double, double>> bins;
  for (const auto& s : a) bins[s[pos]].first++;
  for (const auto& s : b) bins[s[pos]].second++;
  double stat = 0, pa = 0, pb = 0;
  int df = -1;
  const double na = static_cast<double>(a.size()), nb = static_cast<double>(b.size());
  auto add = [&](double x, double y) {
    const double ea = (x + y) * na / (na + nb), eb = (x + y) * nb / (na + nb);
    stat += (x - ea) * (x - ea) / ea + (y - eb) * (y - eb) / eb;
    ++df;
  };
  for (const auto& [t, c] : bins) {
    if (c.first + c.second < 10) {
      pa += c.first, pb += c.second;
      continue;
    }
    add(c.first, c.second);
  }
  if (pa + pb > 0) add(pa, pb);
  const double d = std::max(1, df), z = 3.090;
  return stat - d * std::pow(1 - 2 / (9 * d) + z * std::sqrt(2 / (9 * d)), 3);
}

// Proposals are the greedy continuation (30% corrupted) while the sample
// follows it: accepted often, rejected often.
TEST(SpecSampling, TokensFromVerifiesKeepTheTargetsDistribution) {
  auto tok = text::Tokenizer::from_model_dir(fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m");
  const auto prompt = tok.encode("<s><|user|>\nWhat does apt do?<|end|>\n<|assistant|>\n", false);
  const int n = 2000, len = 4;
  EngineConfig plain_cfg = config(), spec_cfg = config(ngram(3));
  plain_cfg.enable_prefix_caching = spec_cfg.enable_prefix_caching =
      true;  // the prompt is prefilled once
  LLMEngine plain_eng(plain_cfg, demo_model());
  const auto plain = sample_many(plain_eng, prompt, n, len, 1000);
  LLMEngine greedy_eng(config(), demo_model());
  const auto script = run_together(greedy_eng, {prompt}, greedy(len))[0];
  auto replay = [&](LLMEngine& eng) {
    auto r = std::make_unique<spec::ReplayProposer>(4096, 0.3, 3);
    for (int i = 0; i < n; ++i) r->set_script(std::to_string(i), script);
    eng.set_proposer(std::move(r), 3);
  };
  LLMEngine spec_eng(spec_cfg, demo_model());
  replay(spec_eng);
  const auto spec = sample_many(spec_eng, prompt, n, len, 50000);
  const auto st = spec_eng.stats();
  EXPECT_GT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens / 8)
      << "too few accepted to test both paths";
  EXPECT_LT(st.spec_num_accepted_tokens, st.spec_num_draft_tokens * 4 / 5)
      << "too few rejected to test both paths";
  for (size_t pos = 1; pos < static_cast<size_t>(len); ++pos)
    EXPECT_LT(two_sample_excess(plain, spec, pos), 0) << "token " << pos;
  // A draft model's proposals, drawn from its own distribution q (the general
  // rejection rule with a residual), keep the target's distribution too.
  LLMEngine draft_eng(config(draft("pkgchat-5m-draft", 3)), demo_model());
  const auto drafted = sample_many(draft_eng, prompt, n, len, 70000);
  const auto dst = draft_eng.stats();
  EXPECT_GT(dst.spec_num_accepted_tokens, dst.spec_num_draft_tokens / 8);
  EXPECT_LT(dst.spec_num_accepted_tokens, dst.spec_num_draft_tokens * 7 / 8);
  for (size_t pos = 1; pos < static_cast<size_t>(len); ++pos)
    EXPECT_LT(two_sample_excess(plain, drafted, pos), 0) << "draft model, token " << pos;
  // The control: accepting every proposal is not lossless, and the test sees it.
  LLMEngine wrong_eng(spec_cfg, demo_model());
  wrong_eng.set_accept_rule_for_test(spec::AcceptRule::kAlwaysAccept);
  replay(wrong_eng);
  const auto wrong = sample_many(wrong_eng, prompt, n, len, 90000);
  EXPECT_GT(two_sample_excess(plain, wrong, 1), 0);
}

}  // namespace
