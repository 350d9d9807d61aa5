// bf16 x bf16 -> fp32 matmul over weights packed once at load.
//
// Packed layout ("N in lanes", like oneDNN's BA16a64b2a): the N output
// columns are cut into blocks of 16; block b holds, for every k-pair p, the
// 16 columns x 2 consecutive k values as 16 little 32-bit pairs (64 bytes):
//   data[b * stride + p * 32 + 2 * lane + j] = W[16 * b + lane][2 * p + j]
// with stride = 32 * ceil(K / 2) rounded up to a multiple of 16 k-pairs (1
// KiB). Columns past N and the k past K are 0. One k-pair of one block is
// exactly the second operand of vdpbf16ps, so the kernel loads it straight
// and broadcasts the matching pair of x; 16 k-pairs of one block are an AMX
// B tile (gemm_bf16_amx.cpp, used instead of this file's kernels when the
// CPU has AMX: see Paths below).
//
// Microkernel: MR activation rows x NB column blocks of zmm accumulators. Per
// k-pair: NB 64-byte weight loads, MR 32-bit broadcasts, MR*NB vdpbf16ps.
// Every output element has one accumulator that walks k-pairs 0..K/2 in
// order; when K is blocked the accumulator goes through y (an exact fp32
// store/load), and the bias is added once at the end, so the result of an
// element does not depend on MR, NB, the row's place in the batch, blocking
// or the thread that ran it.
//
// Scheduling:
//  - M <= 8 (decode): bandwidth bound. One row tile holds all M rows, so
//    every weight byte is read once; column panels are split into contiguous
//    chunks per task (optional software prefetch, see kPrefetchPairs).
//  - M > 8 (prefill, large decode batches): compute bound. 6x4 microkernel
//    (24 accumulators) over row tiles of near-equal height; a task owns a
//    contiguous range of 64-column panels (or one panel and a block of rows
//    when there are few panels); K is cut into blocks so the panel's slice
//    (128 KiB) stays in L2 while all the row tiles pass over it, and the next
//    block is prefetched a line per k-pair across those tiles, so reading it
//    from DRAM does not stall the first tile (decode at batch 32: 290 -> 225
//    ms per TinyLlama step).
//
// Paths: AMX (tdpbf16ps) when the CPU and the OS allow it, else AVX512-BF16,
// else portable. AMX and vdpbf16ps round differently, so one path serves
// every M of a process (batch invariance); HALO_GEMM_AMX=0 in the
// environment (or set_gemm_bf16_amx(false)) forces the AVX-512 path.
#include "halo/kernels/gemm_bf16.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>

#ifdef __linux__
#include <sys/mman.h>
#endif

#include "gemm_bf16_amx.h"
#include "halo/kernels/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALO_HAVE_BF16_PATH 1
// See simd.cpp: GCC 12's AVX-512 headers trip -Wuninitialized when inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define HALO_TARGET_BF16 \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,fma")))
#endif

namespace halo::kernels {

struct GemmAccess {
  static size_t stride(const PackedWeight& w) { return w.stride_; }
};

namespace {

constexpr size_t kLanes = 16;      // columns per block
constexpr size_t kPairElems = 32;  // uint16 per (block, k-pair) = 64 bytes
constexpr int kMaxDecodeRows = 8;  // M up to this: one pass over the weights
constexpr int kPrefillMR = 6;
constexpr int kPrefillNB = 4;
#ifndef HALO_GEMM_KBLOCK
#define HALO_GEMM_KBLOCK 512
#endif
constexpr size_t kKBlockPairs = HALO_GEMM_KBLOCK;  // prefill K block in k-pairs
// AMX past 16 rows: K block in chunks of 16 k-pairs. The panel's slice (2
// blocks, 2 KiB per chunk: 256 KiB) and a row group's (the same) stay in L2
// while the row groups pass over the slice; TinyLlama's K (2048, 5632) needs
// no blocking (8-32 chunks were slower: C goes through y at each block).
#ifndef HALO_GEMM_AMX_KBLOCK
#define HALO_GEMM_AMX_KBLOCK 128
#endif
constexpr size_t kAmxKBlockChunks = HALO_GEMM_AMX_KBLOCK;

inline size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }

inline uint16_t rne_bf16(uint32_t u) {
  // Same rounding as f32_to_bf16, inline so loops over rows vectorise.
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);
  return static_cast<uint16_t>((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

void f32_row_to_bf16_portable(const float* src, uint16_t* dst, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, src + i, 4);
    dst[i] = rne_bf16(u);
  }
}

#ifdef HALO_HAVE_BF16_PATH
// rne_bf16 in integer lanes: the same bits (NaNs quieted, denormals kept).
HALO_TARGET_BF16 void f32_row_to_bf16_avx512(const float* src, uint16_t* dst, size_t n) {
  const __m512i one = _mm512_set1_epi32(1), half = _mm512_set1_epi32(0x7fff);
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
  const __m512i quiet = _mm512_set1_epi32(0x40);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1u);
    const __m512i u = _mm512_maskz_loadu_epi32(m, src + i);
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(u, abs_mask), inf);
    const __m512i hi = _mm512_srli_epi32(u, 16);
    const __m512i r = _mm512_srli_epi32(
        _mm512_add_epi32(_mm512_add_epi32(u, half), _mm512_and_si512(hi, one)), 16);
    const __m512i v = _mm512_mask_or_epi32(r, nan, hi, quiet);
    _mm512_mask_cvtepi32_storeu_epi16(dst + i, m, v);
  }
}

HALO_TARGET_BF16 void f16_row_to_bf16_avx512(const uint16_t* src, uint16_t* dst, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 f = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src + i)));
    // fp16 values are exact in fp32; vcvtneps2bf16 rounds to nearest even
    // (it would flush fp32 denormals, but no fp16 value is one).
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), (__m256i)_mm512_cvtneps_pbh(f));
  }
  for (; i < n; ++i) dst[i] = rne_bf16(f32_to_bits(f16_to_f32(src[i])));
}
#endif

void f32_row_to_bf16(const float* src, uint16_t* dst, size_t n) {
#ifdef HALO_HAVE_BF16_PATH
  if (cpu_has_avx512_bf16()) return f32_row_to_bf16_avx512(src, dst, n);
#endif
  f32_row_to_bf16_portable(src, dst, n);
}

void f16_row_to_bf16(const uint16_t* src, uint16_t* dst, size_t n) {
#ifdef HALO_HAVE_BF16_PATH
  if (cpu_has_avx512_bf16()) return f16_row_to_bf16_avx512(src, dst, n);
#endif
  for (size_t i = 0; i < n; ++i) dst[i] = rne_bf16(f32_to_bits(f16_to_f32(src[i])));
}

// ------------------------------------------------------------ microkernels
// Arguments shared by every variant. x: bf16 rows (stride ldx elements, even
// length), w: the first block of the panel (blocks `wstride` apart), pairs
// [p0, p1) of K. y: fp32 rows (stride ldy) at the panel's first column;
// `tail` = valid columns of the last block (1..16). first: accumulators
// start at 0 (else from y); last: add bias (if any) and write the result.
struct Tile {
  const uint16_t* x;
  size_t ldx;
  const uint16_t* w;
  size_t wstride;
  size_t p0, p1;
  float* y;
  size_t ldy;
  const float* bias;  // at the panel's first column, or nullptr
  unsigned tail;
  bool first, last;
  // Prefetch of the next K block while this one computes (prefill path): up
  // to pf_left 64-byte lines, walking streams of pf_stream_lines lines
  // pf_stride bytes apart from line pf_p of the stream at pf_b.
  const char* pf_b = nullptr;
  size_t pf_p = 0, pf_stream_lines = 0, pf_stride = 0, pf_left = 0;
};

using KernelFn = void (*)(const Tile& t);

// Portable version with the arithmetic of vdpbf16ps: per k-pair
// acc += x[2p+1]*w[2p+1]; acc += x[2p]*w[2p], products of bf16 being exact in
// fp32 (so contraction into fma gives the same bits).
template <int MR, int NB>
void kernel_generic(const Tile& t) {
  float acc[MR][NB * kLanes];
  for (int r = 0; r < MR; ++r)
    for (size_t c = 0; c < NB * kLanes; ++c) {
      const bool valid = c < (NB - 1) * kLanes + t.tail;
      acc[r][c] = t.first || !valid ? 0.f : t.y[r * t.ldy + c];
    }
  for (size_t p = t.p0; p < t.p1; ++p) {
    float x0[MR], x1[MR];
    for (int r = 0; r < MR; ++r) {
      x0[r] = bf16_to_f32(t.x[r * t.ldx + 2 * p]);
      x1[r] = bf16_to_f32(t.x[r * t.ldx + 2 * p + 1]);
    }
    for (int b = 0; b < NB; ++b) {
      const uint16_t* wp = t.w + b * t.wstride + p * kPairElems;
      for (size_t l = 0; l < kLanes; ++l) {
        // One 32-bit load per pair (GCC 12 -O3 miscompiled this loop with
        // two interleaved 16-bit loads: wrong sums for K = 3).
        uint32_t pair;
        std::memcpy(&pair, wp + 2 * l, 4);
        const float w0 = bits_to_f32(pair << 16), w1 = bits_to_f32(pair & 0xffff0000u);
        for (int r = 0; r < MR; ++r) {
          float& a = acc[r][b * kLanes + l];
          a += x1[r] * w1;
          a += x0[r] * w0;
        }
      }
    }
  }
  const size_t ncols = (NB - 1) * kLanes + t.tail;
  for (int r = 0; r < MR; ++r)
    for (size_t c = 0; c < ncols; ++c)
      t.y[r * t.ldy + c] = t.last && t.bias != nullptr ? acc[r][c] + t.bias[c] : acc[r][c];
}

#ifdef HALO_HAVE_BF16_PATH
// Software prefetch distance for the bandwidth-bound decode kernels, in
// k-pairs (64-byte lines) ahead of each block's stream; 0 = off. On Zen4 the
// hardware prefetchers already keep the 3-4 sequential streams per thread at
// the streaming-read rate (8/24/64 measured no better), so it is off by default.
#ifndef HALO_GEMM_PREFETCH_PAIRS
#define HALO_GEMM_PREFETCH_PAIRS 0
#endif
constexpr size_t kPrefetchPairs = HALO_GEMM_PREFETCH_PAIRS;

template <int MR, int NB, bool Prefetch>
HALO_TARGET_BF16 void kernel_avx512(const Tile& t) {
  __m512 acc[MR][NB];
  const __mmask16 tail_mask = static_cast<__mmask16>((1u << t.tail) - 1u);
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      if (t.first) {
        acc[r][b] = _mm512_setzero_ps();
      } else {
        const float* yp = t.y + r * t.ldy + b * kLanes;
        acc[r][b] = b == NB - 1 ? _mm512_maskz_loadu_ps(tail_mask, yp) : _mm512_loadu_ps(yp);
      }
    }
  }
  const uint16_t* xr[MR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) xr[r] = t.x + r * t.ldx;
  const uint16_t* wb = t.w + t.p0 * kPairElems;
  const char* pf_b = t.pf_b;
  size_t pf_p = t.pf_p, pf_left = t.pf_left;
  for (size_t p = t.p0; p < t.p1; ++p, wb += kPairElems) {
    // One line of the next K block per k-pair: the weight stream from DRAM
    // is spread over every row tile instead of stalling the first one.
    if (pf_left != 0) {
      _mm_prefetch(pf_b + pf_p * 64, _MM_HINT_T1);
      if (++pf_p == t.pf_stream_lines) pf_p = 0, pf_b += t.pf_stride;
      --pf_left;
    }
    __m512bh wv[NB];
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      if constexpr (Prefetch && kPrefetchPairs > 0)
        _mm_prefetch(
            reinterpret_cast<const char*>(wb + b * t.wstride + kPrefetchPairs * kPairElems),
            _MM_HINT_T0);
      wv[b] = (__m512bh)_mm512_load_si512(wb + b * t.wstride);
    }
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      uint32_t pair;
      std::memcpy(&pair, xr[r] + 2 * p, 4);
      const __m512bh xv = (__m512bh)_mm512_set1_epi32(static_cast<int>(pair));
#pragma GCC unroll 4
      for (int b = 0; b < NB; ++b) acc[r][b] = _mm512_dpbf16_ps(acc[r][b], xv, wv[b]);
    }
  }
  __m512 bias[NB];
  const bool add_bias = t.last && t.bias != nullptr;
  if (add_bias) {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b)
      bias[b] = b == NB - 1 ? _mm512_maskz_loadu_ps(tail_mask, t.bias + b * kLanes)
                            : _mm512_loadu_ps(t.bias + b * kLanes);
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r) {
#pragma GCC unroll 4
    for (int b = 0; b < NB; ++b) {
      const __m512 v = add_bias ? _mm512_add_ps(acc[r][b], bias[b]) : acc[r][b];
      float* yp = t.y + r * t.ldy + b * kLanes;
      if (b == NB - 1)
        _mm512_mask_storeu_ps(yp, tail_mask, v);
      else
        _mm512_storeu_ps(yp, v);
    }
  }
}
#endif

// Kernel tables indexed [MR - 1][NB - 1]; only MR * NB <= 24 is dispatched.
struct KernelSet {
  KernelFn k[kMaxDecodeRows][kPrefillNB];
};

template <template <int, int> class Make, int... I>
constexpr KernelSet make_set(std::integer_sequence<int, I...>) {
  KernelSet s{};
  ((s.k[I / kPrefillNB][I % kPrefillNB] = Make<I / kPrefillNB + 1, I % kPrefillNB + 1>::fn), ...);
  return s;
}

template <int MR, int NB>
struct MakeGeneric {
  static constexpr KernelFn fn = kernel_generic<MR, NB>;
};
constexpr KernelSet kGenericSet =
    make_set<MakeGeneric>(std::make_integer_sequence<int, kMaxDecodeRows * kPrefillNB>{});

#ifdef HALO_HAVE_BF16_PATH
template <int MR, int NB>
struct MakeAvx {
  static constexpr KernelFn fn = kernel_avx512<MR, NB, false>;
};
template <int MR, int NB>
struct MakeAvxPf {
  static constexpr KernelFn fn = kernel_avx512<MR, NB, true>;
};
constexpr KernelSet kAvxSet =
    make_set<MakeAvx>(std::make_integer_sequence<int, kMaxDecodeRows * kPrefillNB>{});
constexpr KernelSet kAvxPfSet =
    make_set<MakeAvxPf>(std::make_integer_sequence<int, kMaxDecodeRows * kPrefillNB>{});
#endif

// ------------------------------------------------------------ driver
struct Plan {
  const KernelSet* kernels;
  const uint16_t* xb;  // bf16 activations, row stride ldxb
  size_t ldxb;
  const uint16_t* w;
  size_t wstride;
  size_t kp;  // k-pairs
  size_t nb;  // column blocks
  size_t N;
  float* y;
  size_t ldy;
  const float* bias;
  size_t M;
  int mr;         // rows per tile
  int panel_nb;   // blocks per panel
  size_t kblock;  // k-pairs per K block
  bool prefetch = false;  // prefetch each next K block (prefill path)
};

// Computes rows [m0, m1) x panels [q0, q1): K block outermost per panel so
// the panel's slice is reused from L2 by every row tile.
void run_range(const Plan& pl, size_t m0, size_t m1, size_t q0, size_t q1) {
  for (size_t q = q0; q < q1; ++q) {
    const size_t b0 = q * static_cast<size_t>(pl.panel_nb);
    const size_t nbq = std::min<size_t>(static_cast<size_t>(pl.panel_nb), pl.nb - b0);
    const size_t col0 = b0 * kLanes;
    const size_t ncols = std::min(nbq * kLanes, pl.N - col0);
    Tile t{};
    t.wstride = pl.wstride;
    t.ldx = pl.ldxb;
    t.ldy = pl.ldy;
    t.w = pl.w + b0 * pl.wstride;
    t.bias = pl.bias != nullptr ? pl.bias + col0 : nullptr;
    t.tail = static_cast<unsigned>(ncols - (nbq - 1) * kLanes);
    // Row tiles of near-equal height (e.g. 32 rows as 6,6,5,5,5,5, not
    // 6x5 + 2): every element's arithmetic is the same for any tile height.
    const size_t rows = m1 - m0;
    const size_t ntiles = div_up(rows, static_cast<size_t>(pl.mr));
    for (size_t p0 = 0; p0 < pl.kp; p0 += pl.kblock) {
      t.p0 = p0;
      t.p1 = std::min(pl.kp, p0 + pl.kblock);
      t.first = p0 == 0;
      t.last = t.p1 == pl.kp;
      // The block after this one: the next K range of this panel, else the
      // first of the next panel of the range.
      size_t nq = q, np0 = t.p1;
      if (np0 == pl.kp) nq = q + 1, np0 = 0;
      size_t pf_total = 0, pf_lines = 0, nstreams = 0;
      const char* pf_base = nullptr;
      if (pl.prefetch && nq < q1) {
        const size_t nb0 = nq * static_cast<size_t>(pl.panel_nb);
        nstreams = std::min<size_t>(static_cast<size_t>(pl.panel_nb), pl.nb - nb0);
        pf_lines = std::min(pl.kp, np0 + pl.kblock) - np0;
        pf_total = nstreams * pf_lines;
        pf_base = reinterpret_cast<const char*>(pl.w + nb0 * pl.wstride + np0 * kPairElems);
      }
      size_t m = m0;
      for (size_t i = 0; i < ntiles; ++i) {
        const size_t h = rows / ntiles + (i < rows % ntiles ? 1 : 0);
        t.x = pl.xb + m * pl.ldxb;
        t.y = pl.y + m * pl.ldy + col0;
        if (pf_total != 0) {
          const size_t a = pf_total * i / ntiles, b = pf_total * (i + 1) / ntiles;
          t.pf_b = pf_base + (a / pf_lines) * pl.wstride * sizeof(uint16_t);
          t.pf_p = a % pf_lines;
          t.pf_stream_lines = pf_lines;
          t.pf_stride = pl.wstride * sizeof(uint16_t);
          t.pf_left = b - a;
        }
        pl.kernels->k[h - 1][nbq - 1](t);
        m += h;
      }
    }
  }
}

bool use_avx_path() {
#ifdef HALO_HAVE_BF16_PATH
  // Follows the SIMD selection of the other kernels (HALO_KERNELS_SIMD=generic,
  // set_simd_path) so the portable path can be forced.
  return cpu_has_avx512_bf16() && std::strcmp(simd_name(), "avx512") == 0;
#else
  return false;
#endif
}

// AMX wanted: on unless HALO_GEMM_AMX=0 (or set_gemm_bf16_amx(false)).
std::atomic<bool>& amx_wanted() {
  static std::atomic<bool> on{[] {
    const char* e = std::getenv("HALO_GEMM_AMX");
    return e == nullptr || std::strcmp(e, "0") != 0;
  }()};
  return on;
}

bool use_amx_path() {
  // AMX serves every M, or none (its bits differ from vdpbf16ps's); the
  // portable path forced (HALO_KERNELS_SIMD=generic) turns it off too.
  return amx_wanted().load(std::memory_order_relaxed) && use_avx_path() && amx::supported();
}

// Runs f(m0, m1) over row ranges of x: on the pool when there are enough
// elements to convert to pay for the hand-off (prefill), else inline.
template <class F>
void for_row_ranges(ThreadPool& pool, size_t M, size_t K, F&& f) {
  const size_t tasks = std::min<size_t>(M, static_cast<size_t>(pool.size()));
  if (tasks <= 1 || M * K < (size_t{1} << 16)) return f(size_t{0}, M);
  pool.parallel_for(tasks, [&](size_t i, int) { f(M * i / tasks, M * (i + 1) / tasks); });
}

// Activations to bf16 once per call, rows ldxb apart, zero from K to ldxb.
void convert_rows(ThreadPool& pool, const float* x, size_t M, size_t ldx, size_t K, uint16_t* xb,
                  size_t ldxb) {
  for_row_ranges(pool, M, K, [&](size_t m0, size_t m1) {
    for (size_t m = m0; m < m1; ++m) {
      f32_row_to_bf16(x + m * ldx, xb + m * ldxb, K);
      std::fill(xb + m * ldxb + K, xb + (m + 1) * ldxb, uint16_t{0});
    }
  });
}

// For the AMX path: as A tiles, 16 rows x one chunk of 32 k contiguous (1
// KiB, row stride 64 bytes, chunk c of rows 16g.. at (g * chunks + c) * 512),
// zero past K. Tile loads then read whole lines in order, and rows of one
// tile do not fall into one cache set (rows of x are often 4 KiB apart).
void convert_rows_tiled(ThreadPool& pool, const float* x, size_t M, size_t ldx, size_t K,
                        size_t chunks, uint16_t* xb) {
  constexpr size_t kChunk = 2 * amx::kChunkPairs, kTileElems = amx::kTileRows * kChunk;
  for_row_ranges(pool, M, K, [&](size_t m0, size_t m1) {
    for (size_t m = m0; m < m1; ++m) {
      uint16_t* row =
          xb + (m / amx::kTileRows) * chunks * kTileElems + (m % amx::kTileRows) * kChunk;
      for (size_t c = 0; c < chunks; ++c) {
        const size_t k0 = c * kChunk, n = std::min(kChunk, K - std::min(K, k0));
        f32_row_to_bf16(x + m * ldx + k0, row + c * kTileElems, n);
        std::fill(row + c * kTileElems + n, row + c * kTileElems + kChunk, uint16_t{0});
      }
    }
  });
}

// Contiguous ranges of `panels` over a few tasks per thread: dynamic hand-out
// evens out a busy core without splitting the stream into many short pieces.
template <class F>
void for_panel_ranges(ThreadPool& pool, size_t panels, F&& f) {
  const size_t threads = static_cast<size_t>(pool.size());
  const size_t tasks = std::min(panels, threads == 1 ? 1 : threads * 4);
  pool.parallel_for(tasks, [&](size_t i, int) { f(panels * i / tasks, panels * (i + 1) / tasks); });
}

// The AMX path: one tile walk of K for every M (see gemm_bf16_amx.h).
void gemm_amx(ThreadPool& pool, const float* x, size_t M, size_t ldx, const PackedWeight& w,
              const float* bias, float* y, size_t ldy, GemmScratch& scratch) {
  const size_t K = w.K();
  const size_t chunks = div_up(div_up(K, 2), amx::kChunkPairs);
  const size_t xb_size = div_up(M, amx::kTileRows) * chunks * amx::kTileRows * 2 * amx::kChunkPairs;
  if (scratch.x_bf16.size() < xb_size) scratch.x_bf16.resize(xb_size);
  convert_rows_tiled(pool, x, M, ldx, K, chunks, scratch.x_bf16.data());
  amx::Gemm g{};
  g.xb = scratch.x_bf16.data();
  g.w = w.data();
  g.wstride = GemmAccess::stride(w);
  g.chunks = chunks;
  g.N = w.N();
  g.y = y;
  g.ldy = ldy;
  g.bias = bias;
  const size_t nb = div_up(w.N(), kLanes);
  if (M <= amx::kTileRows) {
    // One A tile: the weights stream once.
    g.kblock = chunks;
    const size_t pw = amx::kDecodePanel, panels = div_up(nb, pw);
    for_panel_ranges(pool, panels, [&](size_t q0, size_t q1) {
      amx::run(g, 0, M, q0 * pw, std::min(nb, q1 * pw));
    });
    return;
  }
  g.kblock = kAmxKBlockChunks;
  const size_t pw = amx::kPrefillPanel, panels = div_up(nb, pw);
  const size_t threads = static_cast<size_t>(pool.size());
  // Split rows (in groups of 32) too when there are too few panels.
  const size_t group = 2 * amx::kTileRows, want = threads * 8;
  const size_t row_blocks = panels >= want ? 1 : div_up(want, panels);
  const size_t rows_per = std::max(group, div_up(div_up(M, row_blocks), group) * group);
  const size_t nrb = div_up(M, rows_per);
  if (nrb == 1) {
    for_panel_ranges(pool, panels, [&](size_t q0, size_t q1) {
      amx::run(g, 0, M, q0 * pw, std::min(nb, q1 * pw));
    });
    return;
  }
  pool.parallel_for(panels * nrb, [&](size_t i, int) {
    const size_t q = i / nrb, m0 = (i % nrb) * rows_per;
    amx::run(g, m0, std::min(M, m0 + rows_per), q * pw, std::min(nb, (q + 1) * pw));
  });
}

}  // namespace

bool cpu_has_avx512_bf16() {
#ifdef HALO_HAVE_BF16_PATH
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("fma");
  }();
  return has;
#else
  return false;
#endif
}

bool cpu_has_amx_bf16() { return amx::supported(); }

const char* gemm_bf16_path() {
  return use_amx_path() ? "amx" : use_avx_path() ? "avx512-bf16" : "generic";
}

bool set_gemm_bf16_amx(bool on) {
  amx_wanted().store(on, std::memory_order_relaxed);
  return !on || use_amx_path();
}

void PackedWeight::Free::operator()(uint16_t* p) const noexcept { std::free(p); }

size_t PackedWeight::bytes() const { return div_up(n_, kLanes) * stride_ * sizeof(uint16_t); }

PackedWeight PackedWeight::pack(const std::vector<WeightSource>& sources, size_t K) {
  if (K == 0) throw std::invalid_argument("PackedWeight::pack: K must be > 0");
  size_t N = 0;
  for (const WeightSource& s : sources) {
    if (s.rows > 0 && s.data == nullptr)
      throw std::invalid_argument("PackedWeight::pack: null source data");
    N += s.rows;
  }
  if (N == 0) throw std::invalid_argument("PackedWeight::pack: no rows");
  const size_t kp = div_up(K, 2);
  const size_t nb = div_up(N, kLanes);
  PackedWeight pw;
  pw.n_ = N;
  pw.k_ = K;
  pw.stride_ = div_up(kp, amx::kChunkPairs) * amx::kChunkPairs * kPairElems;
  const size_t bytes = nb * pw.stride_ * sizeof(uint16_t);  // a multiple of 64
  // Large weights on 2 MiB boundaries with transparent huge pages asked for:
  // the decode kernel streams several blocks at once, TLB misses show.
  const size_t align = bytes >= (size_t{4} << 20) ? (size_t{2} << 20) : 64;
  auto* mem = static_cast<uint16_t*>(std::aligned_alloc(align, div_up(bytes, align) * align));
  if (mem == nullptr) throw std::bad_alloc();
#ifdef __linux__
  if (align > 64) madvise(mem, div_up(bytes, align) * align, MADV_HUGEPAGE);  // a hint only
#endif
  pw.data_.reset(mem);

  // 16 source rows at a time as bf16 (converted into tmp when needed, padded
  // to an even length), then interleaved pair by pair: writes are sequential
  // 64-byte lines, reads 16 sequential streams.
  std::vector<uint16_t> tmp(kLanes * 2 * kp, 0);
  const uint32_t* rows[kLanes];
  size_t src = 0, src_row = 0;  // next source row to pack
  for (size_t b = 0; b < nb; ++b) {
    for (size_t l = 0; l < kLanes; ++l) {
      while (src < sources.size() && src_row >= sources[src].rows) {
        ++src;
        src_row = 0;
      }
      uint16_t* t = tmp.data() + l * 2 * kp;
      if (src == sources.size()) {  // padding columns past N
        std::memset(t, 0, 2 * kp * sizeof(uint16_t));
      } else {
        const WeightSource& s = sources[src];
        const char* row = static_cast<const char*>(s.data) + src_row * K * dtype_size(s.dtype);
        switch (s.dtype) {
          case DType::BF16:
            std::memcpy(t, row, K * sizeof(uint16_t));
            break;
          case DType::F32:
            f32_row_to_bf16(reinterpret_cast<const float*>(row), t, K);
            break;
          case DType::F16:
            f16_row_to_bf16(reinterpret_cast<const uint16_t*>(row), t, K);
            break;
        }
        if (K & 1) t[K] = 0;
        ++src_row;
      }
      rows[l] = reinterpret_cast<const uint32_t*>(t);
    }
    auto* dst = reinterpret_cast<uint32_t*>(mem + b * pw.stride_);
    for (size_t p = 0; p < kp; ++p)
      for (size_t l = 0; l < kLanes; ++l) dst[p * kLanes + l] = rows[l][p];
    std::memset(dst + kp * kLanes, 0, (pw.stride_ - kp * kPairElems) * sizeof(uint16_t));
  }
  return pw;
}

void gemm_bf16(ThreadPool& pool, const float* x, size_t M, size_t ldx, const PackedWeight& w,
               const float* bias, float* y, size_t ldy, GemmScratch& scratch) {
  if (M == 0 || w.N() == 0) return;
  if (use_amx_path()) return gemm_amx(pool, x, M, ldx, w, bias, y, ldy, scratch);
  const size_t K = w.K();
  const size_t kp = div_up(K, 2);
  const size_t ldxb = 2 * kp;
  // Activations to bf16 once per call (rows padded with a zero to even K).
  if (scratch.x_bf16.size() < M * ldxb) scratch.x_bf16.resize(M * ldxb);
  uint16_t* xb = scratch.x_bf16.data();
  convert_rows(pool, x, M, ldx, K, xb, ldxb);

  const bool avx = use_avx_path();
  Plan pl{};
  pl.xb = xb;
  pl.ldxb = ldxb;
  pl.w = w.data();
  pl.wstride = GemmAccess::stride(w);
  pl.kp = kp;
  pl.nb = div_up(w.N(), kLanes);
  pl.N = w.N();
  pl.y = y;
  pl.ldy = ldy;
  pl.bias = bias;
  pl.M = M;
  const size_t threads = static_cast<size_t>(pool.size());

  if (M <= static_cast<size_t>(kMaxDecodeRows)) {
    // One row tile: weights stream once from memory. 8 rows x 4 blocks would
    // need 32 accumulators, so 7-8 rows use 3-block panels.
    pl.mr = static_cast<int>(M);
    pl.panel_nb = M <= 6 ? 4 : 3;
    pl.kblock = kp;
#ifdef HALO_HAVE_BF16_PATH
    pl.kernels = avx ? &kAvxPfSet : &kGenericSet;
#else
    pl.kernels = &kGenericSet;
#endif
    const size_t panels = div_up(pl.nb, static_cast<size_t>(pl.panel_nb));
    // A few contiguous chunks per thread: dynamic hand-out evens out a busy
    // core without splitting the stream into many short pieces.
    const size_t tasks = std::min(panels, threads == 1 ? 1 : threads * 4);
    pool.parallel_for(tasks, [&](size_t i, int) {
      run_range(pl, 0, M, panels * i / tasks, panels * (i + 1) / tasks);
    });
    return;
  }

  pl.mr = kPrefillMR;
  pl.panel_nb = kPrefillNB;
  pl.kblock = kKBlockPairs;
  pl.prefetch = avx;
#ifdef HALO_HAVE_BF16_PATH
  pl.kernels = avx ? &kAvxSet : &kGenericSet;
#else
  pl.kernels = &kGenericSet;
#endif
  const size_t panels = div_up(pl.nb, static_cast<size_t>(pl.panel_nb));
  // Split rows too when there are too few panels to keep every thread busy.
  const size_t want = threads * 8;
  size_t row_blocks = panels >= want ? 1 : div_up(want, panels);
  size_t rows_per = div_up(div_up(M, row_blocks), static_cast<size_t>(kPrefillMR)) * kPrefillMR;
  rows_per = std::max<size_t>(rows_per, 4 * kPrefillMR);
  row_blocks = div_up(M, rows_per);
  if (row_blocks == 1) {
    // Contiguous panel ranges, so each next panel's weights can be prefetched
    // by the thread that will use them.
    const size_t tasks = std::min(panels, threads == 1 ? 1 : threads * 4);
    pool.parallel_for(tasks, [&](size_t i, int) {
      run_range(pl, 0, M, panels * i / tasks, panels * (i + 1) / tasks);
    });
    return;
  }
  pool.parallel_for(panels * row_blocks, [&](size_t i, int) {
    const size_t q = i / row_blocks, rb = i % row_blocks;
    const size_t m0 = rb * rows_per;
    run_range(pl, m0, std::min(M, m0 + rows_per), q, q + 1);
  });
}

}  // namespace halo::kernels
