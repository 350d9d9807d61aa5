#pragma once
// Code-point sets and their UTF-8 encodings as byte ranges: what the regex DFA
// and the grammar compiler both lower character classes to. Pure functions.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace halo::text::guided {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

struct CpRange {
  uint32_t lo, hi;
};
using CpSet = std::vector<CpRange>;

// Sorted, with overlapping and adjacent ranges merged.
CpSet normalized(CpSet s);
// Every code point up to kMaxCodePoint not in `set`.
CpSet negated(const CpSet& set);

struct ByteRange {
  uint8_t lo, hi;
};
using ByteSeq = std::vector<ByteRange>;

// Writes cp's UTF-8 encoding to out (4 bytes of room); returns its length.
int utf8_encode(uint32_t cp, uint8_t* out);
// Decodes the character at s[pos]: its length, with cp set; 0 for invalid
// UTF-8 (truncated, overlong, a surrogate, above U+10FFFF).
int utf8_decode(std::string_view s, size_t pos, uint32_t& cp);
// Appends the byte-range sequences whose union is the UTF-8 encodings of the
// code points in [lo, hi] (surrogates left out).
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out);

}  // namespace halo::text::guided
