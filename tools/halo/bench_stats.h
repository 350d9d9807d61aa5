#pragma once
// Summary statistics shared by `halo bench throughput` and `halo bench latency`.
#include <algorithm>
#include <cstddef>
#include <vector>

namespace halo::tools {

// The p-th percentile (0..100) of v at the nearest rank (index rounded to
// nearest); 0 for an empty v.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  size_t i = static_cast<size_t>(std::min<double>(v.size() - 1, p / 100.0 * (v.size() - 1) + 0.5));
  return v[i];
}

}  // namespace halo::tools
