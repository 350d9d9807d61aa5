// Tokenizer encode and decode on the real tokenizers of tests/data/tokenizers
// (loaded once): Llama 2 (SentencePiece-style BPE), Llama 3 and Qwen3
// (byte-level BPE). The first byte picks the tokenizer and the mode:
//   encode the text (with and without special tokens) and decode the ids back;
//   decode the bytes read as little-endian int32 ids (any value: out of range,
//   negative, special), with and without skip_special_tokens and the
//   incremental detokenizer's DecodeControl.
#include <cstring>
#include <memory>
#include <span>
#include <vector>

#include "fuzz_util.h"
#include "text/tokenizer/tokenizer.h"

using halo::text::Tokenizer;

namespace {

std::vector<Tokenizer>& tokenizers() {
  static std::vector<Tokenizer> t = [] {
    std::vector<Tokenizer> v;
    const std::filesystem::path dir = std::filesystem::path(HALO_SOURCE_DIR) / "tests/data/tokenizers";
    for (const char* name : {"llama2", "llama3", "qwen3"}) v.push_back(Tokenizer::from_model_dir(dir / name));
    return v;
  }();
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  halo::fuzz::quiet();
  (void)tokenizers();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  auto& all = tokenizers();
  const Tokenizer& tok = all[(data[0] & 0x0f) % all.size()];
  const bool decode_ids = data[0] & 0x10;
  const bool skip_special = data[0] & 0x20;
  const bool add_special = data[0] & 0x40;
  ++data;
  --size;
  if (!decode_ids) {
    std::string_view text(reinterpret_cast<const char*>(data), size);
    halo::fuzz::guarded([&] {
      std::vector<int32_t> ids = tok.encode(text, add_special);
      std::string back = tok.decode(ids, skip_special);
      (void)back;
    });
    return 0;
  }
  std::vector<int32_t> ids(size / 4);
  if (!ids.empty()) std::memcpy(ids.data(), data, ids.size() * 4);
  halo::fuzz::guarded([&] { (void)tok.decode(ids, skip_special); });
  halo::fuzz::guarded([&] {
    Tokenizer::DecodeControl c;
    c.at_sequence_start = false;
    c.stable_only = add_special;
    (void)tok.decode(std::span<const int32_t>(ids), skip_special, c);
  });
  return 0;
}
