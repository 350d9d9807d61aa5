// Tests of halo::text::guided::ByteDfa: its verdicts against std::regex_match
// (ECMAScript) on ASCII patterns and texts, hand-written expectations for UTF-8,
// refused syntax, the state limit, and the liveness of every reachable state.
#include <gtest/gtest.h>

#include <cctype>
#include <random>
#include <regex>
#include <string>
#include <vector>

#include "common/error.h"
#include "text/guided/regex_dfa.h"

using halo::text::guided::ByteDfa;

namespace {

// Walks the bytes: accepted iff never dead and the final state accepts.
bool walk(const ByteDfa& dfa, const std::string& text) {
  int32_t s = dfa.start();
  for (char c : text) {
    s = dfa.next(s, static_cast<uint8_t>(c));
    if (s == ByteDfa::kDead) return false;
  }
  return dfa.accepting(s);
}

std::string utf8(uint32_t cp) {
  std::string out;
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
  return out;
}

// From every state reachable from start(), some byte path reaches acceptance
// (the start state is exempt when the language is empty).
void expect_live(const ByteDfa& dfa, const std::string& pattern) {
  const size_t n = dfa.num_states();
  std::vector<std::vector<int32_t>> preds(n);
  std::vector<char> seen(n, 0);
  std::vector<int32_t> stack{dfa.start()};
  seen[dfa.start()] = 1;
  while (!stack.empty()) {
    const int32_t s = stack.back();
    stack.pop_back();
    for (int b = 0; b < 256; ++b) {
      const int32_t t = dfa.next(s, static_cast<uint8_t>(b));
      if (t == ByteDfa::kDead) continue;
      ASSERT_GE(t, 0) << pattern;
      ASSERT_LT(static_cast<size_t>(t), n) << pattern;
      preds[t].push_back(s);
      if (!seen[t]) {
        seen[t] = 1;
        stack.push_back(t);
      }
    }
  }
  std::vector<char> live(n, 0);
  for (size_t s = 0; s < n; ++s) {
    if (seen[s] && dfa.accepting(static_cast<int32_t>(s))) {
      live[s] = 1;
      stack.push_back(static_cast<int32_t>(s));
    }
  }
  while (!stack.empty()) {
    const int32_t t = stack.back();
    stack.pop_back();
    for (int32_t p : preds[t]) {
      if (!live[p]) {
        live[p] = 1;
        stack.push_back(p);
      }
    }
  }
  for (size_t s = 0; s < n; ++s) {
    if (!seen[s] || static_cast<int32_t>(s) == dfa.start()) continue;
    EXPECT_TRUE(live[s]) << pattern << ": state " << s << " cannot reach acceptance";
  }
}

struct AsciiCase {
  std::string pattern;
  std::string alphabet;  // random texts are drawn from it
  std::vector<std::string> texts;
};

const std::vector<AsciiCase>& ascii_cases() {
  static const std::vector<AsciiCase> cases = {
      {"abc", "abc", {"abc", "ab", "abcd", ""}},
      {"a|b|c", "abcd", {"a", "c", "ab", ""}},
      {"ab*c", "abc", {"ac", "abbbc", "abcb"}},
      {"ab+c", "abc", {"ac", "abc", "abbc"}},
      {"ab?c", "abc", {"ac", "abc", "abbc"}},
      {"a{3}", "ab", {"aa", "aaa", "aaaa"}},
      {"a{2,}", "ab", {"a", "aa", "aaaaaaa"}},
      {"a{1,3}b", "ab", {"b", "ab", "aaab", "aaaab"}},
      {"(ab|cd)*", "abcd", {"", "ab", "abcd", "abc", "cdab"}},
      {"(?:ab|a)(?:bc|c)", "abc", {"abc", "abbc", "ac", "ab"}},
      {"[abc]+", "abcd", {"", "a", "cab", "abd"}},
      {"[a-c0-2_]*", "abcd0123_-", {"", "a0_", "d", "3"}},
      {"[^ab]*", "abc\n1", {"", "c\n1", "ca"}},
      {"\\d+", "09a ", {"0", "123", "", "1a"}},
      {"\\D*", "a1 _", {"", "a _", "a1"}},
      {"\\w+", "aZ0_ -", {"aZ0_", "a-b", ""}},
      {"\\W?x", "x -a", {"x", "-x", "ax", " x"}},
      {"\\s*x\\s*", "x \t\n\v\fa", {"x", " \tx\n", "  ", "x x"}},
      {"\\S+", "ab \t", {"ab", "a b", ""}},
      {".*", "ab\n ", {"", "ab ", "a\nb"}},
      {"a.c", "abc\n", {"abc", "aac", "a\nc", "ac"}},
      {"\\.\\*\\+\\?\\(\\)\\[\\]\\{\\}\\|\\\\\\/\\-\\^\\$",
       ".*+?()[]{}|\\/-^$",
       {".*+?()[]{}|\\/-^$", ".*+?()[]{}|/-^$"}},
      {"\\t\\n\\r\\f\\v", "\t\n\r\f\v", {"\t\n\r\f\v", "\t\n"}},
      {"^ab$", "ab", {"ab", "a", "abab"}},
      {"(a|)b", "ab", {"b", "ab", "aab"}},
      {"(a*)*b", "ab", {"b", "aaab", "ba"}},
      {"((a|b)c){2,3}", "abc", {"acbc", "acbcac", "ac", "acacacac"}},
      {"[-a]+", "-ab", {"-a-", "b"}},
      {"[a-]+", "-ab", {"a--", "ab"}},
      {"x*?y", "xy", {"y", "xxy", "x"}},
      {"[\\d.]+", "01.a", {"1.0", ".", "a"}},
      {"-?(0|[1-9][0-9]*)(\\.[0-9]+)?([eE][+-]?[0-9]+)?",
       "-0159.eE+",
       {"0", "-12.5e+3", "01", "1.", "1e", "-"}},
      {"(a|b)*abb", "ab", {"abb", "aabb", "babb", "ab"}},
      {"[^\\s]+", "a \t1", {"a1", "a 1"}},
      {"\\x41\\u0042", "ABC", {"AB", "A", "ABC"}},
      {"(a{0,2}b){1,2}", "ab", {"b", "aab", "abaab", "aaab", "bbb"}},
      {"", "a", {"", "a"}},
      {"[a-z]{2,4}\\d", "az09", {"az0", "a0", "azaz9", "azaza9"}},
      {"(((a)))b?", "ab", {"a", "ab", "b"}},
      {"a{0}b", "ab", {"b", "ab"}},
      {"(x|y){2}z{0,1}", "xyz", {"xy", "xyz", "x", "xyzz"}},
  };
  return cases;
}

TEST(ByteDfa, AgreesWithStdRegexOnAsciiPatterns) {
  std::mt19937 rng(42);
  for (const AsciiCase& c : ascii_cases()) {
    SCOPED_TRACE("pattern " + c.pattern);
    std::regex re;
    try {
      re = std::regex(c.pattern, std::regex::ECMAScript);
    } catch (const std::regex_error&) {
      ADD_FAILURE() << "std::regex refuses the pattern";
      continue;
    }
    const ByteDfa dfa = ByteDfa::compile(c.pattern);
    std::vector<std::string> texts = c.texts;
    std::uniform_int_distribution<size_t> len(0, 9), pick(0, c.alphabet.size() - 1);
    for (int i = 0; i < 400; ++i) {
      std::string t;
      for (size_t k = len(rng); k > 0; --k) t += c.alphabet[pick(rng)];
      texts.push_back(t);
    }
    int agreed_matches = 0;
    for (const std::string& t : texts) {
      const bool expected = std::regex_match(t, re);
      EXPECT_EQ(walk(dfa, t), expected) << "text '" << t << "'";
      EXPECT_EQ(dfa.matches(t), expected) << "text '" << t << "'";
      agreed_matches += expected;
    }
    // The hand-picked texts include at least one match for every pattern.
    EXPECT_GT(agreed_matches, 0);
    expect_live(dfa, c.pattern);
  }
}

TEST(ByteDfa, EmptyClassMatchesNothing) {
  // ECMAScript: "[]" (matches nothing) then "a]": the empty language.
  const ByteDfa dfa = ByteDfa::compile("[]a]");
  EXPECT_FALSE(dfa.matches(""));
  EXPECT_FALSE(dfa.matches("a]"));
  EXPECT_FALSE(dfa.matches("]"));
  EXPECT_EQ(dfa.num_states(), 1u);
  const ByteDfa none = ByteDfa::compile("[^\\s\\S]");
  EXPECT_EQ(none.num_states(), 1u);
  EXPECT_FALSE(none.accepting(none.start()));
  for (int b = 0; b < 256; ++b) EXPECT_EQ(none.next(none.start(), b), ByteDfa::kDead);
}

TEST(ByteDfa, Utf8Literals) {
  const ByteDfa dfa = ByteDfa::compile("é+ü中😀");
  EXPECT_TRUE(dfa.matches("éü中😀"));
  EXPECT_TRUE(dfa.matches("ééü中😀"));
  EXPECT_FALSE(dfa.matches("eü中😀"));
  EXPECT_FALSE(dfa.matches("\xC3"));
  EXPECT_EQ(dfa.next(dfa.start(), 'e'), ByteDfa::kDead);
  EXPECT_NE(dfa.next(dfa.start(), 0xC3), ByteDfa::kDead);
  expect_live(dfa, "é+ü中😀");
}

TEST(ByteDfa, NonAsciiClassesAndNegation) {
  struct Case {
    std::string pattern;
    std::vector<std::string> yes, no;
  };
  const std::vector<Case> cases = {
      {"[à-ÿ]+", {"à", "ÿ", "àéÿ"}, {"ß", "a", "", "Ā", "à\xC3"}},
      {"[\\u4e00-\\u9fff]{2}", {"中文", "一鿿"}, {"中", "中a", "ぁ中", "中文字"}},
      {".", {"a", "é", "€", "😀", "\r"}, {"\n", "ab", "\xFF", "\xED\xA0\x80", "\xC0\x80", ""}},
      {"[^a]", {"b", "é", "😀", "\n"}, {"a", "bb", "\x80"}},
      {"\\W", {"é", "-", "中"}, {"_", "a", "9"}},
      {"\\S", {"中", "x"}, {" ", "\t"}},
      {"\\D+", {"éx"}, {"1", "é1"}},
      {"[^\\u0000-\\u007f]+", {"éü", "😀中"}, {"a", "éa"}},
      {"\\uD83D\\uDE00", {"😀"}, {"😁"}},
      {"[😀-😂]", {"😀", "😁", "😂"}, {"😃", "😿"}},
      {"[^\\d\\s]*", {"aé中", ""}, {"a1", "é "}},
      {"(é|中)*x", {"x", "é中éx"}, {"éé"}},
  };
  for (const Case& c : cases) {
    const ByteDfa dfa = ByteDfa::compile(c.pattern);
    for (const std::string& t : c.yes) EXPECT_TRUE(walk(dfa, t)) << c.pattern << " / " << t;
    for (const std::string& t : c.no) EXPECT_FALSE(walk(dfa, t)) << c.pattern << " / " << t;
    expect_live(dfa, c.pattern);
  }
}

// Every code point, encoded: the classes take exactly the intended ones (this checks
// the UTF-8 byte-range automaton at all encoding-length and continuation boundaries).
TEST(ByteDfa, CodePointRangesExhaustive) {
  struct Case {
    std::string pattern;
    bool (*in)(uint32_t);
  };
  const std::vector<Case> cases = {
      {".", [](uint32_t cp) { return cp != '\n'; }},
      {"[\\u00e0-\\u4e00]", [](uint32_t cp) { return cp >= 0xE0 && cp <= 0x4E00; }},
      {"[^\\u0041-\\u07ff\\ud800\\udc00-\\ud83d\\ude00]",
       [](uint32_t cp) {
         return !(cp >= 0x41 && cp <= 0x7FF) && !(cp >= 0x10000 && cp <= 0x1F600);
       }},
      {"[\\u0801-\\uffff]", [](uint32_t cp) { return cp >= 0x801 && cp <= 0xFFFF; }},
      {"\\W",
       [](uint32_t cp) { return !(cp < 0x80 && std::isalnum(static_cast<int>(cp))) && cp != '_'; }},
  };
  for (const Case& c : cases) {
    const ByteDfa dfa = ByteDfa::compile(c.pattern);
    int mismatches = 0;
    for (uint32_t cp = 0; cp <= 0x10FFFF; ++cp) {
      if (cp >= 0xD800 && cp <= 0xDFFF) continue;
      if (walk(dfa, utf8(cp)) != c.in(cp) && ++mismatches < 5) {
        ADD_FAILURE() << c.pattern << ": code point " << cp;
      }
    }
    EXPECT_EQ(mismatches, 0) << c.pattern;
    // Encoded surrogates are not UTF-8.
    EXPECT_FALSE(walk(dfa, utf8(0xD800)));
    EXPECT_FALSE(walk(dfa, utf8(0xDFFF)));
  }
}

TEST(ByteDfa, RefusesUnsupportedSyntax) {
  const std::vector<std::string> bad = {
      "(ab",    "ab)",     "[abc",  "[z-a]", "(a)\\1", "(?=a)",   "(?!a)", "(?<=a)b", "(?<n>a)",
      "a{3,2}", "a{1001}", "*a",    "a**",   "a\\b",   "\\q",     "a^b",   "a$b",     "\\u12",
      "a{2",    "\\",      "\xC3(", "\xFF",  "a++",    "\\ud800", "+",     "a|*"};
  for (const std::string& p : bad) {
    try {
      ByteDfa::compile(p);
      ADD_FAILURE() << "accepted '" << p << "'";
    } catch (const halo::Error& e) {
      const std::string msg = e.what();
      EXPECT_EQ(msg.rfind("regex '" + p + "': ", 0), 0u) << msg;
      EXPECT_NE(msg.find(" at offset "), std::string::npos) << msg;
    }
  }
  try {
    ByteDfa::compile("a(bc");
    ADD_FAILURE();
  } catch (const halo::Error& e) {
    EXPECT_STREQ(e.what(), "regex 'a(bc': unbalanced '(' at offset 1");
  }
  try {
    ByteDfa::compile("ab\\2");
    ADD_FAILURE();
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("backreference"), std::string::npos) << e.what();
  }
}

// Groups nest at most 1000 deep (issue 42: 20,000 crashed the server), and an
// error quotes a long regex by its start only.
TEST(ByteDfa, GroupDepthIsBoundedAndErrorsStayShort) {
  const auto nest = [](int n) {
    return std::string(size_t(n), '(') + "a" + std::string(size_t(n), ')');
  };
  EXPECT_NO_THROW(ByteDfa::compile(nest(1000)));
  for (int n : {1001, 20000}) {
    try {
      ByteDfa::compile(nest(n));
      ADD_FAILURE() << "accepted " << n << " nested groups";
    } catch (const halo::Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("groups nested deeper than 1000 at offset 1000"), std::string::npos)
          << msg;
      EXPECT_LT(msg.size(), 400u) << msg.substr(0, 400);
      EXPECT_NE(msg.find("(" + std::to_string(2 * n + 1) + " bytes)"), std::string::npos)
          << msg.substr(0, 400);
    }
  }
}

TEST(ByteDfa, StateLimit) {
  // The n-th symbol from the end is an 'a': 2^n DFA states.
  const std::string p = "(a|b)*a(a|b){12}";
  EXPECT_THROW(ByteDfa::compile(p, 1000), halo::Error);
  try {
    ByteDfa::compile(p, 1000);
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("exceed 1000 states"), std::string::npos) << e.what();
  }
  const ByteDfa dfa = ByteDfa::compile(p, 20000);
  EXPECT_EQ(dfa.num_states(), 8192u);  // minimal: the last 13 symbols
  EXPECT_TRUE(dfa.matches("ba" + std::string(12, 'b')));
  EXPECT_FALSE(dfa.matches("ab" + std::string(12, 'b')));
}

TEST(ByteDfa, LargeBoundedRepeats) {
  const ByteDfa dfa = ByteDfa::compile("[a-z]{2,1000}");
  EXPECT_FALSE(dfa.matches("a"));
  EXPECT_TRUE(dfa.matches(std::string(2, 'q')));
  EXPECT_TRUE(dfa.matches(std::string(1000, 'q')));
  EXPECT_FALSE(dfa.matches(std::string(1001, 'q')));
  EXPECT_EQ(dfa.num_states(), 1001u);  // minimal: counts 0..1000
}

TEST(ByteDfa, Minimal) {
  EXPECT_EQ(ByteDfa::compile("(a|b)*abb").num_states(), 4u);
  EXPECT_EQ(ByteDfa::compile("(?:a|ab|abc)*").num_states(), 3u);
  EXPECT_EQ(ByteDfa::compile("abc|abd|xbc|xbd").num_states(), 4u);
  // "." over UTF-8: start, 3 "continuation bytes left" states, the E0/ED/F0/F4
  // restricted second bytes, and acceptance.
  EXPECT_EQ(ByteDfa::compile(".").num_states(), 9u);
}

}  // namespace

// The longest matching text, in bytes (counted by hand for each pattern);
// nullopt for patterns with a loop.
TEST(ByteDfa, MaxTextBytes) {
  const std::vector<std::pair<const char*, std::optional<size_t>>> cases = {
      {"ab", 2},
      {"a|bcd", 3},
      {"(yes|no)!?", 4},
      {"[a-z]{2,5}", 5},
      {"\\d{3}-\\d{4}", 8},
      {"\u00e9{2}", 4},
      {"x?", 1},
      {"a*", std::nullopt},
      {"(ab)+c", std::nullopt},
      {"a{0,1000}", 1000},
      {"[0-9]+|z", std::nullopt}};
  for (const auto& [re, want] : cases) EXPECT_EQ(ByteDfa::compile(re).max_text_bytes(), want) << re;
}

// The patterns whose automata took minutes and gigabytes to build
// (".?" x 10,000: 145 s; .{0,1000} three times: 30 s; "a?" x 20,000: 14 s)
// are refused by the work budget, with a message that says why and quotes
// at most 200 bytes of the pattern.
TEST(ByteDfa, CostlyPatternsAreRefusedByTheWorkBudget) {
  std::string dot_opt, a_opt;
  for (int i = 0; i < 10000; ++i) dot_opt += ".?";
  for (int i = 0; i < 20000; ++i) a_opt += "a?";
  for (const std::string& re : {dot_opt, std::string(".{0,1000}.{0,1000}.{0,1000}"), a_opt}) {
    try {
      ByteDfa::compile(re);
      ADD_FAILURE() << re.substr(0, 40) << ": compiled";
    } catch (const halo::Error& e) {
      const std::string m = e.what();
      EXPECT_NE(m.find("takes more than 100000000 steps"), std::string::npos) << m.substr(0, 300);
      EXPECT_LT(m.size(), 600u);
    }
  }
  // What real constraints need stays well inside it.
  EXPECT_TRUE(ByteDfa::compile("[a-z]{0,1000}").matches(std::string(1000, 'q')));
  EXPECT_TRUE(ByteDfa::compile(".{0,300}x").matches(std::string(300, '.') + "x"));
}
