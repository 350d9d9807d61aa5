#include "engine/pooling.h"

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <cmath>

#include "common/error.h"

namespace halo::engine {

PoolingType parse_pooling_type(std::string_view name) {
  std::string n(name);
  std::transform(n.begin(), n.end(), n.begin(), [](unsigned char c) { return std::toupper(c); });
  if (n == "LAST") return PoolingType::kLast;
  if (n == "MEAN") return PoolingType::kMean;
  if (n == "CLS") return PoolingType::kCls;
  throw Error(fmt::format("unknown pooling type '{}' (one of LAST, MEAN, CLS)", name));
}

const char* pooling_type_name(PoolingType type) {
  switch (type) {
    case PoolingType::kLast:
      return "LAST";
    case PoolingType::kMean:
      return "MEAN";
    case PoolingType::kCls:
      return "CLS";
    case PoolingType::kNone:
      break;
  }
  return "NONE";
}

void pool_rows(const PoolingParams& p, PoolState& s, int first_position, int count, int width,
               const float* rows) {
  if (p.type == PoolingType::kLast) return;  // finish_pooling reads the last row itself
  for (int k = 0; k < count; ++k) {
    const int pos = first_position + k;
    if (pos < s.positions) continue;  // recomputed
    if (pos > s.positions)
      throw Error(
          fmt::format("pooling: prompt position {} arrived before position {}", pos, s.positions));
    if (p.type == PoolingType::kMean || (p.type == PoolingType::kCls && pos == 0)) {
      const float* r = rows + static_cast<size_t>(k) * static_cast<size_t>(width);
      s.acc.resize(static_cast<size_t>(width), 0.0);
      for (int j = 0; j < width; ++j) s.acc[static_cast<size_t>(j)] += r[j];
    }
    s.positions = pos + 1;
  }
}

std::vector<float> finish_pooling(const PoolingParams& p, const PoolState& s, int num_positions,
                                  const float* last, int width) {
  std::vector<double> v(static_cast<size_t>(width));
  if (p.type == PoolingType::kLast) {
    std::copy(last, last + width, v.begin());
  } else {
    if (s.positions != num_positions || s.acc.size() != v.size())
      throw Error(fmt::format("pooling: {} of {} prompt positions were pooled", s.positions,
                              num_positions));
    const double scale = p.type == PoolingType::kMean ? 1.0 / num_positions : 1.0;
    for (size_t j = 0; j < v.size(); ++j) v[j] = s.acc[j] * scale;
  }
  if (p.dimensions > 0 && p.dimensions < width) v.resize(static_cast<size_t>(p.dimensions));
  double norm = 1.0;
  if (p.normalize) {
    double ss = 0;
    for (double x : v) ss += x * x;
    // As torch.nn.functional.normalize: divide by max(||v||, 1e-12).
    norm = std::max(std::sqrt(ss), 1e-12);
  }
  std::vector<float> out(v.size());
  for (size_t j = 0; j < v.size(); ++j) out[j] = static_cast<float>(v[j] / norm);
  return out;
}

}  // namespace halo::engine
