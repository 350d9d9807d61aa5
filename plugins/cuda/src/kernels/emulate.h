// Host emulation of a kernel written in the step() form of common.cuh: every
// block of the grid runs phase by phase; within a phase every thread runs to
// its barrier before the next phase starts, which is exactly what
// __syncthreads guarantees on the GPU. Threads of a phase run in a shuffled
// order (seeded), so code that relies on an order of threads between two
// barriers (a race on the GPU) gives wrong results here too. Shared memory
// is filled with NaN before each block, so reads of unwritten shared memory
// show up as NaN in the outputs.
#pragma once

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "common.cuh"

namespace halo::cuda::k {

template <class K>
void emulate(const typename K::Params& p, Dim3 grid, int nthreads, size_t smem_floats, uint32_t seed = 1) {
  std::vector<float> smem(smem_floats + 1);
  std::vector<typename K::Regs> regs(static_cast<size_t>(nthreads));
  std::vector<int> order(static_cast<size_t>(nthreads));
  std::iota(order.begin(), order.end(), 0);
  std::mt19937 rng(seed);
  Ctx c;
  c.grid = grid;
  c.nthreads = nthreads;
  c.smem = smem.data();
  for (int z = 0; z < grid.z; ++z)
    for (int y = 0; y < grid.y; ++y)
      for (int x = 0; x < grid.x; ++x) {
        c.block = Dim3{x, y, z};
        std::fill(smem.begin(), smem.end(), std::numeric_limits<float>::quiet_NaN());
        std::fill(regs.begin(), regs.end(), typename K::Regs{});
        int phase = 0;
        for (int guard = 0;; ++guard) {
          if (guard > 1000000) throw std::runtime_error("emulate: too many phases");
          std::shuffle(order.begin(), order.end(), rng);
          int next = 0;
          for (size_t i = 0; i < order.size(); ++i) {
            c.tid = order[i];
            const int n = K::step(phase, p, c, regs[static_cast<size_t>(c.tid)]);
            if (i == 0) {
              next = n;
            } else if (n != next) {
              throw std::runtime_error("emulate: threads of block (" + std::to_string(x) + "," + std::to_string(y) +
                                       "," + std::to_string(z) + ") disagree after phase " + std::to_string(phase) +
                                       " (" + std::to_string(next) + " vs " + std::to_string(n) +
                                       "): a divergent __syncthreads");
            }
          }
          if (next < 0) break;
          phase = next;
        }
      }
}

}  // namespace halo::cuda::k
