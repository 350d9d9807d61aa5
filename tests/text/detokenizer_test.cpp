// Property tests of halo::text::IncrementalDetokenizer over the real tokenizers:
// the deltas always concatenate to Tokenizer::decode of the same ids, and
// each delta is valid UTF-8.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "text/detokenizer/incremental_detokenizer.h"
#include "text/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using halo::text::IncrementalDetokenizer;
using halo::text::Tokenizer;
using Ids = std::vector<int32_t>;

namespace {

const Tokenizer& tok(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) {
    const fs::path dir = name == "pkgchat-5m" ? fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m"
                                              : fs::path(HALO_TEST_DATA_DIR) / "tokenizers" / name;
    it = cache.emplace(name, Tokenizer::from_model_dir(dir)).first;
  }
  return it->second;
}

// Independent UTF-8 validity check (RFC 3629).
bool valid_utf8(const std::string& s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    int n;
    char32_t cp;
    if (c < 0x80) n = 0, cp = c;
    else if ((c & 0xE0) == 0xC0) n = 1, cp = c & 0x1F;
    else if ((c & 0xF0) == 0xE0) n = 2, cp = c & 0x0F;
    else if ((c & 0xF8) == 0xF0) n = 3, cp = c & 0x07;
    else return false;
    if (i + static_cast<std::size_t>(n) >= s.size() && n > 0) return false;
    for (int k = 1; k <= n; ++k) {
      const auto b = static_cast<unsigned char>(s[i + k]);
      if ((b & 0xC0) != 0x80) return false;
      cp = (cp << 6) | (b & 0x3F);
    }
    if ((n == 1 && cp < 0x80) || (n == 2 && cp < 0x800) || (n == 3 && cp < 0x10000) || cp > 0x10FFFF ||
        (cp >= 0xD800 && cp <= 0xDFFF))
      return false;
    i += static_cast<std::size_t>(n) + 1;
  }
  return true;
}

std::vector<std::string> corpus() {
  std::vector<std::string> out;
  std::ifstream in(fs::path(HALO_SOURCE_DIR) / "tests" / "text" / "corpus.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(nlohmann::json::parse(line).at("text").get<std::string>());
  }
  return out;
}

// Ids of the byte-level pieces: <0xNN> tokens, or single-character byte-level tokens.
Ids byte_ids(const Tokenizer& t) {
  Ids out;
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", b);
    if (auto id = t.token_to_id(name)) out.push_back(*id);
  }
  if (out.empty()) {
    for (int32_t id = 0; id < t.vocab_size() && out.size() < 256; ++id) {
      std::string s;
      try {
        s = t.id_to_token(id);
      } catch (...) {
        continue;
      }
      const auto c = static_cast<unsigned char>(s[0]);
      const std::size_t len = c < 0x80 ? 1 : c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
      if (s.size() == len) out.push_back(id);
    }
  }
  return out;
}

struct Run {
  std::string concat;
  std::vector<std::string> deltas;
};

Run stream(const Tokenizer& t, const Ids& prompt, const Ids& gen, IncrementalDetokenizer::Options opt) {
  IncrementalDetokenizer d(t, opt, prompt);
  Run r;
  for (const int32_t id : gen) r.deltas.push_back(d.add(id));
  r.deltas.push_back(d.finish());
  for (const auto& s : r.deltas) r.concat += s;
  EXPECT_EQ(r.concat, d.text());
  return r;
}

void check(const Tokenizer& t, const Ids& ids, const std::string& what) {
  for (const bool skip : {true, false}) {
    const Run r = stream(t, {}, ids, {.skip_special_tokens = skip});
    const std::string expected = t.decode(ids, skip);
    ASSERT_EQ(r.concat, expected) << what << " skip=" << skip << " ids=" << ::testing::PrintToString(ids);
    for (const auto& dlt : r.deltas) ASSERT_TRUE(valid_utf8(dlt)) << what << " delta " << ::testing::PrintToString(dlt);
  }
  // With a prompt prefix: the deltas continue the prompt's full text (where
  // generated ids complete a character the prompt left open, from there).
  if (ids.size() >= 2) {
    for (const std::size_t k : {std::size_t{1}, ids.size() / 2, ids.size() - 1}) {
      const Ids prompt(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(k));
      const Ids gen(ids.begin() + static_cast<std::ptrdiff_t>(k), ids.end());
      const std::string full = t.decode(ids, true);
      const std::string head = t.decode(prompt, true);
      std::size_t base = 0;
      while (base < full.size() && base < head.size() && full[base] == head[base]) ++base;
      while (base > 0 && base < full.size() && (static_cast<unsigned char>(full[base]) & 0xC0) == 0x80) --base;
      const Run r = stream(t, prompt, gen, {});
      ASSERT_EQ(r.concat, full.substr(base)) << what << " prompt=" << k << " ids=" << ::testing::PrintToString(ids);
      for (const auto& dlt : r.deltas) ASSERT_TRUE(valid_utf8(dlt)) << what;
    }
  }
}

class DetokenizerProperty : public ::testing::TestWithParam<std::string> {};

}  // namespace

TEST_P(DetokenizerProperty, RandomIds) {
  const Tokenizer& t = tok(GetParam());
  std::mt19937 rng(1234);
  std::uniform_int_distribution<int32_t> any(0, t.vocab_size() - 1);
  for (int n = 0; n < 150; ++n) {
    Ids ids(std::uniform_int_distribution<int>(1, 40)(rng));
    for (auto& id : ids) id = any(rng);
    check(t, ids, "random");
  }
}

TEST_P(DetokenizerProperty, ByteRuns) {
  const Tokenizer& t = tok(GetParam());
  const Ids bytes = byte_ids(t);
  ASSERT_EQ(bytes.size(), 256u);
  std::mt19937 rng(99);
  std::uniform_int_distribution<int32_t> any(0, t.vocab_size() - 1);
  std::uniform_int_distribution<std::size_t> pick(0, 255);
  // High bytes (0x80..0xFF) are the interesting ones: lead and continuation bytes.
  std::uniform_int_distribution<std::size_t> high(0x80, 0xFF);
  for (int n = 0; n < 200; ++n) {
    Ids ids;
    const int len = std::uniform_int_distribution<int>(1, 30)(rng);
    for (int i = 0; i < len; ++i) {
      const int kind = std::uniform_int_distribution<int>(0, 9)(rng);
      ids.push_back(kind < 6 ? bytes[high(rng)] : kind < 8 ? bytes[pick(rng)] : any(rng));
    }
    check(t, ids, "bytes");
  }
  // Real multi-byte characters spelled with byte tokens (emoji, CJK).
  for (const std::string s : {"😀", "你好", "👨‍👩‍👧", "é", "a😀b"}) {
    Ids ids;
    for (const char c : s) ids.push_back(bytes[static_cast<unsigned char>(c)]);
    check(t, ids, "spelled " + s);
  }
}

TEST_P(DetokenizerProperty, CorpusTexts) {
  const Tokenizer& t = tok(GetParam());
  for (const auto& text : corpus()) check(t, t.encode(text, true), "corpus " + text);
}

INSTANTIATE_TEST_SUITE_P(RealTokenizers, DetokenizerProperty,
                         ::testing::Values("llama2", "llama3", "mistral", "qwen3", "pkgchat-5m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(Detokenizer, HoldsBackIncompleteCharacters) {
  const Tokenizer& t = tok("pkgchat-5m");
  const Ids ids = t.encode("你好 ok", false);  // 你好 via byte fallback
  IncrementalDetokenizer d(t);
  std::vector<std::string> deltas;
  for (const int32_t id : ids) deltas.push_back(d.add(id));
  deltas.push_back(d.finish());
  std::string all;
  for (const auto& s : deltas) {
    EXPECT_TRUE(valid_utf8(s)) << ::testing::PrintToString(s);
    EXPECT_EQ(s.find("\xEF\xBF\xBD"), std::string::npos);
    all += s;
  }
  EXPECT_EQ(all, "你好 ok");
  EXPECT_EQ(deltas[0], "");  // the first byte alone is not a character
}

TEST(Detokenizer, PromptContextKeepsLeadingSpace) {
  const Tokenizer& t = tok("llama2");
  const Ids prompt = t.encode("Hello", true);
  const Ids gen = t.encode("Hello world", false);  // "▁Hello", "▁world"
  IncrementalDetokenizer with_prompt(t, {}, prompt);
  EXPECT_EQ(with_prompt.add(gen), " Hello world");
  IncrementalDetokenizer alone(t);
  EXPECT_EQ(alone.add(gen) + alone.finish(), "Hello world");  // Strip decoder drops the first space
}

TEST(Detokenizer, SkipSpecialTokens) {
  const Tokenizer& t = tok("qwen3");
  const Ids ids = t.encode("<|im_start|>assistant\nHi<|im_end|>", false);
  IncrementalDetokenizer skip(t, {.skip_special_tokens = true});
  EXPECT_EQ(skip.add(ids) + skip.finish(), "assistant\nHi");
  IncrementalDetokenizer keep(t, {.skip_special_tokens = false});
  EXPECT_EQ(keep.add(ids) + keep.finish(), "<|im_start|>assistant\nHi<|im_end|>");
}

TEST(Detokenizer, SpacesBetweenSpecialTokens) {
  const Tokenizer& t = tok("pkgchat-5m");
  const Ids ids = t.encode("<|user|>hi<|end|>", false);
  IncrementalDetokenizer d(t, {.skip_special_tokens = false, .spaces_between_special_tokens = true});
  EXPECT_EQ(d.add(ids) + d.finish(), "<|user|> hi <|end|>");
  IncrementalDetokenizer s(t, {.skip_special_tokens = true, .spaces_between_special_tokens = true});
  EXPECT_EQ(s.add(ids) + s.finish(), "hi");
}

TEST(Detokenizer, CleanUpTokenizationSpacesStreams) {
  // llama3's tokenizer_config has clean_up_tokenization_spaces: " ," -> ",".
  const Tokenizer& t = tok("llama3");
  const Ids ids = t.encode("Hello , world . It 's fine", false);
  const std::string expected = t.decode(ids, true);
  EXPECT_EQ(expected, "Hello, world. It's fine");
  IncrementalDetokenizer d(t);
  std::string all;
  for (const int32_t id : ids) all += d.add(id);
  all += d.finish();
  EXPECT_EQ(all, expected);
}
