// Tests of GBNF grammars for guided decoding (text/guided/grammar.h and the
// pushdown matcher): the grammar corpus in tests/data/grammars, whose valid
// and invalid examples were written by hand and checked by an independent
// Earley recognizer (tests/reference/gbnf.py, gbnf_test.py); malformed
// grammars refused with a message naming the fault (errors.json); left
// recursion refused; token masks equal to advancing every token on its own.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"
#include "text/guided/grammar.h"
#include "text/guided/matchers.h"
#include "text/guided/token_mask.h"

namespace fs = std::filesystem;
namespace g = halo::text::guided;

namespace {

const fs::path kCorpus = fs::path(HALO_TEST_DATA_DIR) / "grammars";

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// One JSON string literal per line.
std::vector<std::string> examples(const fs::path& p) {
  std::vector<std::string> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).get<std::string>());
  return out;
}

std::unique_ptr<g::ByteMatcher> matcher(const std::string& gbnf) {
  return g::make_grammar_matcher(std::make_shared<const g::Grammar>(g::Grammar::compile(gbnf)));
}

// kDead at the first byte that breaks the match, else the state after all of them.
int32_t walk(g::ByteMatcher& m, const std::string& text) {
  int32_t s = m.start();
  for (char c : text) {
    s = m.advance(s, std::string_view(&c, 1));
    if (s == g::ByteMatcher::kDead) break;
  }
  return s;
}

bool matches(g::ByteMatcher& m, const std::string& text) {
  const int32_t s = walk(m, text);
  return s != g::ByteMatcher::kDead && m.accepting(s);
}

std::vector<std::string> corpus_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kCorpus))
    if (e.path().extension() == ".gbnf") names.push_back(e.path().stem().string());
  std::sort(names.begin(), names.end());
  return names;
}

TEST(GrammarCorpus, ValidExamplesMatchAndEveryPrefixStaysAlive) {
  const auto names = corpus_names();
  ASSERT_GE(names.size(), 12u);
  for (const auto& name : names) {
    auto m = matcher(read_file(kCorpus / (name + ".gbnf")));
    const auto valid = examples(kCorpus / (name + ".valid.txt"));
    ASSERT_GE(valid.size(), 6u) << name;
    for (const auto& v : valid) {
      EXPECT_TRUE(matches(*m, v)) << name << ": " << v;
      for (size_t i = 0; i <= v.size(); ++i)
        ASSERT_NE(walk(*m, v.substr(0, i)), g::ByteMatcher::kDead)
            << name << ": prefix " << i << " of " << v;
    }
  }
}

TEST(GrammarCorpus, InvalidExamplesDoNotMatch) {
  for (const auto& name : corpus_names()) {
    auto m = matcher(read_file(kCorpus / (name + ".gbnf")));
    const auto invalid = examples(kCorpus / (name + ".invalid.txt"));
    ASSERT_GE(invalid.size(), 6u) << name;
    for (const auto& v : invalid) EXPECT_FALSE(matches(*m, v)) << name << ": " << v;
  }
}

TEST(GrammarErrors, MalformedGrammarsNameTheirFault) {
  const auto cases = nlohmann::json::parse(read_file(kCorpus / "errors.json"));
  ASSERT_GE(cases.size(), 11u);
  for (const auto& c : cases) {
    const std::string text = c["grammar"];
    std::vector<std::string> words;
    if (c.contains("error")) words.push_back(c["error"]);
    if (c.contains("error_any"))
      for (const auto& w : c["error_any"]) words.push_back(w);
    try {
      g::Grammar::compile(text);
      ADD_FAILURE() << "accepted: " << text;
    } catch (const halo::Error& e) {
      std::string msg = e.what();
      for (auto& ch : msg) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
      EXPECT_EQ(msg.rfind("grammar: line ", 0), 0u) << msg;
      bool named = false;
      for (const auto& w : words) named = named || msg.find(w) != std::string::npos;
      EXPECT_TRUE(named) << text << " -> " << msg;
    }
  }
}

TEST(GrammarErrors, ClassDialectAsTheReferenceHasIt) {
  // tests/reference/gbnf.py's choices: empty classes and a dash after a range are errors.
  for (const char* gbnf :
       {"root ::= []", "root ::= [^]", "root ::= [a-c-e]", "root ::= \"\\uD800\""})
    EXPECT_THROW(g::Grammar::compile(gbnf), halo::Error) << gbnf;
  auto m = matcher("root ::= [-a] [a-] [+--]");
  EXPECT_TRUE(matches(*m, "--,"));
  EXPECT_TRUE(matches(*m, "aa+"));
}

TEST(GrammarErrors, LeftRecursionIsRefusedWithAHint) {
  for (const char* gbnf : {"root ::= root \"a\" | \"b\"",
                           "root ::= expr\nexpr ::= term | expr \"+\" term\nterm ::= [0-9]",
                           "root ::= a\na ::= b \"x\" | \"y\"\nb ::= c?\nc ::= a"}) {
    try {
      g::Grammar::compile(gbnf);
      ADD_FAILURE() << "accepted: " << gbnf;
    } catch (const halo::Error& e) {
      EXPECT_NE(std::string(e.what()).find("left-recursive"), std::string::npos) << e.what();
    }
  }
}

TEST(GrammarMatcher, RecursionAtTheEndAndNullableRepetitionAreFine) {
  // Right recursion is a tail call; a star over a nullable item cannot loop.
  auto right = matcher("root ::= \"a\" root | \"\"");
  EXPECT_TRUE(matches(*right, ""));
  EXPECT_TRUE(matches(*right, std::string(5000, 'a')));
  EXPECT_FALSE(matches(*right, "aab"));
  auto nullable = matcher("root ::= (\"x\"? \"y\"?)* \"z\"");
  EXPECT_TRUE(matches(*nullable, "xyyxz"));
  EXPECT_TRUE(matches(*nullable, "z"));
  EXPECT_FALSE(matches(*nullable, "xy"));
}

TEST(GrammarMatcher, RepetitionKeepsOneStateAndNestingIsBounded) {
  auto m = matcher("root ::= \"[\" ( root | [a-z] )* \"]\"");
  // A long flat run revisits one configuration (its masks are cached).
  int32_t s = walk(*m, "[a");
  const int32_t again = walk(*m, "[" + std::string(1000, 'a'));
  EXPECT_EQ(s, again);
  std::string deep(300, '[');
  deep += "x" + std::string(300, ']');
  EXPECT_TRUE(matches(*m, deep));
  EXPECT_FALSE(matches(*m, deep + "]"));
}

TEST(GrammarMatcher, RulesThatNeverCompleteAreDropped) {
  // `loop` can never end, so its alternative is gone: after "x" nothing is alive.
  auto m = matcher("root ::= \"a\" | \"x\" loop\nloop ::= \"x\" loop");
  EXPECT_TRUE(matches(*m, "a"));
  EXPECT_EQ(walk(*m, "x"), g::ByteMatcher::kDead);
  EXPECT_THROW(g::Grammar::compile("root ::= \"x\" root"), halo::Error);
}

TEST(GrammarMatcher, ClassesMatchWholeUtf8Characters) {
  auto m = matcher("root ::= [^a-z]+ .");
  EXPECT_TRUE(matches(*m, "É日😀x"));
  EXPECT_FALSE(matches(*m, "a\n"));
  EXPECT_TRUE(matches(*m, "Z\n"));
  EXPECT_EQ(walk(*m, "\xC3"), walk(*m, "\xC3"));  // half a character is alive
  EXPECT_NE(walk(*m, "\xC3"), g::ByteMatcher::kDead);
  EXPECT_EQ(walk(*m, "\xC3\x28"), g::ByteMatcher::kDead);      // and broken UTF-8 is not
  EXPECT_EQ(walk(*m, "\xED\xA0\x80"), g::ByteMatcher::kDead);  // a surrogate
}

// The mask from a state is exactly the set of tokens that keep the match alive
// when advanced one by one (the trie walk against the plain definition).
TEST(GrammarMasks, EqualAdvancingEveryToken) {
  const auto tok =
      halo::text::Tokenizer::from_model_dir(fs::path(HALO_TEST_DATA_DIR) / "tokenizers" / "llama2");
  auto vocab = std::make_shared<const g::TokenVocab>(tok);
  const std::string gbnf = read_file(kCorpus / "json.gbnf");
  g::Guide guide(matcher(gbnf), vocab, "guided_grammar");
  auto plain = matcher(gbnf);
  std::mt19937 rng(7);
  int32_t s = guide.start();
  for (int step = 0; step < 40; ++step) {
    const auto mask = guide.allowed(s);
    std::vector<int32_t> allowed;
    for (int32_t t = 0; t < vocab->size(); ++t) {
      const std::string& b = vocab->bytes(t);
      const bool alive = !b.empty() && plain->advance(s, b) != g::ByteMatcher::kDead;
      const bool bit = ((*mask)[static_cast<size_t>(t) / 64] >> (t % 64)) & 1;
      ASSERT_EQ(bit, alive) << "step " << step << " token " << t << " '" << b << "'";
      if (alive) allowed.push_back(t);
    }
    ASSERT_FALSE(allowed.empty()) << "step " << step;
    s = guide.advance(s, allowed[rng() % allowed.size()]);
    ASSERT_NE(s, g::Guide::kDead);
  }
}

TEST(GrammarMasks, ApplyMaskLeavesOnlyAllowedTokens) {
  std::vector<uint64_t> mask(3, 0);
  mask[0] = ~uint64_t{0};
  mask[1] = 0b1010;
  std::vector<float> logits(150, 1.0f);
  EXPECT_TRUE(g::apply_mask(mask, 140, logits.data(), 150));
  for (int t = 0; t < 150; ++t) {
    const bool allowed = t < 64 || t == 65 || t == 67;
    EXPECT_EQ(logits[static_cast<size_t>(t)] == 1.0f, allowed) << t;
  }
  std::vector<uint64_t> none(3, 0);
  EXPECT_FALSE(g::apply_mask(none, 140, logits.data(), 150));
}

}  // namespace

// The longest text of a grammar, in bytes (counted by hand); nullopt when a
// rule reaches itself (x* is such a rule).
TEST(GrammarErrors, MaxTextBytes) {
  const std::vector<std::pair<const char*, std::optional<size_t>>> cases = {
      {"root ::= \"a\" b?\nb ::= \"xyz\"", 4},
      {"root ::= (\"ab\" | \"c\"){0,3} \"!\"", 7},
      {"root ::= [\u00e0-\u00ff] \"\u4e2d\"", 5},
      {"root ::= \"a\"*", std::nullopt},
      {"root ::= \"(\" root \")\" | \"x\"", std::nullopt},
      {"root ::= w w w w w w\nw ::= x x x x x x\nx ::= \"ab\"{0,1000}", size_t{72000}}};
  for (const auto& [gbnf, want] : cases)
    EXPECT_EQ(g::Grammar::compile(gbnf).max_text_bytes(), want) << gbnf;
}

// A list of 11,000 words (refused as "matches no text at all" when the
// matcher gave up past 10,000 open alternatives); far past the bound, a
// message that says so.
TEST(GrammarErrors, ElevenThousandAlternativesMatchAndFarMoreAreNamed) {
  auto words = [](int n) {
    std::string gbnf = "root ::= \"w0\"";
    for (int i = 1; i < n; ++i) gbnf += " | \"w" + std::to_string(i) + "\"";
    return gbnf;
  };
  auto m = g::make_grammar_matcher(
      std::make_shared<const g::Grammar>(g::Grammar::compile(words(11000))));
  for (const char* w : {"w0", "w10999", "w5000"}) {
    const int32_t s = m->advance(m->start(), w);
    ASSERT_NE(s, g::ByteMatcher::kDead) << w;
    EXPECT_TRUE(m->accepting(s)) << w;
  }
  EXPECT_EQ(m->advance(m->start(), "w11000"), g::ByteMatcher::kDead);
  try {
    g::make_grammar_matcher(std::make_shared<const g::Grammar>(g::Grammar::compile(words(100001))));
    ADD_FAILURE() << "accepted";
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("more than 100000 alternatives are open at its start"),
              std::string::npos)
        << e.what();
  }
}
