#pragma once
// Hugging Face tokenizer.json BPE tokenizer (SentencePiece-style and byte-level).
//
// Behaviour follows the `tokenizers` library: the text is first split on the
// added tokens (leftmost-longest), the other pieces are normalized,
// pre-tokenized and BPE-encoded, then the post-processor adds BOS/EOS when
// add_special_tokens is set. Decoding runs the tokenizer.json decoder chain and,
// when tokenizer_config.json asks for it, transformers' clean_up_tokenization.
//
// A Tokenizer is immutable after loading; copies share the loaded data and all
// const methods are safe to call from several threads.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace halo::text {

namespace detail {
struct TokenizerData;
}

class Tokenizer {
 public:
  // Reads DIR/tokenizer.json and, if present, DIR/tokenizer_config.json.
  static Tokenizer from_model_dir(const std::filesystem::path& dir);
  // tokenizer_config may be empty (no config).
  static Tokenizer from_files(const std::filesystem::path& tokenizer_json,
                              const std::filesystem::path& tokenizer_config);
  // The same from already parsed JSON (tokenizer_config may be null or {}):
  // one loading path with from_files. source_name names the origin in
  // messages and is what source() returns.
  static Tokenizer from_json(nlohmann::json tokenizer_json, nlohmann::json tokenizer_config,
                             const std::string& source_name);
  // From a GGUF file's metadata, as a JSON object keyed by the GGUF keys
  // (tokenizer.ggml.*, tokenizer.chat_template): from_json of
  // tokenizer_json_from_gguf and tokenizer_config_from_gguf below.
  static Tokenizer from_gguf_metadata(const nlohmann::json& metadata,
                                      const std::string& source_name);

  // add_special_tokens: apply the post-processor (TemplateProcessing, or the
  // add_bos_token/add_eos_token of a Llama-class tokenizer_config). Added
  // tokens written in the text are always recognized, as Hugging Face does.
  // Throws halo::Error when `text` is not valid UTF-8.
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = true) const;

  // Ids without a token (gaps in the vocabulary) are skipped, as Hugging Face does.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // Lower-level decode used by the incremental detokenizer.
  struct DecodeControl {
    // false: `ids` continue a sequence whose text is already non-empty, so
    // start-of-text rules (Strip decoder start, Metaspace first token) do not apply.
    bool at_sequence_start = true;
    // true: leave out the tail that later ids could still change (an
    // unfinished byte-fallback group, an incomplete UTF-8 sequence, text that
    // clean-up or a trailing Strip could still alter). The result is then a
    // prefix of the decode of any extension of `ids`.
    bool stable_only = false;
    // true: bytes that are not valid UTF-8 (half of a character split over
    // tokens) are kept as they are instead of becoming U+FFFD, and no
    // clean-up is applied (token_bytes).
    bool raw_bytes = false;
  };
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens, DecodeControl control) const;

  // The bytes token `id` adds to the text when it follows other tokens
  // (special tokens: their content; byte-fallback and byte-level tokens: their
  // raw bytes, possibly part of a UTF-8 character). What guided decoding
  // matches token masks against; "" for an id without a token.
  std::string token_bytes(int32_t id) const;

  int32_t vocab_size() const;  // max id + 1 over the vocabulary and the added tokens
  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::string id_to_token(int32_t id) const;  // raw piece; throws halo::Error when there is none
  bool is_special(int32_t id) const;
  bool is_added_token(int32_t id) const;          // listed in tokenizer.json's added_tokens
  bool is_byte_fallback_token(int32_t id) const;  // <0xNN> with byte_fallback decoding

  std::optional<int32_t> bos_token_id() const;
  std::optional<int32_t> eos_token_id() const;
  // Strings from tokenizer_config.json (plain strings or {"content": ...}); empty when absent.
  const std::string& bos_token() const;
  const std::string& eos_token() const;
  bool adds_bos() const;  // whether encode(..., true) prepends BOS
  bool adds_eos() const;  // whether encode(..., true) appends EOS

  // The tokenizer.json this was loaded from (for messages).
  const std::filesystem::path& source() const;

  Tokenizer(const Tokenizer&) = default;
  Tokenizer& operator=(const Tokenizer&) = default;
  Tokenizer(Tokenizer&&) noexcept = default;
  Tokenizer& operator=(Tokenizer&&) noexcept = default;
  ~Tokenizer();

 private:
  explicit Tokenizer(std::shared_ptr<const detail::TokenizerData> data);
  std::shared_ptr<const detail::TokenizerData> d_;
};

// GGUF tokenizer metadata (llama.cpp's conventions) -> the equivalent Hugging
// Face tokenizer.json. tokenizer.ggml.model "llama" (SentencePiece BPE with
// scores) becomes a byte-fallback BPE whose merges are derived from the scores
// as Hugging Face's SentencePiece conversion does (every split of a token into
// two tokens, ranked by that token's score), with "\u2581" for spaces and,
// when tokenizer.ggml.add_space_prefix (default true), a "\u2581" prepended
// to each text piece as llama.cpp does. "gpt2" (byte-level BPE with merges)
// gets the pre-tokenizer regex of tokenizer.ggml.pre ("llama-bpe", "qwen2").
// Tokens of type 2 (unknown), 3 (control) and 4 (user-defined) become added
// tokens (2 and 3 special), type 5 (unused) ids are left out. BOS/EOS from
// tokenizer.ggml.add_bos_token / add_eos_token go in the post-processor.
// Throws halo::Error naming the key when the metadata is malformed (missing
// tokens, wrong types, lengths that disagree, an unknown model or pre).
nlohmann::json tokenizer_json_from_gguf(const nlohmann::json& metadata);
// The tokenizer_config.json part: bos_token, eos_token, unk_token, pad_token
// (token strings), add_bos_token, add_eos_token, chat_template, and
// clean_up_tokenization_spaces (true for "llama-bpe", as Llama 3's config and
// llama.cpp have it).
nlohmann::json tokenizer_config_from_gguf(const nlohmann::json& metadata);

}  // namespace halo::text
