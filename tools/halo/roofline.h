#pragma once
// Host rooflines measured on the spot, for `halo bench latency`: how fast the
// host streams memory it only reads (the ceiling of a memory-bound decode
// step on the CPU plugin).
#include <cstddef>

namespace halo::tools {

struct ReadBandwidth {
  double bytes_per_s = 0;       // median pass: the roofline
  double best_bytes_per_s = 0;  // fastest pass
  size_t buffer_bytes = 0;      // the buffer read each pass
  int threads = 0;
  int passes = 0;      // timed passes (the untimed first touch excluded)
  double seconds = 0;  // wall time of the whole probe, first touch included
};

// Streams a buffer of `buffer_bytes` (rounded up to whole pages; pick it
// well above the last-level cache, e.g. 1 GiB) with `threads` threads (0: all
// cores), each summing its own contiguous slice as uint64 words, pass after
// pass until `budget_s` seconds are spent (at least 5 timed passes). The
// roofline is the median pass (bytes read / wall time of the pass), as decode
// steps are reported by their median: on a shared VM the best of many passes
// catches bursts that no sustained stream gets.
ReadBandwidth measure_read_bandwidth(size_t buffer_bytes, int threads, double budget_s);

}  // namespace halo::tools
