#include "engine/block_hash.h"

namespace halo::engine {
namespace {

// FNV-64a fed with canonical CBOR items, without building the encoding.
class CborFnv {
 public:
  void byte(uint8_t b) { h_ = (h_ ^ b) * 1099511628211ull; }
  // A CBOR head: major type and argument, in the shortest form.
  void head(uint8_t major, uint64_t v) {
    const uint8_t m = static_cast<uint8_t>(major << 5);
    if (v < 24) return byte(m | static_cast<uint8_t>(v));
    int bytes = v <= 0xff ? 1 : v <= 0xffff ? 2 : v <= 0xffffffffull ? 4 : 8;
    byte(m | static_cast<uint8_t>(bytes == 1 ? 24 : bytes == 2 ? 25 : bytes == 4 ? 26 : 27));
    for (int i = bytes - 1; i >= 0; --i) byte(static_cast<uint8_t>(v >> (8 * i)));
  }
  void uint(uint64_t v) { head(0, v); }
  void array(uint64_t n) { head(4, n); }
  void null() { byte(0xf6); }
  void text(std::string_view s) {
    head(3, s.size());
    for (char c : s) byte(static_cast<uint8_t>(c));
  }
  uint64_t value() const { return h_; }

 private:
  uint64_t h_ = 14695981039346656037ull;
};

}  // namespace

uint64_t block_hash_root(std::string_view seed, std::string_view model_name) {
  CborFnv s;  // the seed's hash: FNV-64a of its bytes, no CBOR
  for (char c : seed) s.byte(static_cast<uint8_t>(c));
  CborFnv h;
  h.array(3);
  h.uint(s.value());
  h.null();
  h.text(model_name);
  return h.value();
}

uint64_t block_hash(uint64_t parent, std::span<const int32_t> tokens) {
  CborFnv h;
  h.array(3);
  h.uint(parent);
  h.array(tokens.size());
  for (int32_t t : tokens) h.uint(static_cast<uint32_t>(t));
  h.null();
  return h.value();
}

}  // namespace halo::engine
