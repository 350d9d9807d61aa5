// Paged attention over the KV cache, read only through block tables.
//
// Cache layout per layer (K and V alike): [num_blocks, block_size, kv_heads,
// head_dim] of T, so sequence index j of a sequence with block table bt lives
// at slot bt[j / block_size] * block_size + j % block_size.
//
// Decode (one query token per sequence): DecodeAttnKernel, grid (items,
// kv_heads, partitions). A block handles the `group` query heads sharing one
// kv head (GQA: K/V are read once for the group) over one partition of
// `part_size` context positions (flash-decoding). With one partition the
// block writes the normalised result; otherwise it writes its unnormalised
// accumulator plus (max, sum) and DecodeReduceKernel combines partitions.
//
// Prefill / chunked prefill (several query tokens of one sequence):
// PrefillAttnKernel, grid (tiles, kv_heads). A tile is up to q_tile
// consecutive query tokens of one sequence; query i of a tile whose first
// query sits at sequence index c0 attends causally to [0, c0 + i]: the
// cached context plus the chunk's own earlier tokens. Keys are streamed
// through shared memory in tiles of kv_tile with an online softmax.
#pragma once

#include "common.cuh"

namespace halo::cuda::k {

struct AttnShape {
  int heads = 0, kv_heads = 0, head_dim = 0, block_size = 0;
  float scale = 1.f;
};

template <class T>
struct DecodeAttnKernel {
  struct Params {
    AttnShape s;
    const float* q;  // query of flat token t, head h at q + t * q_stride + h * head_dim
    int q_stride;
    const T* k_cache;
    const T* v_cache;
    const int32_t* item_token;  // [items] flat token of the query
    const int32_t* item_ctx;    // [items] positions attended: [0, ctx)
    const int32_t* item_row;    // [items] row of block_tables
    const int32_t* block_tables;
    int bt_stride;
    int part_size;
    int max_parts;
    T* out;          // token t, head h at out + t * heads * head_dim + h * head_dim
    float* tmp_out;  // [items, heads, max_parts, head_dim]
    float* tmp_ml;   // [items, heads, max_parts, 2]: max, sum
  };
  struct Regs {};
  // Shared memory (floats): q[group * D] | logits[group * P] | max[n] | sum[n]
  static size_t smem_floats(const AttnShape& s, int part_size, int nthreads) {
    const size_t g = static_cast<size_t>(s.heads / s.kv_heads);
    return g * static_cast<size_t>(s.head_dim) + g * static_cast<size_t>(part_size) + 2 * static_cast<size_t>(nthreads);
  }
  static int num_parts(int ctx, int part_size) { return ctx <= part_size ? 1 : ceil_div(ctx, part_size); }

  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs&) {
    const int D = p.s.head_dim, G = p.s.heads / p.s.kv_heads, P = p.part_size;
    const int item = c.block.x, g = c.block.y, part = c.block.z;
    const int ctx = p.item_ctx[item];
    const int token = p.item_token[item];
    const int start = part * P;
    const int n = imin(P, ctx - start);
    if (n <= 0) {  // beyond the context: nothing to do (an empty context writes zeros)
      if (part == 0 && phase == 0) {
        for (int e = c.tid; e < G * D; e += c.nthreads)
          p.out[static_cast<size_t>(token) * p.s.heads * D + static_cast<size_t>(g) * G * D + e] = from_float<T>(0.f);
      }
      return kDone;
    }
    const int nparts = ctx <= P ? 1 : ceil_div(ctx, P);
    float* sq = c.smem;
    float* logits = sq + G * D;
    float* red_max = logits + G * P;
    float* red_sum = red_max + c.nthreads;
    const int lanes = c.nthreads / G;  // threads per query head in the reductions
    const int gi_r = c.tid / lanes, lane = c.tid % lanes;
    const int32_t* bt = p.block_tables + static_cast<size_t>(p.item_row[item]) * p.bt_stride;
    const size_t tok_stride = static_cast<size_t>(p.s.kv_heads) * D;
    const int bs = p.s.block_size;
    switch (phase) {
      case 0:  // the group's queries, pre-scaled
        for (int e = c.tid; e < G * D; e += c.nthreads)
          sq[e] = p.q[static_cast<size_t>(token) * p.q_stride + static_cast<size_t>(g) * G * D + e] * p.s.scale;
        return 1;
      case 1:  // scores: one context position per thread, all heads of the group
        for (int j = c.tid; j < n; j += c.nthreads) {
          const int pos = start + j;
          const T* kp = p.k_cache + (static_cast<size_t>(bt[pos / bs]) * bs + pos % bs) * tok_stride +
                        static_cast<size_t>(g) * D;
          for (int gi = 0; gi < G; ++gi) {
            float s = 0.f;
            for (int d = 0; d < D; ++d) s += sq[gi * D + d] * to_float(kp[d]);
            logits[gi * P + j] = s;
          }
        }
        return 2;
      case 2:  // partial maxima, `lanes` threads per head
        if (gi_r < G) {
          float m = -INFINITY;
          for (int j = lane; j < n; j += lanes) m = fmax2(m, logits[gi_r * P + j]);
          red_max[c.tid] = m;
        }
        return 3;
      case 3: {  // exponentials and partial sums
        if (gi_r < G) {
          float m = -INFINITY;
          for (int i = 0; i < lanes; ++i) m = fmax2(m, red_max[gi_r * lanes + i]);
          float sum = 0.f;
          for (int j = lane; j < n; j += lanes) {
            const float e = ::expf(logits[gi_r * P + j] - m);
            logits[gi_r * P + j] = e;
            sum += e;
          }
          red_sum[c.tid] = sum;
        }
        return 4;
      }
      default: {  // weighted sum of V: one (head, dim) per thread
        for (int e = c.tid; e < G * D; e += c.nthreads) {
          const int gi = e / D, d = e % D;
          float m = -INFINITY, sum = 0.f;
          for (int i = 0; i < lanes; ++i) {
            m = fmax2(m, red_max[gi * lanes + i]);
            sum += red_sum[gi * lanes + i];
          }
          float acc = 0.f;
          for (int j = 0; j < n; ++j) {
            const int pos = start + j;
            const T* vp = p.v_cache + (static_cast<size_t>(bt[pos / bs]) * bs + pos % bs) * tok_stride +
                          static_cast<size_t>(g) * D;
            acc += logits[gi * P + j] * to_float(vp[d]);
          }
          const int h = g * G + gi;
          if (nparts == 1) {
            p.out[static_cast<size_t>(token) * p.s.heads * D + static_cast<size_t>(h) * D + d] =
                from_float<T>(sum > 0.f ? acc / sum : 0.f);
          } else {
            const size_t slot = (static_cast<size_t>(item) * p.s.heads + h) * p.max_parts + part;
            p.tmp_out[slot * D + d] = acc;
            if (d == 0) {
              p.tmp_ml[slot * 2] = m;
              p.tmp_ml[slot * 2 + 1] = sum;
            }
          }
        }
        return kDone;
      }
    }
  }
};

// Combines the partitions of DecodeAttnKernel: grid (items, heads).
template <class T>
struct DecodeReduceKernel {
  using Attn = DecodeAttnKernel<T>;
  struct Params {
    AttnShape s;
    const int32_t* item_token;
    const int32_t* item_ctx;
    int part_size;
    int max_parts;
    const float* tmp_out;
    const float* tmp_ml;
    T* out;
  };
  struct Regs {};
  HALO_HD static int step(int, const Params& p, const Ctx& c, Regs&) {
    const int item = c.block.x, h = c.block.y, D = p.s.head_dim;
    const int ctx = p.item_ctx[item];
    if (ctx <= p.part_size) return kDone;  // written directly by the attention kernel
    const int nparts = ceil_div(ctx, p.part_size);
    const size_t base = (static_cast<size_t>(item) * p.s.heads + h) * p.max_parts;
    float m = -INFINITY;
    for (int i = 0; i < nparts; ++i) m = fmax2(m, p.tmp_ml[(base + i) * 2]);
    float total = 0.f;
    for (int i = 0; i < nparts; ++i) total += p.tmp_ml[(base + i) * 2 + 1] * ::expf(p.tmp_ml[(base + i) * 2] - m);
    const float inv = total > 0.f ? 1.0f / total : 0.f;
    for (int d = c.tid; d < D; d += c.nthreads) {
      float acc = 0.f;
      for (int i = 0; i < nparts; ++i) acc += p.tmp_out[(base + i) * D + d] * ::expf(p.tmp_ml[(base + i) * 2] - m);
      p.out[static_cast<size_t>(p.item_token[item]) * p.s.heads * D + static_cast<size_t>(h) * D + d] =
          from_float<T>(acc * inv);
    }
    return kDone;
  }
};

template <class T>
struct PrefillAttnKernel {
  struct Params {
    AttnShape s;
    const float* q;
    int q_stride;
    const T* k_cache;
    const T* v_cache;
    const int32_t* tile_tok0;  // [tiles] flat token of the tile's first query
    const int32_t* tile_nq;    // [tiles] queries in the tile (<= q_tile)
    const int32_t* tile_c0;    // [tiles] sequence index of the first query
    const int32_t* tile_row;   // [tiles] row of block_tables
    const int32_t* block_tables;
    int bt_stride;
    int q_tile;   // queries per tile
    int kv_tile;  // keys per shared-memory tile
    T* out;
  };
  struct Regs {
    int kt = 0;  // current key tile (uniform across the block)
  };
  // rows R = q_tile * group. Shared (floats): q[R*D] | acc[R*D] | k[KT*D] |
  // v[KT*D] | p[R*KT] | m[R] | l[R] | corr[R]
  static size_t smem_floats(const AttnShape& s, int q_tile, int kv_tile) {
    const size_t R = static_cast<size_t>(q_tile) * (s.heads / s.kv_heads), D = s.head_dim, KT = kv_tile;
    return 2 * R * D + 2 * KT * D + R * KT + 3 * R;
  }

  // long: the kernel's phases (queries, K/V tile, scores, online softmax, P V, write), a barrier
  // apart, over one shared-memory layout: read in order as one switch, as the other kernels' steps
  HALO_HD static int step(int phase, const Params& p, const Ctx& c, Regs& r) {
    const int D = p.s.head_dim, G = p.s.heads / p.s.kv_heads, KT = p.kv_tile;
    const int R = p.q_tile * G;
    const int tile = c.block.x, g = c.block.y;
    const int nq = p.tile_nq[tile], c0 = p.tile_c0[tile], tok0 = p.tile_tok0[tile];
    const int n_keys = c0 + nq;  // keys seen by the tile's last query
    float* sq = c.smem;
    float* acc = sq + R * D;
    float* sk = acc + R * D;
    float* sv = sk + KT * D;
    float* sp = sv + KT * D;
    float* sm = sp + R * KT;
    float* sl = sm + R;
    float* corr = sl + R;
    const int base = r.kt * KT;
    switch (phase) {
      case 0:  // queries (row = i * G + gi), accumulators, running max and sum
        if (nq <= 0) return kDone;
        for (int e = c.tid; e < R * D; e += c.nthreads) {
          const int row = e / D, d = e % D, i = row / G, gi = row % G;
          sq[e] = i < nq ? p.q[static_cast<size_t>(tok0 + i) * p.q_stride + static_cast<size_t>(g * G + gi) * D + d] *
                               p.s.scale
                         : 0.f;
          acc[e] = 0.f;
        }
        for (int row = c.tid; row < R; row += c.nthreads) {
          sm[row] = -INFINITY;
          sl[row] = 0.f;
        }
        r.kt = 0;
        return 1;
      case 1: {  // K and V of keys [base, base + KT) through the block table
        const int32_t* bt = p.block_tables + static_cast<size_t>(p.tile_row[tile]) * p.bt_stride;
        const int bs = p.s.block_size;
        const size_t tok_stride = static_cast<size_t>(p.s.kv_heads) * D;
        for (int e = c.tid; e < KT * D; e += c.nthreads) {
          const int j = e / D, d = e % D, pos = base + j;
          if (pos < n_keys) {
            const size_t off = (static_cast<size_t>(bt[pos / bs]) * bs + pos % bs) * tok_stride +
                               static_cast<size_t>(g) * D + d;
            sk[e] = to_float(p.k_cache[off]);
            sv[e] = to_float(p.v_cache[off]);
          } else {
            sk[e] = 0.f;
            sv[e] = 0.f;
          }
        }
        return 2;
      }
      case 2:  // masked scores
        for (int e = c.tid; e < R * KT; e += c.nthreads) {
          const int row = e / KT, j = e % KT, i = row / G, pos = base + j;
          float s = -INFINITY;
          if (i < nq && pos <= c0 + i) {
            s = 0.f;
            for (int d = 0; d < D; ++d) s += sq[row * D + d] * sk[j * D + d];
          }
          sp[e] = s;
        }
        return 3;
      case 3:  // online softmax: new max, rescale factor, probabilities, running sum
        for (int row = c.tid; row < R; row += c.nthreads) {
          float mx = sm[row];
          for (int j = 0; j < KT; ++j) mx = fmax2(mx, sp[row * KT + j]);
          if (mx == -INFINITY) {  // no visible key yet (or a padding row)
            corr[row] = 1.f;
            for (int j = 0; j < KT; ++j) sp[row * KT + j] = 0.f;
            continue;
          }
          const float cr = ::expf(sm[row] - mx);  // exp(-inf) = 0 on the first visible tile
          float sum = 0.f;
          for (int j = 0; j < KT; ++j) {
            const float s = sp[row * KT + j];
            const float e = s == -INFINITY ? 0.f : ::expf(s - mx);
            sp[row * KT + j] = e;
            sum += e;
          }
          sl[row] = sl[row] * cr + sum;
          sm[row] = mx;
          corr[row] = cr;
        }
        return 4;
      case 4:  // rescale and accumulate P V
        for (int e = c.tid; e < R * D; e += c.nthreads) {
          const int row = e / D, d = e % D;
          float a = acc[e] * corr[row];
          for (int j = 0; j < KT; ++j) a += sp[row * KT + j] * sv[j * D + d];
          acc[e] = a;
        }
        ++r.kt;
        return r.kt * KT < n_keys ? 1 : 5;
      default:  // normalise and write
        for (int e = c.tid; e < R * D; e += c.nthreads) {
          const int row = e / D, d = e % D, i = row / G, gi = row % G;
          if (i >= nq) continue;
          const float l = sl[row];
          p.out[static_cast<size_t>(tok0 + i) * p.s.heads * D + static_cast<size_t>(g * G + gi) * D + d] =
              from_float<T>(l > 0.f ? acc[e] / l : 0.f);
        }
        return kDone;
    }
  }
};

}  // namespace halo::cuda::k
