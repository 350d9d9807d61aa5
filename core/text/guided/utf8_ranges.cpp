#include "text/guided/utf8_ranges.h"

#include <algorithm>

namespace halo::text::guided {

CpSet normalized(CpSet s) {
  std::sort(s.begin(), s.end(), [](const CpRange& a, const CpRange& b) { return a.lo < b.lo; });
  CpSet out;
  for (const CpRange& r : s) {
    if (!out.empty() && r.lo <= out.back().hi + 1) {
      out.back().hi = std::max(out.back().hi, r.hi);
    } else {
      out.push_back(r);
    }
  }
  return out;
}

CpSet negated(const CpSet& set) {
  const CpSet s = normalized(set);
  CpSet out;
  uint32_t next = 0;
  for (const CpRange& r : s) {
    if (r.lo > next) out.push_back({next, r.lo - 1});
    next = r.hi + 1;
  }
  if (next <= kMaxCodePoint) out.push_back({next, kMaxCodePoint});
  return out;
}

int utf8_encode(uint32_t cp, uint8_t* out) {
  if (cp < 0x80) {
    out[0] = static_cast<uint8_t>(cp);
    return 1;
  }
  if (cp < 0x800) {
    out[0] = static_cast<uint8_t>(0xC0 | (cp >> 6));
    out[1] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 2;
  }
  if (cp < 0x10000) {
    out[0] = static_cast<uint8_t>(0xE0 | (cp >> 12));
    out[1] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
    out[2] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
    return 3;
  }
  out[0] = static_cast<uint8_t>(0xF0 | (cp >> 18));
  out[1] = static_cast<uint8_t>(0x80 | ((cp >> 12) & 0x3F));
  out[2] = static_cast<uint8_t>(0x80 | ((cp >> 6) & 0x3F));
  out[3] = static_cast<uint8_t>(0x80 | (cp & 0x3F));
  return 4;
}

// The byte-range sequences whose union is the UTF-8 encodings of the code points
// in [lo, hi] (surrogates left out): split at encoding-length boundaries, then
// until every continuation byte spans a full or aligned range.
void utf8_sequences(uint32_t lo, uint32_t hi, std::vector<ByteSeq>& out) {
  std::vector<CpRange> todo{{lo, hi}};
  while (!todo.empty()) {
    CpRange r = todo.back();
    todo.pop_back();
    if (r.lo > r.hi) continue;
    if (r.lo <= 0xDFFF && r.hi >= 0xD800) {
      if (r.lo < 0xD800) todo.push_back({r.lo, 0xD7FF});
      if (r.hi > 0xDFFF) todo.push_back({0xE000, r.hi});
      continue;
    }
    bool split = false;
    for (uint32_t max : {0x7Fu, 0x7FFu, 0xFFFFu}) {
      if (r.lo <= max && r.hi > max) {
        todo.push_back({max + 1, r.hi});
        todo.push_back({r.lo, max});
        split = true;
        break;
      }
    }
    if (split) continue;
    for (int i = 1; i < 4 && !split; ++i) {
      const uint32_t m = (1u << (6 * i)) - 1;
      if ((r.lo & ~m) != (r.hi & ~m)) {
        if ((r.lo & m) != 0) {
          todo.push_back({(r.lo | m) + 1, r.hi});
          todo.push_back({r.lo, r.lo | m});
          split = true;
        } else if ((r.hi & m) != m) {
          todo.push_back({r.hi & ~m, r.hi});
          todo.push_back({r.lo, (r.hi & ~m) - 1});
          split = true;
        }
      }
    }
    if (split) continue;
    uint8_t a[4], b[4];
    const int n = utf8_encode(r.lo, a);
    utf8_encode(r.hi, b);
    ByteSeq seq;
    for (int i = 0; i < n; ++i) seq.push_back({a[i], b[i]});
    out.push_back(std::move(seq));
  }
}

int utf8_decode(std::string_view s, size_t pos, uint32_t& cp) {
  if (pos >= s.size()) return 0;
  const auto b0 = static_cast<uint8_t>(s[pos]);
  const int len = b0 < 0x80         ? 1
                  : (b0 >> 5) == 6  ? 2
                  : (b0 >> 4) == 14 ? 3
                  : (b0 >> 3) == 30 ? 4
                                    : 0;
  if (len == 0 || pos + static_cast<size_t>(len) > s.size()) return 0;
  uint32_t v = len == 1 ? b0 : len == 2 ? (b0 & 0x1F) : len == 3 ? (b0 & 0x0F) : (b0 & 0x07);
  for (int i = 1; i < len; ++i) {
    const auto b = static_cast<uint8_t>(s[pos + static_cast<size_t>(i)]);
    if ((b & 0xC0) != 0x80) return 0;
    v = (v << 6) | (b & 0x3F);
  }
  static constexpr uint32_t kMin[] = {0, 0, 0x80, 0x800, 0x10000};
  if (v < kMin[len] || v > kMaxCodePoint || (v >= 0xD800 && v <= 0xDFFF)) return 0;
  cp = v;
  return len;
}

}  // namespace halo::text::guided
