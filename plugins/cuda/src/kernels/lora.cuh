// LoRA adapters (ABI v1.6): the grouped low-rank update of a projection,
//
//   y[t, col0 : col0 + out] += (x[t, :] A^T) B^T
//
// for the rows t of a step whose sequence runs with an adapter slot, in two
// kernels as Punica's SGMV / S-LoRA: "shrink" xa = x A^T (A [rank, K]) and
// "expand" y += xa B^T. The step's LoRA rows are grouped by slot on the host
// (step_plan.h, lora_tiles): a tile is up to kLoraTileRows rows of one slot,
// listed in `rows` (packed row ids) from `start`; a tile of slot -1 is unused
// (graph capacity) and does nothing. Rows of the base model (slot -1) are in
// no tile, so their y is never touched.
//
// A fused projection (q|k|v, gate|up) runs as one launch: grid.z picks the
// projection, mats[z][slot] its adapter in that slot (rank 0: none, the
// projection is left as it is). A is stored [rank, K] and B transposed, bt
// [rank, out], both in W (the plugin: bf16); x is the GEMM input T, xa and y
// fp32, every product accumulated in fp32 and xa never rounded.
//
// Batch invariance: a row's xa and y are computed in a fixed order (lane
// stride over K, then the 32 lanes summed in order; the rank in order) that
// depends on neither the other rows of its tile nor the tiles of the step.
#pragma once

#include "common.cuh"

#ifndef HALO_UNROLL
#if defined(__CUDA_ARCH__)  // the device pass only: the host compiler knows no such pragma
#define HALO_UNROLL _Pragma("unroll")
#else
#define HALO_UNROLL
#endif
#endif

namespace halo::cuda::k {

constexpr int kLoraTileRows = 8;  // rows of one slot per tile
constexpr int kLoraMaxFused = 3;  // projections of one launch (q, k, v)

// One projection's adapter in one slot.
template <class W>
struct LoraMat {
  const W* a = nullptr;   // [rank, K]
  const W* bt = nullptr;  // [rank, out] (B transposed)
  int32_t rank = 0;       // 0: no adapter
};

// a[z] of a kernel parameter array without indexing it at run time (which
// would copy the parameters to local memory on the GPU).
template <class V>
HALO_HD inline V pick(const V (&a)[kLoraMaxFused], int z) {
  static_assert(kLoraMaxFused == 3, "pick() selects among 3");
  return z == 0 ? a[0] : z == 1 ? a[1] : a[2];
}

// The tiles of a step (step_plan.h).
struct LoraTiles {
  const int32_t* slot = nullptr;   // [tiles], -1: unused
  const int32_t* start = nullptr;  // [tiles], into rows
  const int32_t* count = nullptr;  // [tiles], 1..kLoraTileRows
  const int32_t* rows = nullptr;   // packed row ids, grouped by slot
};

// xa[row, z * max_rank + j] = sum_k x[row, k] A_z[j, k] for j < rank.
// grid (tiles, ceil(max_rank / (nthreads / 32)), nproj), nthreads a multiple
// of 32 (one warp per rank output); shared memory smem_floats(nthreads).
template <class T, class W>
struct LoraShrinkKernel {
  struct Params {
    const T* x;  // [rows, K]
    int K;
    const LoraMat<W>* mats[kLoraMaxFused];  // per projection: [max_loras]
    int nproj;
    LoraTiles tiles;
    float* xa;  // [rows, xa_ld]
    int xa_ld, max_rank;
  };
  struct Regs {};
  static constexpr size_t smem_floats(int nthreads) {
    return static_cast<size_t>(kLoraTileRows) * nthreads;
  }

  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs&) {
    const int t = c.block.x, z = c.block.z;
    const int slot = p.tiles.slot[t];
    if (slot < 0) return kDone;
    const LoraMat<W> m = pick(p.mats, z)[slot];
    const int warps = c.nthreads / 32, w = c.tid / 32, lane = c.tid % 32;
    const int j0 = c.block.y * warps, j = j0 + w;
    if (j0 >= m.rank) return kDone;  // the whole block is past the rank
    const int n = p.tiles.count[t];
    const int32_t* rows = p.tiles.rows + p.tiles.start[t];
    if (phase == 0) {
      float acc[kLoraTileRows] = {};
      if (j < m.rank) {
        const W* a = m.a + static_cast<size_t>(j) * p.K;
        for (int kk = lane; kk < p.K; kk += 32) {
          const float av = to_float(a[kk]);
          HALO_UNROLL
          for (int r = 0; r < kLoraTileRows; ++r) {
            if (r >= n) break;
            acc[r] += to_float(p.x[static_cast<size_t>(rows[r]) * p.K + kk]) * av;
          }
        }
      }
      HALO_UNROLL
      for (int r = 0; r < kLoraTileRows; ++r)
        if (r < n) c.smem[r * c.nthreads + c.tid] = acc[r];
      return 1;
    }
    // Thread (w, lane = r) sums warp w's 32 partials of row r in order.
    if (lane < n && j < m.rank) {
      const float* part = c.smem + lane * c.nthreads + w * 32;
      float sum = 0.f;
      for (int i = 0; i < 32; ++i) sum += part[i];
      p.xa[static_cast<size_t>(rows[lane]) * p.xa_ld + static_cast<size_t>(z) * p.max_rank + j] =
          sum;
    }
    return kDone;
  }
};

// y[row, col0[z] + col] += sum_j xa[row, z * max_rank + j] Bt_z[j, col].
// grid (tiles, ceil(max out / nthreads), nproj), one output column a thread;
// shared memory smem_floats(max_rank).
template <class W>
struct LoraExpandKernel {
  struct Params {
    const float* xa;  // [rows, xa_ld]
    int xa_ld, max_rank;
    const LoraMat<W>* mats[kLoraMaxFused];
    int col0[kLoraMaxFused], out[kLoraMaxFused];
    int nproj;
    LoraTiles tiles;
    float* y;  // [rows, ldy]
    int ldy;
  };
  struct Regs {};
  static constexpr size_t smem_floats(int max_rank) {
    return static_cast<size_t>(kLoraTileRows) * (max_rank > 0 ? max_rank : 1);
  }

  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs&) {
    const int t = c.block.x, z = c.block.z;
    const int slot = p.tiles.slot[t];
    if (slot < 0) return kDone;
    const LoraMat<W> m = pick(p.mats, z)[slot];
    const int out = pick(p.out, z), col = c.block.y * c.nthreads + c.tid;
    if (m.rank == 0 || c.block.y * c.nthreads >= out) return kDone;
    const int n = p.tiles.count[t], R = m.rank;
    const int32_t* rows = p.tiles.rows + p.tiles.start[t];
    if (phase == 0) {  // the tile's xa rows into shared memory
      for (int e = c.tid; e < n * R; e += c.nthreads) {
        const int r = e / R, j = e % R;
        c.smem[r * R + j] =
            p.xa[static_cast<size_t>(rows[r]) * p.xa_ld + static_cast<size_t>(z) * p.max_rank + j];
      }
      return 1;
    }
    if (col < out) {
      float acc[kLoraTileRows] = {};
      for (int j = 0; j < R; ++j) {
        const float b = to_float(m.bt[static_cast<size_t>(j) * out + col]);
        HALO_UNROLL
        for (int r = 0; r < kLoraTileRows; ++r) {
          if (r >= n) break;
          acc[r] += c.smem[r * R + j] * b;
        }
      }
      HALO_UNROLL
      for (int r = 0; r < kLoraTileRows; ++r) {
        if (r >= n) break;
        p.y[static_cast<size_t>(rows[r]) * p.ldy + pick(p.col0, z) + col] += acc[r];
      }
    }
    return kDone;
  }
};

// The plugin's instantiations: A and B in bf16 (launch.h's list takes no commas).
template <class T>
using LoraShrink = LoraShrinkKernel<T, bf16>;
using LoraExpand = LoraExpandKernel<bf16>;

}  // namespace halo::cuda::k
