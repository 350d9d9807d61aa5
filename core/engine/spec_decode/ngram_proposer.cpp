#include "engine/spec_decode/ngram_proposer.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"

namespace halo::engine::spec {

int propose_ngram(std::span<const int32_t> prompt, std::span<const int32_t> output, int min_n,
                  int max_n, int max_k, std::vector<int32_t>& out) {
  out.clear();
  if (min_n < 1 || max_n < min_n)
    throw Error(fmt::format("propose_ngram: need 1 <= min_n <= max_n, got min_n={} max_n={}", min_n,
                            max_n));
  const int64_t split = static_cast<int64_t>(prompt.size());
  const int64_t total = split + static_cast<int64_t>(output.size());
  if (total < min_n || max_k <= 0) return 0;
  auto at = [&](int64_t i) { return i < split ? prompt[i] : output[i - split]; };

  // For each end e of a candidate occurrence (e <= total - 2: a token must follow it), the
  // length of the common suffix of tokens[..e] and the whole sequence, capped at max_n. The
  // first e reaching the largest length is the earliest occurrence of the longest n-gram.
  int best_len = 0;
  int64_t best_end = -1;
  for (int64_t e = 0; e + 1 < total && best_len < max_n; ++e) {
    const int64_t limit = std::min<int64_t>(max_n, e + 1);
    int len = 0;
    while (len < limit && at(e - len) == at(total - 1 - len)) ++len;
    if (len > best_len) best_len = len, best_end = e;
  }
  if (best_len < min_n) return 0;

  const int64_t start = best_end + 1;
  const int64_t count = std::min<int64_t>(max_k, total - start);
  for (int64_t i = 0; i < count; ++i) out.push_back(at(start + i));
  return static_cast<int>(count);
}

}  // namespace halo::engine::spec
