#pragma once
// UTF-8 and Unicode helpers shared by the tokenizer pipeline (internal).
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace halo::text::unicode {

// Decodes the code point at s[pos] (s must be valid UTF-8); returns its byte length.
std::size_t decode_at(std::string_view s, std::size_t pos, char32_t& cp);
void append_utf8(std::string& out, char32_t cp);

// Byte offset of the first invalid UTF-8 sequence, or npos when s is valid.
std::size_t first_invalid_utf8(std::string_view s);
// Length of a trailing sequence that is a valid but incomplete UTF-8 prefix (0..3).
std::size_t incomplete_utf8_tail(std::string_view s);
// Lossy conversion: each maximal invalid subpart becomes U+FFFD (like Rust's
// String::from_utf8_lossy and the WHATWG decoder).
std::string utf8_lossy(std::string_view bytes);

bool is_whitespace(char32_t cp);  // Unicode White_Space
bool is_numeric(char32_t cp);     // general category N*
bool is_alphabetic_or_numeric(char32_t cp);

enum class NormForm { NFC, NFD, NFKC, NFKD };
std::string normalize(std::string_view s, NormForm form);
std::string lowercase(std::string_view s);

// GPT-2's byte <-> printable code point map used by ByteLevel.
struct ByteLevelMap {
  std::array<std::string, 256> byte_to_utf8;  // byte -> UTF-8 of its code point
  std::array<int16_t, 512> cp_to_byte;        // code point (<512) -> byte, -1 if none
};
const ByteLevelMap& byte_level_map();

}  // namespace halo::text::unicode
