// Unit tests of halo::text::Tokenizer. Expected ids come from Hugging Face's
// @huggingface/tokenizers (JavaScript) run on the same files; vocabulary sizes
// from the files themselves (max id + 1).
#include "text/tokenizer/tokenizer.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "common/error.h"

namespace fs = std::filesystem;
using halo::text::Tokenizer;

namespace {

fs::path data_dir(const std::string& name) {
  if (name == "pkgchat-5m") return fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m";
  return fs::path(HALO_TEST_DATA_DIR) / "tokenizers" / name;
}

const Tokenizer& tok(const std::string& name) {
  static std::map<std::string, Tokenizer> cache;
  auto it = cache.find(name);
  if (it == cache.end()) it = cache.emplace(name, Tokenizer::from_model_dir(data_dir(name))).first;
  return it->second;
}

class TempDir {
 public:
  // Named by the process id: ctest runs tests in parallel processes, and gtest's
  // random seed (the clock in ms) is the same in two that start together.
  TempDir()
      : path_(fs::temp_directory_path() /
              ("halo_tok_test_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++))) {
    fs::create_directories(path_);
  }
  ~TempDir() { fs::remove_all(path_); }
  fs::path write(const std::string& name, const std::string& content) const {
    std::ofstream(path_ / name) << content;
    return path_ / name;
  }
  const fs::path& path() const { return path_; }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const halo::Error& e) {
    return e.what();
  }
  return "<no halo::Error thrown>";
}

using Ids = std::vector<int32_t>;

}  // namespace

TEST(TokenizerLoad, MissingFileNamesThePath) {
  TempDir dir;
  const std::string msg = error_of([&] { Tokenizer::from_model_dir(dir.path()); });
  EXPECT_NE(msg.find((dir.path() / "tokenizer.json").string()), std::string::npos) << msg;
  const std::string msg2 = error_of([&] { Tokenizer::from_files(dir.path() / "nope.json", {}); });
  EXPECT_NE(msg2.find("nope.json"), std::string::npos) << msg2;
}

TEST(TokenizerLoad, MalformedJsonNamesTheFile) {
  TempDir dir;
  const auto p = dir.write("tokenizer.json", "{\"model\": {\"type\": \"BPE\", ");
  const std::string msg = error_of([&] { Tokenizer::from_files(p, {}); });
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("malformed JSON"), std::string::npos) << msg;
}

TEST(TokenizerLoad, MalformedConfigNamesTheFile) {
  TempDir dir;
  const auto tj =
      dir.write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
  const auto tc = dir.write("tokenizer_config.json", "[1, 2");
  const std::string msg = error_of([&] { Tokenizer::from_files(tj, tc); });
  EXPECT_NE(msg.find(tc.string()), std::string::npos) << msg;
}

TEST(TokenizerLoad, UnsupportedModelTypeNamesFileAndType) {
  TempDir dir;
  const auto p =
      dir.write("tokenizer.json", R"({"model": {"type": "WordPiece", "vocab": {"a": 0}}})");
  const std::string msg = error_of([&] { Tokenizer::from_files(p, {}); });
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
  EXPECT_NE(msg.find("WordPiece"), std::string::npos) << msg;
}

TEST(TokenizerLoad, UnsupportedComponentIsNamed) {
  TempDir dir;
  const auto p = dir.write("tokenizer.json",
                           R"({"model": {"type": "BPE", "vocab": {"a": 0}, "merges": []},
                               "pre_tokenizer": {"type": "BertPreTokenizer"}})");
  const std::string msg = error_of([&] { Tokenizer::from_files(p, {}); });
  EXPECT_NE(msg.find("BertPreTokenizer"), std::string::npos) << msg;
  EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
}

TEST(TokenizerLoad, MergeOutsideVocabularyIsRejected) {
  TempDir dir;
  const auto p =
      dir.write("tokenizer.json",
                R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1}, "merges": ["a b"]}})");
  const std::string msg = error_of([&] { Tokenizer::from_files(p, {}); });
  EXPECT_NE(msg.find("'ab'"), std::string::npos) << msg;
}

// Bad ids used to be reported as "malformed JSON", naming neither the token
// nor the id; a huge id sized the id table (2e9 entries) before any check.
TEST(TokenizerLoad, BadVocabIdsNameTheTokenAndId) {
  TempDir dir;
  const std::pair<std::string, std::string> cases[] = {
      {R"({"a": 0, "b": -1})", "token \"b\" has id -1"},
      {R"({"a": 0, "b": 1e12})", "token \"b\" has id 1e12"},
      {R"({"a": 0, "b": 1.5})", "token \"b\" has id 1.5"},
      {R"({"a": 0, "b": "x"})", "token \"b\" has id \"x\""},
      {R"({"a": 0, "b": 2000000000})", "token \"b\" has id 2000000000"},
      {R"({"a": 0, "b": 18446744073709551615})", "token \"b\" has id 18446744073709551615"},
      {R"({"a": 0, "b": null})", "in model.vocab"},
  };
  for (const auto& [vocab, needle] : cases) {
    const auto p = dir.write(
        "tokenizer.json", R"({"model": {"type": "BPE", "vocab": )" + vocab + R"(, "merges": []}})");
    const std::string msg = error_of([&] { Tokenizer::from_files(p, {}); });
    EXPECT_NE(msg.find(p.string()), std::string::npos) << msg;
    EXPECT_NE(msg.find(needle), std::string::npos) << vocab << ": " << msg;
    EXPECT_EQ(msg.find("malformed JSON"), std::string::npos) << msg;
  }
  const std::pair<std::string, std::string> added[] = {
      {"-1", "-1"}, {"\"x\"", "\"x\""}, {"1e12", "1000000000000.0"}, {"3000000000", "3000000000"}};
  for (const auto& [id, shown] : added) {
    const auto p = dir.write(
        "tokenizer.json",
        R"({"added_tokens": [{"id": )" + id +
            R"(, "content": "<s>"}], "model": {"type": "BPE", "vocab": {"a": 0}, "merges": []}})");
    const std::string msg = error_of([&] { Tokenizer::from_files(p, {}); });
    EXPECT_NE(msg.find("added token '<s>' has id " + shown + " (ids are integers"),
              std::string::npos)
        << msg;
  }
}

TEST(TokenizerLoad, TinyHandWrittenModel) {
  // Merges as pairs, a Prepend/Replace normalizer and byte fallback: all hand-checkable.
  TempDir dir;
  const auto p = dir.write("tokenizer.json", R"({
    "added_tokens": [{"id": 0, "content": "<s>", "special": true}],
    "normalizer": {"type": "Sequence", "normalizers": [
        {"type": "Prepend", "prepend": "▁"}, {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
    "post_processor": {"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
        {"Sequence": {"id": "A", "type_id": 0}}], "special_tokens": {"<s>": {"id": "<s>", "ids": [0], "tokens": ["<s>"]}}},
    "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
        {"type": "ByteFallback"}, {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
    "model": {"type": "BPE", "byte_fallback": true, "unk_token": "<unk>",
      "vocab": {"<s>": 0, "<unk>": 1, "▁": 2, "a": 3, "b": 4, "▁a": 5, "ab": 6, "▁ab": 7, "<0x21>": 8},
      "merges": [["▁", "a"], ["a", "b"], ["▁a", "b"]]}})");
  const Tokenizer t = Tokenizer::from_files(p, {});
  EXPECT_EQ(t.encode("ab"), (Ids{0, 7}));             // ▁ab: "▁ a" merges first, then "▁a b"
  EXPECT_EQ(t.encode("bab", false), (Ids{2, 4, 6}));  // ▁ b a b -> "a b" (rank 1) -> ▁ b ab
  EXPECT_EQ(t.encode("a!", false), (Ids{5, 8}));      // '!' via <0x21>
  EXPECT_EQ(t.encode("a?", false), (Ids{5, 1}));      // no <0x3F>: unk
  EXPECT_EQ(t.decode(Ids{0, 7, 8}, true), "ab!");
  EXPECT_EQ(t.decode(Ids{0, 7, 8}, false), "<s> ab!");
  EXPECT_EQ(t.vocab_size(), 9);
  EXPECT_TRUE(t.adds_bos() == false);  // no tokenizer_config: no bos_token string
}

TEST(Tokenizer, VocabSize) {
  EXPECT_EQ(tok("llama2").vocab_size(), 32000);
  EXPECT_EQ(tok("llama3").vocab_size(), 128256);
  EXPECT_EQ(tok("mistral").vocab_size(), 32000);
  EXPECT_EQ(tok("qwen3").vocab_size(), 151669);
  EXPECT_EQ(tok("pkgchat-5m").vocab_size(), 4096);
}

TEST(Tokenizer, IdToTokenRange) {
  const Tokenizer& t = tok("llama3");
  EXPECT_EQ(t.id_to_token(128000), "<|begin_of_text|>");
  EXPECT_EQ(t.id_to_token(9906), "Hello");
  EXPECT_EQ(t.id_to_token(0), "!");
  EXPECT_THROW(t.id_to_token(-1), halo::Error);
  EXPECT_THROW(t.id_to_token(128256), halo::Error);
  const std::string msg = error_of([&] { t.id_to_token(200000); });
  EXPECT_NE(msg.find("200000"), std::string::npos) << msg;
  EXPECT_EQ(t.token_to_id("<|eot_id|>"), 128009);
  EXPECT_EQ(t.token_to_id("no such token"), std::nullopt);
}

TEST(Tokenizer, DemoModelBosBehaviour) {
  const Tokenizer& t = tok("pkgchat-5m");
  EXPECT_TRUE(t.adds_bos());
  EXPECT_FALSE(t.adds_eos());
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "<|end|>");
  EXPECT_EQ(t.bos_token_id(), 1);
  EXPECT_TRUE(t.is_special(1));
  EXPECT_EQ(t.encode("Hello world"), (Ids{1, 4066, 375, 4022, 3211}));
  EXPECT_EQ(t.encode("Hello world", false), (Ids{4066, 375, 4022, 3211}));
  EXPECT_EQ(t.encode(" Hello"), (Ids{1, 423, 375, 4022}));
  EXPECT_EQ(t.encode("你好"), (Ids{1, 235, 196, 167, 236, 172, 196}));  // byte fallback
  EXPECT_EQ(t.encode("<s>hi</s>"), (Ids{1, 1, 4030, 4021, 2}));
  EXPECT_EQ(t.decode(t.encode("Hello world"), true), "Hello world");
  EXPECT_EQ(t.decode(t.encode("你好"), true), "你好");
  EXPECT_EQ(t.encode(""), (Ids{1}));
  EXPECT_EQ(t.encode("", false), Ids{});
}

TEST(Tokenizer, HandCheckedEncodings) {
  EXPECT_EQ(tok("llama2").encode("Hello world"), (Ids{1, 15043, 3186}));
  EXPECT_EQ(tok("llama2").encode("你好"), (Ids{1, 29871, 30919, 31076}));
  EXPECT_EQ(tok("llama2").encode("<s>hi</s>"), (Ids{1, 1, 7251, 2}));
  EXPECT_EQ(tok("llama2").encode("a\n\nb"), (Ids{1, 263, 13, 13, 29890}));
  EXPECT_EQ(tok("mistral").encode(" Hello"), (Ids{1, 28705, 22557}));
  // This llama3 tokenizer.json has a ByteLevel post-processor only: no BOS.
  EXPECT_FALSE(tok("llama3").adds_bos());
  EXPECT_EQ(tok("llama3").encode("Hello world"), (Ids{9906, 1917}));
  EXPECT_EQ(tok("llama3").encode(" Hello"), (Ids{22691}));
  EXPECT_EQ(tok("llama3").encode("你好"), (Ids{57668, 53901}));
  EXPECT_EQ(tok("qwen3").encode("你好"), (Ids{108386}));
  EXPECT_EQ(tok("qwen3").encode("a\n\nb"), (Ids{64, 271, 65}));
  EXPECT_FALSE(tok("qwen3").adds_bos());
  EXPECT_EQ(tok("qwen3").bos_token(), "");
  EXPECT_EQ(tok("qwen3").eos_token(), "<|im_end|>");
  EXPECT_EQ(tok("qwen3").eos_token_id(), 151645);
  EXPECT_EQ(tok("qwen3").bos_token_id(), std::nullopt);
}

TEST(Tokenizer, ByteFallbackDecodeFollowsTokenizers) {
  // tokenizers' ByteFallback decoder: a valid group becomes its text, an
  // invalid one becomes one U+FFFD per byte.
  const Tokenizer& t = tok("llama2");
  const int32_t e4 = *t.token_to_id("<0xE4>"), bd = *t.token_to_id("<0xBD>"),
                a0 = *t.token_to_id("<0xA0>");
  EXPECT_EQ(t.decode(Ids{e4, bd, a0}, true), "你");
  EXPECT_EQ(t.decode(Ids{e4, bd}, true), "\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_EQ(t.decode(Ids{e4, bd, a0, a0}, true),
            "\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD\xEF\xBF\xBD");
  EXPECT_TRUE(t.is_byte_fallback_token(e4));
  EXPECT_FALSE(t.is_byte_fallback_token(15043));
}

TEST(Tokenizer, InvalidUtf8InputThrows) {
  EXPECT_THROW(tok("pkgchat-5m").encode("abc\xff"), halo::Error);
  EXPECT_THROW(tok("llama3").encode("\xe4\xbd"), halo::Error);
}

TEST(Tokenizer, DecodeSkipsUnknownIds) {
  const Tokenizer& t = tok("qwen3");
  // Ids past the vocabulary (a padded embedding) decode to nothing, as in tokenizers.
  EXPECT_EQ(t.decode(Ids{9707, 151900, 1879}, true), "Hello world");
}

TEST(Tokenizer, CopiesShareData) {
  const Tokenizer a = tok("pkgchat-5m");
  const Tokenizer b = a;
  EXPECT_EQ(a.encode("hello there"), b.encode("hello there"));
}

// Guided decoding matches token masks against token_bytes: the bytes of a
// text's tokens, concatenated, must be the text itself (for SentencePiece-style
// tokenizers, after the space they put in front), including characters that
// byte-fallback or byte-level tokens split across tokens.
TEST(Tokenizer, TokenBytesConcatenateToTheText) {
  const std::vector<std::string> texts = {
      "Hello, world! 12345", "  two  spaces\nand a newline\ttab", "naïve café — 東京タワー 🚀🎉",
      "{\"key\": [1, 2.5e-3, true, null]}", "ǅ ß ﬁ Ω ʻokina"};
  for (const char* name : {"llama2", "llama3", "mistral", "qwen3", "pkgchat-5m"}) {
    const Tokenizer& t = tok(name);
    for (const auto& text : texts) {
      std::string bytes;
      for (int32_t id : t.encode(text, false)) bytes += t.token_bytes(id);
      EXPECT_TRUE(bytes == text || bytes == " " + text)
          << name << ": '" << bytes << "' for '" << text << "'";
    }
  }
  // A special token's bytes are its content.
  const Tokenizer& q = tok("qwen3");
  EXPECT_EQ(q.token_bytes(*q.token_to_id("<|im_end|>")), "<|im_end|>");
  // A byte-fallback token is one raw byte, not U+FFFD.
  const Tokenizer& l = tok("llama2");
  EXPECT_EQ(l.token_bytes(*l.token_to_id("<0xE6>")), "\xE6");
}
