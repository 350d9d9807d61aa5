// Tokenizer from GGUF metadata (Tokenizer::from_gguf_metadata). The metadata
// is written at test time by tools/make_gguf.py --vocab-only --metadata-json
// from each tokenizer.json, and the resulting tokenizer must encode the corpus
// exactly as the tokenizer.json-loaded one does. Plus the error cases.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "common/error.h"
#include "text/tokenizer/tokenizer.h"

namespace fs = std::filesystem;
using halo::text::Tokenizer;
using nlohmann::json;

namespace {

fs::path data_dir(const std::string& name) {
  if (name == "pkgchat-5m") return fs::path(HALO_SOURCE_DIR) / "models" / "pkgchat-5m";
  return fs::path(HALO_TEST_DATA_DIR) / "tokenizers" / name;
}

std::vector<std::string> corpus() {
  std::vector<std::string> out;
  std::ifstream in(fs::path(HALO_SOURCE_DIR) / "tests" / "text" / "corpus.jsonl");
  for (std::string line; std::getline(in, line);) {
    if (line.empty()) continue;
    const json j = json::parse(line);
    out.push_back(j.is_string() ? j.get<std::string>() : j.at("text").get<std::string>());
  }
  return out;
}

// tools/make_gguf.py --vocab-only DIR - --metadata-json OUT; fails the test
// (not skip) when python3 or numpy is missing.
json gguf_metadata(const std::string& name) {
  const std::string python = HALO_GGUF_PYTHON;
  if (python.empty()) {
    ADD_FAILURE()
        << "no python3 found at configure time (HALO_PYTHON); run scripts/install-deps.sh --test";
    return json();
  }
  const fs::path out = fs::temp_directory_path() /
                       ("halo_gguf_md_" + name + "_" + std::to_string(::getpid()) + ".json");
  const std::string cmd = "'" + python +
                          "' '" HALO_SOURCE_DIR "/tools/make_gguf.py' --vocab-only '" +
                          data_dir(name).string() + "' - --metadata-json '" + out.string() + "'";
  const int rc = std::system(cmd.c_str());
  if (rc != 0) {
    ADD_FAILURE() << "make_gguf.py failed (exit " << (WIFEXITED(rc) ? WEXITSTATUS(rc) : -1)
                  << "): " << cmd << " (needs python3-numpy: run scripts/install-deps.sh --test)";
    return json();
  }
  std::ifstream in(out);
  json md = json::parse(in);
  fs::remove(out);
  return md;
}

class GgufTokenizerCorpus : public ::testing::TestWithParam<std::string> {};

TEST_P(GgufTokenizerCorpus, EncodesLikeTokenizerJson) {
  const std::string name = GetParam();
  const json md = gguf_metadata(name);
  ASSERT_TRUE(md.is_object());
  const Tokenizer hf = Tokenizer::from_model_dir(data_dir(name));
  const Tokenizer gg = Tokenizer::from_gguf_metadata(md, name + ".gguf");
  EXPECT_EQ(gg.source(), fs::path(name + ".gguf"));
  EXPECT_EQ(gg.adds_bos(), hf.adds_bos());
  EXPECT_EQ(gg.adds_eos(), hf.adds_eos());
  EXPECT_EQ(gg.bos_token_id(), hf.bos_token_id());
  EXPECT_EQ(gg.vocab_size(), hf.vocab_size());
  if (hf.adds_eos()) {
    EXPECT_EQ(gg.eos_token_id(), hf.eos_token_id());
  }
  int mismatches = 0;
  for (const auto& text : corpus()) {
    const auto ids = hf.encode(text, true);
    const auto plain = hf.encode(text, false);
    const auto gids = gg.encode(text, true);
    EXPECT_EQ(gids, ids) << name << ": " << text;
    EXPECT_EQ(gg.encode(text, false), plain) << name << ": " << text;
    EXPECT_EQ(gg.decode(gids, true), hf.decode(ids, true)) << name << ": " << text;
    EXPECT_EQ(gg.decode(gids, false), hf.decode(ids, false)) << name << ": " << text;
    EXPECT_EQ(gg.decode(plain, true), hf.decode(plain, true)) << name << ": " << text;
    for (std::size_t i = 0; i < gids.size(); ++i) {
      if (gg.id_to_token(gids[i]) != hf.id_to_token(gids[i]) ||
          gg.is_special(gids[i]) != hf.is_special(gids[i]))
        ++mismatches;
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(Families, GgufTokenizerCorpus,
                         ::testing::Values("llama2", "mistral", "llama3", "qwen3", "pkgchat-5m"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (auto& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

// A tiny SentencePiece-style vocabulary.
json tiny_spm() {
  json md;
  md["tokenizer.ggml.model"] = "llama";
  md["tokenizer.ggml.pre"] = "default";
  md["tokenizer.ggml.tokens"] = {"<unk>", "<s>", "</s>",    "<0x41>", "\u2581",
                                 "a",     "b",   "\u2581a", "ab",     "\u2581ab"};
  md["tokenizer.ggml.scores"] = {0.0, 0.0, 0.0, 0.0, -100.0, -101.0, -102.0, -1.0, -2.0, -3.0};
  md["tokenizer.ggml.token_type"] = {2, 3, 3, 6, 1, 1, 1, 1, 1, 1};
  md["tokenizer.ggml.bos_token_id"] = 1;
  md["tokenizer.ggml.eos_token_id"] = 2;
  md["tokenizer.ggml.unknown_token_id"] = 0;
  return md;
}

TEST(GgufTokenizer, SpmMergesFollowScores) {
  const json tj = halo::text::tokenizer_json_from_gguf(tiny_spm());
  // "▁a" (score -1) first, then "ab" (-2), then "▁ab" from its two splits in id order.
  const json expected = json::array({json::array({"\u2581", "a"}), json::array({"a", "b"}),
                                     json::array({"\u2581", "ab"}), json::array({"\u2581a", "b"})});
  EXPECT_EQ(tj["model"]["merges"], expected);
  EXPECT_EQ(tj["model"]["unk_token"], "<unk>");
  EXPECT_TRUE(tj["model"]["byte_fallback"].get<bool>());
  EXPECT_EQ(tj["added_tokens"].size(), 3u);

  const Tokenizer t = Tokenizer::from_gguf_metadata(tiny_spm(), "tiny");
  EXPECT_EQ(t.encode("ab ab", true), (std::vector<int32_t>{1, 9, 9}));  // <s> ▁ab ▁ab
  EXPECT_EQ(t.encode("A", false), (std::vector<int32_t>{4, 3}));        // ▁ <0x41>
  EXPECT_EQ(t.decode(std::vector<int32_t>{1, 9, 9, 4, 3}, true), "ab ab A");
  EXPECT_TRUE(t.adds_bos());
  EXPECT_FALSE(t.adds_eos());
  EXPECT_EQ(t.bos_token(), "<s>");
  EXPECT_EQ(t.eos_token(), "</s>");
}

TEST(GgufTokenizer, NoSpacePrefixAndAddEos) {
  json md = tiny_spm();
  md["tokenizer.ggml.add_space_prefix"] = false;
  md["tokenizer.ggml.add_bos_token"] = false;
  md["tokenizer.ggml.add_eos_token"] = true;
  const Tokenizer t = Tokenizer::from_gguf_metadata(md, "tiny");
  EXPECT_EQ(t.encode("ab ab", true), (std::vector<int32_t>{8, 9, 2}));  // ab ▁ab </s>
  EXPECT_EQ(t.decode(std::vector<int32_t>{8, 9, 2}, true), "ab ab");
}

TEST(GgufTokenizer, ConfigCarriesChatTemplate) {
  json md = tiny_spm();
  md["tokenizer.chat_template"] = "{{ bos_token }}";
  const json c = halo::text::tokenizer_config_from_gguf(md);
  EXPECT_EQ(c["chat_template"], "{{ bos_token }}");
  EXPECT_EQ(c["bos_token"], "<s>");
  EXPECT_EQ(c["unk_token"], "<unk>");
  EXPECT_TRUE(c["add_bos_token"].get<bool>());
}

void expect_error(const json& md, const std::string& needle) {
  try {
    (void)Tokenizer::from_gguf_metadata(md, "bad");
    ADD_FAILURE() << "no error; expected one mentioning " << needle;
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

TEST(GgufTokenizer, MalformedMetadataNamesTheKey) {
  expect_error(json::array(), "not a JSON object");
  json md = tiny_spm();
  md.erase("tokenizer.ggml.tokens");
  expect_error(md, "'tokenizer.ggml.tokens' is missing");
  md = tiny_spm();
  md["tokenizer.ggml.tokens"] = "abc";
  expect_error(md, "'tokenizer.ggml.tokens' is not an array");
  md = tiny_spm();
  md["tokenizer.ggml.tokens"][3] = 7;
  expect_error(md, "'tokenizer.ggml.tokens' entry 3 is not a string");
  md = tiny_spm();
  md.erase("tokenizer.ggml.model");
  expect_error(md, "'tokenizer.ggml.model' is missing");
  md = tiny_spm();
  md["tokenizer.ggml.model"] = "bert";
  expect_error(md, "'tokenizer.ggml.model' is 'bert'");
  md = tiny_spm();
  md["tokenizer.ggml.scores"].erase(0);
  expect_error(md, "'tokenizer.ggml.scores' has 9 entries but 'tokenizer.ggml.tokens' has 10");
  md = tiny_spm();
  md.erase("tokenizer.ggml.scores");
  expect_error(md, "'tokenizer.ggml.scores' is missing");
  md = tiny_spm();
  md["tokenizer.ggml.scores"][2] = "x";
  expect_error(md, "'tokenizer.ggml.scores' entry 2 is not a number");
  md = tiny_spm();
  md["tokenizer.ggml.token_type"] = {1, 1};
  expect_error(md, "'tokenizer.ggml.token_type' has 2 entries");
  md = tiny_spm();
  md["tokenizer.ggml.token_type"][1] = "control";
  expect_error(md, "'tokenizer.ggml.token_type' entry 1 is not an integer");
  md = tiny_spm();
  md["tokenizer.ggml.bos_token_id"] = 10;
  expect_error(md, "'tokenizer.ggml.bos_token_id' is 10, not a token id");
  md = tiny_spm();
  md["tokenizer.ggml.eos_token_id"] = "2";
  expect_error(md, "'tokenizer.ggml.eos_token_id' is not an integer");
  md = tiny_spm();
  md.erase("tokenizer.ggml.bos_token_id");
  expect_error(
      md, "'tokenizer.ggml.add_bos_token' is set but 'tokenizer.ggml.bos_token_id' is missing");
  md = tiny_spm();
  md["tokenizer.ggml.add_space_prefix"] = 1;
  expect_error(md, "'tokenizer.ggml.add_space_prefix' is not a boolean");
  md = tiny_spm();
  md["tokenizer.chat_template"] = 3;
  expect_error(md, "'tokenizer.chat_template' is not a string");
}

json tiny_gpt2() {
  json md;
  md["tokenizer.ggml.model"] = "gpt2";
  md["tokenizer.ggml.pre"] = "qwen2";
  md["tokenizer.ggml.tokens"] = {"a", "b", "ab", "\u0120", "\u0120ab", "<|end|>"};
  md["tokenizer.ggml.token_type"] = {1, 1, 1, 1, 1, 3};
  md["tokenizer.ggml.merges"] = {"a b", "\u0120 ab"};
  md["tokenizer.ggml.eos_token_id"] = 5;
  return md;
}

TEST(GgufTokenizer, Gpt2) {
  const Tokenizer t = Tokenizer::from_gguf_metadata(tiny_gpt2(), "tiny");
  EXPECT_EQ(t.encode("ab ab<|end|>", true), (std::vector<int32_t>{2, 4, 5}));
  EXPECT_FALSE(t.adds_bos());
  EXPECT_TRUE(t.is_special(5));
  EXPECT_EQ(t.decode(std::vector<int32_t>{2, 4, 5}, true), "ab ab");
}

TEST(GgufTokenizer, Gpt2Errors) {
  json md = tiny_gpt2();
  md["tokenizer.ggml.pre"] = "starcoder";
  expect_error(md,
               "'tokenizer.ggml.pre' is 'starcoder', which halo does not know (known: llama-bpe, "
               "llama3, llama-v3, qwen2)");
  md = tiny_gpt2();
  md.erase("tokenizer.ggml.pre");
  expect_error(md, "'tokenizer.ggml.pre' is missing");
  md = tiny_gpt2();
  md.erase("tokenizer.ggml.merges");
  expect_error(md, "'tokenizer.ggml.merges' is missing");
  md = tiny_gpt2();
  md["tokenizer.ggml.merges"][1] = "ab";
  expect_error(md, "'tokenizer.ggml.merges' entry 1 is not a string \"A B\"");
}

TEST(GgufTokenizer, FromJsonSharesTheLoaderChecks) {
  // from_json applies from_files' checks to an in-memory tokenizer.json.
  const json tj = {{"model", {{"type", "BPE"}, {"vocab", {{"a", -1}}}, {"merges", json::array()}}}};
  try {
    (void)Tokenizer::from_json(tj, json(), "mem");
    ADD_FAILURE() << "no error";
  } catch (const halo::Error& e) {
    EXPECT_NE(std::string(e.what()).find("mem: model.vocab token \"a\" has id -1"),
              std::string::npos)
        << e.what();
  }
  const json tj2 = {{"model", {{"type", "WordPiece"}, {"vocab", {{"a", 0}}}}}};
  EXPECT_THROW((void)Tokenizer::from_json(tj2, json::object(), "mem"), halo::Error);
}

}  // namespace
