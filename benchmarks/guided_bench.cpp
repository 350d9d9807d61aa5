// Guided decoding's cost per decoding step, on real vocabularies (Llama 2's
// 32k tokens and Qwen3's 151k, tests/data/tokenizers): a JSON schema of a
// tool call compiled to a DFA, and a general JSON grammar (GBNF, recursive),
// then the states a conforming document walks. Args: vocabulary (0 Llama 2,
// 1 Qwen3), constraint (0 schema regex, 1 JSON grammar).
//   BM_GuidedMaskFirst  the mask of a state met for the first time (a walk of
//                       the vocabulary's byte trie; cached afterwards)
//   BM_GuidedMaskApply  what every later step costs: the cached mask applied to
//                       a row of logits, as LLMEngine::apply_guide does
// Counters: mean and p99 microseconds per state / step.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <limits>
#include <memory>
#include <stdexcept>
#include <vector>

#include "text/guided/json_schema_regex.h"
#include "text/guided/matchers.h"
#include "text/guided/token_mask.h"
#include "text/tokenizer/tokenizer.h"

namespace g = halo::text::guided;
namespace fs = std::filesystem;

namespace {

const char* kSchema = R"({"type": "object", "properties": {
  "name": {"enum": ["get_weather", "search", "send_email"]},
  "arguments": {"type": "object", "properties": {
    "city": {"type": "string", "maxLength": 40},
    "days": {"type": "integer", "minimum": 1, "maximum": 14},
    "units": {"enum": ["metric", "imperial"]}},
    "required": ["city", "days"]}},
  "required": ["name", "arguments"]})";
// JSON as a grammar: values nest, so this needs the pushdown matcher.
const char* kJsonGrammar = R"(
root   ::= value
value  ::= object | array | string | number | "true" | "false" | "null"
object ::= "{" ws ( member ( "," ws member )* )? "}"
member ::= string ws ":" ws value ws
array  ::= "[" ws ( value ws ( "," ws value ws )* )? "]"
string ::= "\"" ( [^"\\\x00-\x1f] | "\\" ( ["\\/bfnrt] | "u" [0-9a-fA-F]{4} ) )* "\""
number ::= "-"? ( "0" | [1-9] [0-9]* ) ( "." [0-9]+ )? ( [eE] [-+]? [0-9]+ )?
ws     ::= [ \t\n]*
)";
const char* kDocument =
    R"({"name": "get_weather", "arguments": {"city": "San Francisco", "days": 3, "units": "metric"}})";

struct Setup {
  halo::text::Tokenizer tok;
  std::shared_ptr<const g::TokenVocab> vocab;
  std::shared_ptr<const g::ByteDfa> dfa;
  std::shared_ptr<const g::Grammar> grammar;
  std::vector<int32_t> doc;  // the document's tokens
};

Setup& setup(int which) {
  static std::unique_ptr<Setup> s[2];
  if (!s[which]) {
    const char* name = which == 0 ? "llama2" : "qwen3";
    auto tok =
        halo::text::Tokenizer::from_model_dir(fs::path(HALO_TEST_DATA_DIR) / "tokenizers" / name);
    auto vocab = std::make_shared<const g::TokenVocab>(tok);
    auto dfa = std::make_shared<const g::ByteDfa>(
        g::ByteDfa::compile(g::json_schema_to_regex(nlohmann::ordered_json::parse(kSchema))));
    auto grammar = std::make_shared<const g::Grammar>(g::Grammar::compile(kJsonGrammar));
    // The document as guided decoding produces it: longest allowed token first
    // (a SentencePiece encode would start with "▁{", a space the schema forbids).
    std::vector<int32_t> doc;
    const std::string text = kDocument;
    const auto& trie = vocab->trie();
    for (size_t i = 0; i < text.size();) {
      int32_t node = 0, best = -1;
      size_t best_len = 0;
      for (size_t j = i; j < text.size(); ++j) {
        const auto& ch = trie[static_cast<size_t>(node)].children;
        auto it = std::find_if(ch.begin(), ch.end(), [&](const auto& c) {
          return c.first == static_cast<uint8_t>(text[j]);
        });
        if (it == ch.end()) break;
        node = it->second;
        if (!trie[static_cast<size_t>(node)].tokens.empty())
          best = trie[static_cast<size_t>(node)].tokens[0], best_len = j - i + 1;
      }
      if (best < 0) throw std::runtime_error("the document has a byte no token starts with");
      doc.push_back(best);
      i += best_len;
    }
    s[which] = std::make_unique<Setup>(Setup{std::move(tok), std::move(vocab), std::move(dfa),
                                             std::move(grammar), std::move(doc)});
  }
  return *s[which];
}

std::unique_ptr<g::Guide> make_guide(const Setup& s, int64_t kind) {
  auto m = kind == 0 ? g::make_regex_matcher(s.dfa) : g::make_grammar_matcher(s.grammar);
  return std::make_unique<g::Guide>(std::move(m), s.vocab, "bench");
}

void report(benchmark::State& state, std::vector<double>& us) {
  std::sort(us.begin(), us.end());
  double sum = 0;
  for (double u : us) sum += u;
  state.counters["mean_us"] = us.empty() ? 0 : sum / static_cast<double>(us.size());
  state.counters["p99_us"] = us.empty() ? 0 : us[std::min(us.size() - 1, us.size() * 99 / 100)];
  state.counters["vocab"] =
      static_cast<double>(setup(static_cast<int>(state.range(0))).vocab->size());
}

void BM_GuidedMaskFirst(benchmark::State& state) {
  Setup& s = setup(static_cast<int>(state.range(0)));
  std::vector<double> us;
  for (auto _ : state) {
    auto guide = make_guide(s, state.range(1));  // empty cache: every state is new
    int32_t st = guide->start();
    for (int32_t t : s.doc) {
      const auto t0 = std::chrono::steady_clock::now();
      benchmark::DoNotOptimize(guide->allowed(st)->data());
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
      st = guide->advance(st, t);
      if (st == g::Guide::kDead) {
        state.SkipWithError("the document does not match its constraint");
        return;
      }
    }
  }
  report(state, us);
}

void BM_GuidedMaskApply(benchmark::State& state) {
  Setup& s = setup(static_cast<int>(state.range(0)));
  auto guide = make_guide(s, state.range(1));
  std::vector<int32_t> states;
  for (int32_t st = guide->start(); int32_t t : s.doc) {
    guide->allowed(st);  // warm the cache
    states.push_back(st);
    st = guide->advance(st, t);
  }
  const int vocab = s.vocab->size();
  std::vector<float> logits(static_cast<size_t>(vocab), 0.5f);
  std::vector<double> us;
  for (auto _ : state) {
    for (int32_t st : states) {
      const auto t0 = std::chrono::steady_clock::now();
      g::apply_mask(*guide->allowed(st), vocab, logits.data(), vocab);
      benchmark::DoNotOptimize(logits.data());
      us.push_back(
          std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  report(state, us);
}

}  // namespace

BENCHMARK(BM_GuidedMaskFirst)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"vocab", "grammar"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);
BENCHMARK(BM_GuidedMaskApply)
    ->ArgsProduct({{0, 1}, {0, 1}})
    ->ArgNames({"vocab", "grammar"})
    ->Unit(benchmark::kMillisecond);
