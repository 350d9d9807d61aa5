// Quantized matmul (gemm_q.h) over weights packed once at load.
//
// Activations: each row of x becomes int8 blocks of B = 32 elements (16 when
// the group is not a multiple of 32: B must divide the group) with an fp32
// scale and the integer sum of the block (quantize_row_*).
//
// Unsigned operand of vpdpbusd (u8 x s8): the weights. UINT4 values are
// unsigned already; INT8 values are stored as u = q + 128 (q ^ 0x80) and the
// kernel starts the block's integer dot at -128 * sum(xq) (exact in int32).
// Keeping the activations signed keeps their quantization symmetric (the
// documented Q8_0 rounding), and the sum is needed for offsets anyway.
//
// Packed layout. Output columns are cut into tiles of 16 (columns past N are
// zero weights with zero scales). Per tile, two arrays:
//  - values, K * 16 bytes (INT8) or K * 8 bytes (UINT4) per tile, B-block
//    after B-block. A block is B/4 (INT8) or B/8 (UINT4) 64-byte chunks laid
//    out [lane][4 bytes], i.e. exactly one vpdpbusd operand for 16 columns:
//      INT8  chunk j:  byte (l, i) = q[16t + l][bB + 4j + i] + 128
//      UINT4 chunk c:  low nibble of byte (l, i) = q[16t + l][bB + 4c + i],
//                      high nibble = q[16t + l][bB + 4(c + B/8) + i]
//    so 4-bit weights stay 4-bit in memory (an and, and a gf2p8affineqb or
//    shift + and in registers give the two operands) and stream half the
//    bytes of INT8.
//  - meta: per group (not per B-block: per-channel INT8 keeps one scale per
//    column) 16 scales, then 16 offsets when the weight has any, stored as
//    fp16 when every scale and offset of the weight is exactly an fp16 value
//    (fp16 sources, and fp32 ones widened from fp16), else bf16 when exact in
//    bf16, else (see gemm_q.h) fp16 rounded for groups of up to 128 whose
//    values all lie in fp16's normal range, else fp32.
//
// Kernels: MR (<= 4) rows x NB (<= 2; <= 4 for M <= 2, which saves 5-15% of
// the decode CPU time) tiles of zmm accumulators. Per B-block
// the integer dots start at 0, then are scaled into the fp32 accumulators as
// documented in gemm_q.h. Every element's sequence of fp32 operations is the
// same for any MR, NB, row place, thread and task split (K is never split),
// and the portable kernel performs exactly the same operations (std::fma
// where the VNNI kernel fuses), so both paths give the same bits.
#include "halo/kernels/gemm_q.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <utility>

#ifdef __linux__
#include <sys/mman.h>
#endif

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALO_HAVE_VNNI_PATH 1
// See simd.cpp: GCC 12's AVX-512 headers trip -Wuninitialized when inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#define HALO_TARGET_VNNI \
  __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,fma,f16c")))
#endif

namespace halo::kernels {

namespace {

constexpr size_t kLanes = 16;  // columns per tile
constexpr int kMaxMR = 4;      // rows per microkernel
constexpr int kNB = 2;         // tiles per panel (prefill)
constexpr int kMaxNB = 4;      // tiles per panel for M <= kWideRows
constexpr int kWideRows = 2;   // MR x 4 tiles still fits the 32 zmm registers

enum class ScaleKind : uint8_t { F16 = 0, BF16 = 1, F32 = 2 };
constexpr size_t scale_size(ScaleKind s) { return s == ScaleKind::F32 ? 4 : 2; }

inline size_t div_up(size_t a, size_t b) { return (a + b - 1) / b; }

struct AlignedFree {
  void operator()(uint8_t* p) const noexcept { std::free(p); }
};
using AlignedBytes = std::unique_ptr<uint8_t, AlignedFree>;

AlignedBytes aligned_bytes(size_t bytes) {
  // Large weights on 2 MiB boundaries with huge pages asked for (as gemm_bf16).
  const size_t align = bytes >= (size_t{4} << 20) ? (size_t{2} << 20) : 64;
  const size_t total = std::max<size_t>(div_up(bytes, align) * align, align);
  auto* p = static_cast<uint8_t*>(std::aligned_alloc(align, total));
  if (p == nullptr) throw std::bad_alloc();
#ifdef __linux__
  if (align > 64) madvise(p, total, MADV_HUGEPAGE);  // a hint only
#endif
  return AlignedBytes(p);
}

// Everything the kernels need to walk a packed weight.
struct QLayout {
  QType type = QType::INT8;
  size_t K = 0, N = 0, tiles = 0;
  size_t blk = 0;   // B
  size_t nblk = 0;  // K / B
  size_t bpg = 0;   // B-blocks per group
  size_t tile_vbytes = 0, tile_mbytes = 0, group_mbytes = 0;
  ScaleKind sk = ScaleKind::F32;
  bool has_off = false;
  const uint8_t* values = nullptr;
  const uint8_t* meta = nullptr;
};

float load_scale(const uint8_t* p, ScaleKind sk, size_t i) {
  switch (sk) {
    case ScaleKind::F16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return f16_to_f32(h);
    }
    case ScaleKind::BF16: {
      uint16_t h;
      std::memcpy(&h, p + 2 * i, 2);
      return bf16_to_f32(h);
    }
    case ScaleKind::F32:
      break;
  }
  float f;
  std::memcpy(&f, p + 4 * i, 4);
  return f;
}

float load_src_scale(const void* p, DType t, size_t i) {
  const auto* b = static_cast<const uint8_t*>(p);
  switch (t) {
    case DType::F16:
      return load_scale(b, ScaleKind::F16, i);
    case DType::BF16:
      return load_scale(b, ScaleKind::BF16, i);
    case DType::F32:
      break;
  }
  return load_scale(b, ScaleKind::F32, i);
}

bool same_bits(float a, float b) { return f32_to_bits(a) == f32_to_bits(b); }

// ------------------------------------------------------------ activations
// One row of x to int8 blocks of B (see gemm_q.h). The rounding is done by
// the 1.5 * 2^23 trick (round half to even in the default rounding mode,
// exact for |v| <= 127), the same as vcvtps2dq, so every path gets the same q.
void quantize_row_portable(const float* x, size_t K, size_t B, int8_t* q, float* s, int32_t* sum) {
  constexpr float kMagic = 12582912.f;  // 1.5 * 2^23
  for (size_t b = 0; b * B < K; ++b) {
    const float* xb = x + b * B;
    float amax = 0.f;
    for (size_t i = 0; i < B; ++i) amax = std::fmax(amax, std::fabs(xb[i]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    int32_t acc = 0;
    for (size_t i = 0; i < B; ++i) {
      // fmax/fmin first: NaN becomes -127 instead of undefined behaviour.
      const float v = std::fmin(std::fmax(xb[i] * id, -127.f), 127.f);
      const auto r = static_cast<int32_t>((v + kMagic) - kMagic);
      q[b * B + i] = static_cast<int8_t>(r);
      acc += r;
    }
    s[b] = d;
    sum[b] = acc;
  }
}

// ------------------------------------------------------------ microkernels
// MR rows (ldq / ldb apart) x NB tiles from the panel's first tile.
struct QTile {
  const QLayout* L;
  const int8_t* xq;  // row 0's int8 values, rows ldq apart
  const float* xs;   // row 0's block scales, rows ldb apart
  const int32_t* xsum;
  size_t ldq, ldb;
  size_t tile0;  // first tile of the panel
  float* y;      // row 0 at the panel's first column, rows ldy apart
  size_t ldy;
  const float* bias;  // at the panel's first column, or nullptr
  unsigned tail;      // valid columns of the last tile (1..16)
};

using QKernelFn = void (*)(const QTile& t);

// x's 4 bytes at p repeated for the 16 lanes of a 64-byte chunk.
inline void repeat_x4(const int8_t* p, int8_t* out) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  uint32_t rep[kLanes];
  for (size_t l = 0; l < kLanes; ++l) rep[l] = v;
  std::memcpy(out, rep, sizeof rep);
}

// The portable kernel: integer dots exactly (element-wise over the packed
// 64-byte chunks, so the compiler vectorises them; lanes summed at the end of
// the block), then the fp32 steps of the VNNI kernel in the same order.
template <int MR, int NB>
[[gnu::always_inline]] inline void qkernel_portable_body(const QTile& t) {
  const QLayout& L = *t.L;
  const size_t B = L.blk;
  const size_t block_bytes = L.type == QType::INT8 ? kLanes * B : kLanes * B / 2;
  float acc[MR][NB][kLanes] = {};
  for (size_t b = 0, g = 0, left = L.bpg; b < L.nblk; ++b) {
    for (int n = 0; n < NB; ++n) {
      const size_t tile = t.tile0 + static_cast<size_t>(n);
      const uint8_t* meta = L.meta + tile * L.tile_mbytes + g * L.group_mbytes;
      const uint8_t* v = L.values + tile * L.tile_vbytes + b * block_bytes;
      float ws[kLanes], wo[kLanes];
      for (size_t l = 0; l < kLanes; ++l) {
        ws[l] = load_scale(meta, L.sk, l);
        wo[l] = L.has_off ? load_scale(meta, L.sk, kLanes + l) : 0.f;
      }
      for (int r = 0; r < MR; ++r) {
        const int8_t* xq = t.xq + static_cast<size_t>(r) * t.ldq + b * B;
        int32_t a64[64] = {};  // [lane][i] as in the chunks
        int8_t x0[64], x1[64];
        if (L.type == QType::INT8) {
          for (size_t j = 0; j < B / 4; ++j) {
            repeat_x4(xq + 4 * j, x0);
            const uint8_t* c = v + j * 64;
            for (size_t e = 0; e < 64; ++e)
              a64[e] += (static_cast<int32_t>(c[e]) - 128) * static_cast<int32_t>(x0[e]);
          }
        } else {
          const size_t half = B / 8;
          for (size_t j = 0; j < half; ++j) {
            repeat_x4(xq + 4 * j, x0);
            repeat_x4(xq + 4 * (j + half), x1);
            const uint8_t* c = v + j * 64;
            for (size_t e = 0; e < 64; ++e)
              a64[e] += static_cast<int32_t>(c[e] & 15) * static_cast<int32_t>(x0[e]) +
                        static_cast<int32_t>(c[e] >> 4) * static_cast<int32_t>(x1[e]);
          }
        }
        const float xs = t.xs[static_cast<size_t>(r) * t.ldb + b];
        const float sx = xs * static_cast<float>(t.xsum[static_cast<size_t>(r) * t.ldb + b]);
        for (size_t l = 0; l < kLanes; ++l) {
          const int32_t dot = a64[4 * l] + a64[4 * l + 1] + a64[4 * l + 2] + a64[4 * l + 3];
          float& a = acc[r][n][l];
          a = std::fma(ws[l], static_cast<float>(dot) * xs, a);
          if (L.has_off) a = std::fma(wo[l], sx, a);
        }
      }
    }
    if (--left == 0) ++g, left = L.bpg;
  }
  for (int r = 0; r < MR; ++r)
    for (int n = 0; n < NB; ++n) {
      const size_t cols = n == NB - 1 ? t.tail : kLanes;
      float* yp = t.y + static_cast<size_t>(r) * t.ldy + static_cast<size_t>(n) * kLanes;
      for (size_t l = 0; l < cols; ++l)
        yp[l] = t.bias != nullptr ? acc[r][n][l] + t.bias[n * kLanes + l] : acc[r][n][l];
    }
}

template <int MR, int NB>
void qkernel_portable(const QTile& t) {
  qkernel_portable_body<MR, NB>(t);
}

#ifdef HALO_HAVE_VNNI_PATH
// The same C++ built for AVX2 + FMA (most x86-64 CPUs without AVX512-VNNI):
// the integer loops vectorise 32 bytes wide and std::fma is one instruction
// instead of a libm call, with the same results.
#define HALO_HAVE_AVX2_PATH 1
template <int MR, int NB>
__attribute__((target("avx2,fma,f16c"))) void qkernel_portable_avx2(const QTile& t) {
  qkernel_portable_body<MR, NB>(t);
}
#endif

// Tables indexed [MR - 1][NB - 1].
// Only MR <= kWideRows has NB > kNB variants (nullptr elsewhere).
struct QKernelSet {
  QKernelFn k[kMaxMR][kMaxNB];
};

template <template <int, int> class Make, int MR, int NB>
constexpr QKernelFn pick_kernel() {
  if constexpr (NB <= kNB || MR <= kWideRows) {
    return Make<MR, NB>::fn;
  } else {
    return nullptr;
  }
}

template <template <int, int> class Make, int... I>
constexpr QKernelSet make_qset(std::integer_sequence<int, I...>) {
  QKernelSet s{};
  ((s.k[I / kMaxNB][I % kMaxNB] = pick_kernel<Make, I / kMaxNB + 1, I % kMaxNB + 1>()), ...);
  return s;
}

template <int MR, int NB>
struct MakePortable {
  static constexpr QKernelFn fn = qkernel_portable<MR, NB>;
};
constexpr QKernelSet kPortableSet =
    make_qset<MakePortable>(std::make_integer_sequence<int, kMaxMR * kMaxNB>{});
#ifdef HALO_HAVE_AVX2_PATH
template <int MR, int NB>
struct MakePortableAvx2 {
  static constexpr QKernelFn fn = qkernel_portable_avx2<MR, NB>;
};
constexpr QKernelSet kPortableAvx2Set =
    make_qset<MakePortableAvx2>(std::make_integer_sequence<int, kMaxMR * kMaxNB>{});

bool cpu_has_avx2_fma() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  }();
  return has;
}
#endif

#ifdef HALO_HAVE_VNNI_PATH
// The same steps as quantize_row_portable: max|x| (exact), the scalar d and
// id, x * id clamped, vcvtps2dq (round half to even), so the same bits.
HALO_TARGET_VNNI void quantize_row_avx512(const float* x, size_t K, size_t B, int8_t* q, float* s,
                                          int32_t* sum) {
  const __m512 lo = _mm512_set1_ps(-127.f), hi = _mm512_set1_ps(127.f);
  for (size_t b = 0; b * B < K; ++b) {
    const float* xb = x + b * B;
    __m512 amax = _mm512_setzero_ps();
    for (size_t i = 0; i < B; i += 16)
      amax = _mm512_max_ps(amax, _mm512_abs_ps(_mm512_loadu_ps(xb + i)));
    const float d = _mm512_reduce_max_ps(amax) / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    const __m512 idv = _mm512_set1_ps(id);
    __m512i acc = _mm512_setzero_si512();
    for (size_t i = 0; i < B; i += 16) {
      const __m512 v =
          _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(_mm512_loadu_ps(xb + i), idv), lo), hi);
      const __m512i r = _mm512_cvtps_epi32(v);
      acc = _mm512_add_epi32(acc, r);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + b * B + i), _mm512_cvtepi32_epi8(r));
    }
    s[b] = d;
    sum[b] = _mm512_reduce_add_epi32(acc);
  }
}

// 16 scales (or offsets) of one group as fp32.
template <ScaleKind SK>
HALO_TARGET_VNNI inline __m512 load_scales16(const uint8_t* p) {
  if constexpr (SK == ScaleKind::F32) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (SK == ScaleKind::F16) return _mm512_cvtph_ps(h);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  }
}

inline int32_t load_x4(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Software prefetch distance in bytes for the M=1 kernels (0 = off): on Zen4
// 1 and 4 KiB ahead halved the DRAM-bound rate, the hardware prefetchers do
// better alone.
#ifndef HALO_GEMMQ_PREFETCH
#define HALO_GEMMQ_PREFETCH 0
#endif
constexpr size_t kPrefetchBytes = HALO_GEMMQ_PREFETCH;

// MR rows x NB tiles. Per B-block: B/4 vpdpbusd per (row, tile) into int32
// accumulators that start at 0, then the documented fp32 steps.
// High nibbles of every byte, zero-extended: one gf2p8affineqb (bit i of the
// result = bit i + 4 of the byte) where the CPU has GFNI, else shift + and.
// Inline asm, so the kernels need no gfni target (a function with a wider
// target would not inline into them) and the Gfni = false ones contain none.
template <bool Gfni>
HALO_TARGET_VNNI inline __m512i high_nibbles(__m512i v, __m512i low4, __m512i gf_matrix) {
  if constexpr (Gfni) {
    __m512i r;
    __asm__("vgf2p8affineqb $0, %2, %1, %0" : "=v"(r) : "v"(v), "v"(gf_matrix));
    return r;
  } else {
    (void)gf_matrix;
    return _mm512_and_si512(_mm512_srli_epi16(v, 4), low4);
  }
}

// long: one register-blocked kernel (MR rows x NB tiles of accumulators live
// across the K walk); split into calls, the accumulators would spill.
template <QType QT, ScaleKind SK, size_t B, bool Gfni, int MR, int NB>
HALO_TARGET_VNNI void qkernel_vnni(const QTile& t) {
  const QLayout& L = *t.L;
  constexpr size_t block_bytes = QT == QType::INT8 ? kLanes * B : kLanes * B / 2;
  const size_t tvb = L.tile_vbytes;
  const uint8_t* wv = L.values + t.tile0 * tvb;
  const uint8_t* wm = L.meta + t.tile0 * L.tile_mbytes;
  const bool has_off = L.has_off;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i gf_matrix = _mm512_set1_epi64(0x1020408000000000ll);
  __m512 acc[MR][NB];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < NB; ++n) acc[r][n] = _mm512_setzero_ps();
  const int8_t* xr[MR];
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r) xr[r] = t.xq + static_cast<size_t>(r) * t.ldq;

  // g: the block's group, counted instead of divided (a div per block shows).
  for (size_t b = 0, g = 0, left = L.bpg; b < L.nblk; ++b) {
    // Stored INT8 weights are q + 128: the dots start at -128 * sum(xq) of
    // the row's block (exact), so no correction is left for the epilogue.
    __m512i ia[MR][NB];
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const __m512i start =
          QT == QType::INT8 ? _mm512_set1_epi32(-128 * t.xsum[static_cast<size_t>(r) * t.ldb + b])
                            : _mm512_setzero_si512();
#pragma GCC unroll 4
      for (int n = 0; n < NB; ++n) ia[r][n] = start;
    }
    const uint8_t* vb = wv + b * block_bytes;
    const size_t xoff = b * B;
    if constexpr (MR == 1 && kPrefetchBytes > 0) {
#pragma GCC unroll 4
      for (int n = 0; n < NB; ++n)
        for (size_t o = 0; o < block_bytes; o += 64)
          _mm_prefetch(reinterpret_cast<const char*>(vb + n * tvb + kPrefetchBytes + o),
                       _MM_HINT_T0);
    }
    if constexpr (QT == QType::INT8) {
#pragma GCC unroll 8
      for (size_t j = 0; j < B / 4; ++j) {
        __m512i w[NB];
#pragma GCC unroll 4
        for (int n = 0; n < NB; ++n) w[n] = _mm512_load_si512(vb + n * tvb + j * 64);
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
          const __m512i xv = _mm512_set1_epi32(load_x4(xr[r] + xoff + 4 * j));
#pragma GCC unroll 4
          for (int n = 0; n < NB; ++n) ia[r][n] = _mm512_dpbusd_epi32(ia[r][n], w[n], xv);
        }
      }
    } else {
      constexpr size_t half = B / 8;
#pragma GCC unroll 4
      for (size_t c = 0; c < half; ++c) {
        __m512i wl[NB], wh[NB];
#pragma GCC unroll 4
        for (int n = 0; n < NB; ++n) {
          const __m512i v = _mm512_load_si512(vb + n * tvb + c * 64);
          wl[n] = _mm512_and_si512(v, low4);
          wh[n] = high_nibbles<Gfni>(v, low4, gf_matrix);
        }
#pragma GCC unroll 4
        for (int r = 0; r < MR; ++r) {
          const __m512i xl = _mm512_set1_epi32(load_x4(xr[r] + xoff + 4 * c));
          const __m512i xh = _mm512_set1_epi32(load_x4(xr[r] + xoff + 4 * (c + half)));
#pragma GCC unroll 4
          for (int n = 0; n < NB; ++n) {
            ia[r][n] = _mm512_dpbusd_epi32(ia[r][n], wl[n], xl);
            ia[r][n] = _mm512_dpbusd_epi32(ia[r][n], wh[n], xh);
          }
        }
      }
    }
    const uint8_t* gm = wm + g * L.group_mbytes;
    if (--left == 0) ++g, left = L.bpg;
    __m512 ws[NB], wo[NB];
#pragma GCC unroll 4
    for (int n = 0; n < NB; ++n) {
      ws[n] = load_scales16<SK>(gm + n * L.tile_mbytes);
      wo[n] = has_off ? load_scales16<SK>(gm + n * L.tile_mbytes + kLanes * scale_size(SK))
                      : _mm512_setzero_ps();
    }
#pragma GCC unroll 4
    for (int r = 0; r < MR; ++r) {
      const float xs = t.xs[static_cast<size_t>(r) * t.ldb + b];
      const int32_t xsum = t.xsum[static_cast<size_t>(r) * t.ldb + b];
      const __m512 xsv = _mm512_set1_ps(xs);
      const __m512 sxv = _mm512_set1_ps(xs * static_cast<float>(xsum));
#pragma GCC unroll 4
      for (int n = 0; n < NB; ++n) {
        const __m512i d = ia[r][n];
        acc[r][n] = _mm512_fmadd_ps(ws[n], _mm512_mul_ps(_mm512_cvtepi32_ps(d), xsv), acc[r][n]);
        if (has_off) acc[r][n] = _mm512_fmadd_ps(wo[n], sxv, acc[r][n]);
      }
    }
  }
  const __mmask16 tail_mask = static_cast<__mmask16>((1u << t.tail) - 1u);
#pragma GCC unroll 4
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 4
    for (int n = 0; n < NB; ++n) {
      float* yp = t.y + static_cast<size_t>(r) * t.ldy + static_cast<size_t>(n) * kLanes;
      const __mmask16 m = n == NB - 1 ? tail_mask : static_cast<__mmask16>(0xffff);
      __m512 v = acc[r][n];
      if (t.bias != nullptr) v = _mm512_add_ps(v, _mm512_maskz_loadu_ps(m, t.bias + n * kLanes));
      _mm512_mask_storeu_ps(yp, m, v);
    }
}

template <QType QT, ScaleKind SK, size_t B, bool Gfni>
struct MakeVnni {
  template <int MR, int NB>
  struct K {
    static constexpr QKernelFn fn = qkernel_vnni<QT, SK, B, Gfni, MR, NB>;
  };
};

// B is a template argument so the block's loop unrolls into straight code.
template <QType QT, ScaleKind SK, size_t B, bool Gfni>
constexpr QKernelSet kVnniSet = make_qset<MakeVnni<QT, SK, B, Gfni>::template K>(
    std::make_integer_sequence<int, kMaxMR * kMaxNB>{});

template <QType QT, size_t B, bool Gfni>
constexpr const QKernelSet* kVnniBySk[3] = {&kVnniSet<QT, ScaleKind::F16, B, Gfni>,
                                            &kVnniSet<QT, ScaleKind::BF16, B, Gfni>,
                                            &kVnniSet<QT, ScaleKind::F32, B, Gfni>};

// Indexed [kind][B == 32][ScaleKind]; kind: INT8, UINT4, UINT4 with GFNI.
constexpr const QKernelSet* const* kVnniSets[3][2] = {
    {kVnniBySk<QType::INT8, 16, false>, kVnniBySk<QType::INT8, 32, false>},
    {kVnniBySk<QType::UINT4, 16, false>, kVnniBySk<QType::UINT4, 32, false>},
    {kVnniBySk<QType::UINT4, 16, true>, kVnniBySk<QType::UINT4, 32, true>}};

bool cpu_has_gfni() {
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("gfni");
  }();
  return has;
}
#endif

// ------------------------------------------------------------ path selection
// The path in use: portable (the C++ kernels, built for AVX2 + FMA when the
// CPU has them), vnni, and for tests: vnni without GFNI (CPUs such as Cascade
// Lake have VNNI but no GFNI), the C++ kernels built for baseline x86-64.
enum class QPath : int { Portable = 0, Vnni = 1, VnniNoGfni = 2, PortableBaseline = 3 };

std::atomic<QPath>& selected_path() {
  static std::atomic<QPath> sel{[] {
    if (!cpu_has_avx512_vnni()) return QPath::Portable;
    const char* e = std::getenv("HALO_CPU_GEMM_Q");
    if (e != nullptr && std::strcmp(e, "portable") == 0) return QPath::Portable;
    const char* s = std::getenv("HALO_KERNELS_SIMD");
    if (s != nullptr && std::strcmp(s, "generic") == 0) return QPath::Portable;
    return QPath::Vnni;
  }()};
  return sel;
}

const QKernelSet& kernel_set(const QLayout& L, QPath path) {
#ifdef HALO_HAVE_AVX2_PATH
  if (path == QPath::Portable && cpu_has_avx2_fma()) return kPortableAvx2Set;
#endif
#ifdef HALO_HAVE_VNNI_PATH
  if (path == QPath::Vnni || path == QPath::VnniNoGfni) {
    const bool gfni = path == QPath::Vnni && cpu_has_gfni();
    return *kVnniSets[L.type == QType::INT8 ? 0
                      : gfni                ? 2
                                            : 1][L.blk == 32 ? 1 : 0][static_cast<int>(L.sk)];
  }
#else
  (void)L;
  (void)path;
#endif
  return kPortableSet;
}

// ------------------------------------------------------------ driver
struct QPlan {
  const QLayout* L;
  const QKernelSet* kernels;
  const int8_t* xq;
  const float* xs;
  const int32_t* xsum;
  size_t ldq, ldb;
  float* y;
  size_t ldy;
  const float* bias;
  size_t panels;
  size_t panel_nb;  // tiles per panel
};

// Rows [m0, m1) x panels [p0, p1): each panel's weights (NB tiles x K) stay
// in L2 while every row tile passes over them.
void run_q(const QPlan& pl, size_t m0, size_t m1, size_t p0, size_t p1) {
  const QLayout& L = *pl.L;
  const size_t rows = m1 - m0;
  const size_t ntiles = div_up(rows, static_cast<size_t>(kMaxMR));
  for (size_t p = p0; p < p1; ++p) {
    const size_t tile0 = p * pl.panel_nb;
    const size_t nb = std::min<size_t>(pl.panel_nb, L.tiles - tile0);
    const size_t col0 = tile0 * kLanes;
    QTile t{};
    t.L = &L;
    t.ldq = pl.ldq;
    t.ldb = pl.ldb;
    t.tile0 = tile0;
    t.ldy = pl.ldy;
    t.bias = pl.bias != nullptr ? pl.bias + col0 : nullptr;
    t.tail = static_cast<unsigned>(std::min(nb * kLanes, L.N - col0) - (nb - 1) * kLanes);
    // Row tiles of near-equal height (e.g. 17 rows as 4,4,3,3,3).
    size_t m = m0;
    for (size_t i = 0; i < ntiles; ++i) {
      const size_t h = rows / ntiles + (i < rows % ntiles ? 1 : 0);
      t.xq = pl.xq + m * pl.ldq;
      t.xs = pl.xs + m * pl.ldb;
      t.xsum = pl.xsum + m * pl.ldb;
      t.y = pl.y + m * pl.ldy + col0;
      pl.kernels->k[h - 1][nb - 1](t);
      m += h;
    }
  }
}

}  // namespace

struct PackedQWeight::Impl {
  QLayout layout;
  AlignedBytes values, meta;
  size_t values_bytes = 0, meta_bytes = 0;
};

struct GemmQAccess {
  static const QLayout& layout(const PackedQWeight& w) { return w.impl_->layout; }
};

bool cpu_has_avx512_vnni() {
#ifdef HALO_HAVE_VNNI_PATH
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
           __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("fma") && cpu_has_f16c();
  }();
  return has;
#else
  return false;
#endif
}

const char* gemm_q_path() {
  switch (selected_path().load()) {
    case QPath::Vnni:
      return "vnni";
    case QPath::VnniNoGfni:
      return "vnni-nogfni";
    case QPath::PortableBaseline:
      return "portable-baseline";
    case QPath::Portable:
      break;
  }
  return "portable";
}

bool set_gemm_q_path(const char* name) {
  if (name == nullptr) return false;
  if (std::strcmp(name, "portable") == 0) {
    selected_path().store(QPath::Portable);
    return true;
  }
  if (std::strcmp(name, "portable-baseline") == 0) {
    selected_path().store(QPath::PortableBaseline);
    return true;
  }
  if (!cpu_has_avx512_vnni()) return false;
  if (std::strcmp(name, "vnni") == 0) {
    selected_path().store(QPath::Vnni);
    return true;
  }
  if (std::strcmp(name, "vnni-nogfni") == 0) {
    selected_path().store(QPath::VnniNoGfni);
    return true;
  }
  return false;
}

size_t PackedQWeight::bytes() const {
  return impl_ == nullptr ? 0 : impl_->values_bytes + impl_->meta_bytes;
}

namespace {

[[noreturn]] void pack_fail(const std::string& m) { throw std::invalid_argument("PackedQWeight::pack: " + m); }

// The sources' common type and group, checked; N and whether any has offsets.
void check_pack_sources(const std::vector<QuantSource>& sources, size_t K, size_t& N, bool& has_off) {
  if (K == 0) pack_fail("K must be > 0");
  if (sources.empty()) pack_fail("no sources");
  const QType type = sources[0].type;
  const size_t group = sources[0].group;
  if (type != QType::INT8 && type != QType::UINT4) pack_fail("unknown quantized type");
  if (group == 0 || group % 16 != 0)
    pack_fail("group " + std::to_string(group) + " is not a positive multiple of 16");
  if (K % group != 0)
    pack_fail("group " + std::to_string(group) + " does not divide K = " + std::to_string(K));
  N = 0;
  has_off = false;
  for (const QuantSource& s : sources) {
    if (s.type != type) pack_fail("sources of different quantized types");
    if (s.group != group) pack_fail("sources with different groups");
    if (s.rows > 0 && (s.values == nullptr || s.scales == nullptr)) pack_fail("null values or scales");
    has_off = has_off || (s.offsets != nullptr && s.rows > 0);
    N += s.rows;
  }
  if (N == 0) pack_fail("no rows");
}

// fp16 keeps v to within 2^-11 of its magnitude: 0 or a normal fp16 value.
bool f16_normal_range(float v) {
  const float a = std::fabs(v);
  return a == 0.f || (a >= 0x1p-14f && a <= 65504.f);
}

// The storage of the scales and offsets (see the layout above): the narrowest
// that holds every one exactly, else, for groups of at most kRoundGroup (where
// fp32 metadata adds 0.5 bit per weight or more, as Q4_K's and Q6_K's d * sc),
// fp16 rounded to nearest when every value is in its normal range.
constexpr size_t kRoundGroup = 128;
ScaleKind pick_scale_kind(const std::vector<QuantSource>& sources, size_t group, size_t groups) {
  bool f16_ok = true, bf16_ok = true, f16_near = group <= kRoundGroup;
  for (const QuantSource& s : sources) {
    for (const void* arr : {s.scales, s.offsets}) {
      if (arr == nullptr) continue;
      for (size_t i = 0; i < s.rows * groups && (f16_ok || bf16_ok || f16_near); ++i) {
        const float v = load_src_scale(arr, s.scale_dtype, i);
        f16_ok = f16_ok && same_bits(f16_to_f32(f32_to_f16(v)), v);
        bf16_ok = bf16_ok && same_bits(bf16_to_f32(f32_to_bf16(v)), v);
        f16_near = f16_near && f16_normal_range(v);
      }
    }
  }
  if (f16_ok) return ScaleKind::F16;
  if (bf16_ok) return ScaleKind::BF16;
  return f16_near ? ScaleKind::F16 : ScaleKind::F32;
}

void store_scale(ScaleKind sk, uint8_t* p, size_t i, float v) {
  switch (sk) {
    case ScaleKind::F16: {
      const uint16_t h = f32_to_f16(v);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case ScaleKind::BF16: {
      const uint16_t h = f32_to_bf16(v);
      std::memcpy(p + 2 * i, &h, 2);
      break;
    }
    case ScaleKind::F32:
      std::memcpy(p + 4 * i, &v, 4);
      break;
  }
}

// Row r of source s into lane l of its tile: values in the kernel's chunk
// order (INT8 stored as q + 128; UINT4 quads c and c + B/8 share a byte).
void pack_row_values(const QLayout& L, const QuantSource& s, size_t r, uint8_t* tv, size_t l) {
  const size_t B = L.blk, K = L.K;
  if (L.type == QType::INT8) {
    const auto* q = static_cast<const int8_t*>(s.values) + r * K;
    for (size_t b = 0; b < L.nblk; ++b)
      for (size_t j = 0; j < B / 4; ++j)
        for (size_t i = 0; i < 4; ++i)
          tv[b * kLanes * B + j * 64 + l * 4 + i] =
              static_cast<uint8_t>(static_cast<uint8_t>(q[b * B + 4 * j + i]) ^ 0x80u);
    return;
  }
  const auto* q = static_cast<const uint8_t*>(s.values) + r * K / 2;
  auto elem = [&](size_t k) { return static_cast<uint8_t>((q[k / 2] >> (4 * (k & 1))) & 15); };
  const size_t half = B / 8;
  for (size_t b = 0; b < L.nblk; ++b)
    for (size_t c = 0; c < half; ++c)
      for (size_t i = 0; i < 4; ++i)
        tv[b * kLanes * B / 2 + c * 64 + l * 4 + i] =
            static_cast<uint8_t>(elem(b * B + 4 * c + i) | (elem(b * B + 4 * (c + half) + i) << 4));
}

// Row r's scales (and offsets, 0 where the source has none) into lane l.
void pack_row_meta(const QLayout& L, const QuantSource& s, size_t r, uint8_t* tm, size_t l, size_t groups) {
  for (size_t g = 0; g < groups; ++g) {
    store_scale(L.sk, tm + g * L.group_mbytes, l, load_src_scale(s.scales, s.scale_dtype, r * groups + g));
    if (L.has_off)
      store_scale(L.sk, tm + g * L.group_mbytes, kLanes + l,
                  s.offsets != nullptr ? load_src_scale(s.offsets, s.scale_dtype, r * groups + g) : 0.f);
  }
}

}  // namespace

PackedQWeight PackedQWeight::pack(const std::vector<QuantSource>& sources, size_t K) {
  size_t N = 0;
  bool has_off = false;
  check_pack_sources(sources, K, N, has_off);
  const QType type = sources[0].type;
  const size_t group = sources[0].group, groups = K / group;
  auto impl = std::make_shared<Impl>();
  QLayout& L = impl->layout;
  L.type = type;
  L.K = K;
  L.N = N;
  L.tiles = div_up(N, kLanes);
  L.blk = group % 32 == 0 ? 32 : 16;  // divides the group (e.g. per-channel K = 1040)
  L.nblk = K / L.blk;
  L.bpg = group / L.blk;
  L.sk = pick_scale_kind(sources, group, groups);
  L.has_off = has_off;
  L.tile_vbytes = type == QType::INT8 ? K * kLanes : K * kLanes / 2;
  L.group_mbytes = kLanes * scale_size(L.sk) * (has_off ? 2 : 1);
  L.tile_mbytes = groups * L.group_mbytes;
  impl->values_bytes = L.tiles * L.tile_vbytes;
  impl->meta_bytes = L.tiles * L.tile_mbytes;
  impl->values = aligned_bytes(impl->values_bytes);
  impl->meta = aligned_bytes(impl->meta_bytes);
  uint8_t* vals = impl->values.get();
  uint8_t* meta = impl->meta.get();
  // Padding columns: q = 0 (stored 128 for INT8) with zero scales and offsets.
  std::memset(vals, type == QType::INT8 ? 0x80 : 0, impl->values_bytes);
  std::memset(meta, 0, impl->meta_bytes);
  size_t col = 0;
  for (const QuantSource& s : sources) {
    for (size_t r = 0; r < s.rows; ++r, ++col) {
      const size_t tile = col / kLanes, l = col % kLanes;
      pack_row_values(L, s, r, vals + tile * L.tile_vbytes, l);
      pack_row_meta(L, s, r, meta + tile * L.tile_mbytes, l, groups);
    }
  }
  L.values = vals;
  L.meta = meta;

  PackedQWeight pw;
  pw.n_ = N;
  pw.k_ = K;
  pw.group_ = group;
  pw.type_ = type;
  pw.impl_ = std::move(impl);
  return pw;
}

void gemm_q(ThreadPool& pool, const float* x, size_t M, size_t ldx, const PackedQWeight& w,
            const float* bias, float* y, size_t ldy, GemmQScratch& scratch) {
  if (M == 0 || w.N() == 0) return;
  const QLayout& L = GemmQAccess::layout(w);
  const size_t K = L.K, B = L.blk, nblk = L.nblk;
  if (scratch.xq.size() < M * K) scratch.xq.resize(M * K);
  if (scratch.xs.size() < M * nblk) scratch.xs.resize(M * nblk);
  if (scratch.xsum.size() < M * nblk) scratch.xsum.resize(M * nblk);
  int8_t* xq = scratch.xq.data();
  float* xs = scratch.xs.data();
  int32_t* xsum = scratch.xsum.data();
  const size_t threads = static_cast<size_t>(pool.size());
  const QPath path = selected_path().load(std::memory_order_relaxed);
  const bool vnni = path == QPath::Vnni || path == QPath::VnniNoGfni;
  auto quantize = [&](size_t m) {
#ifdef HALO_HAVE_VNNI_PATH
    if (vnni)
      return quantize_row_avx512(x + m * ldx, K, B, xq + m * K, xs + m * nblk, xsum + m * nblk);
#endif
    quantize_row_portable(x + m * ldx, K, B, xq + m * K, xs + m * nblk, xsum + m * nblk);
  };
  if (M == 1 || threads == 1) {
    for (size_t m = 0; m < M; ++m) quantize(m);
  } else {
    const size_t tasks = std::min(M, threads * 4);
    pool.parallel_for(tasks, [&](size_t i, int) {
      for (size_t m = M * i / tasks; m < M * (i + 1) / tasks; ++m) quantize(m);
    });
  }

  QPlan pl{};
  pl.L = &L;
  pl.kernels = &kernel_set(L, path);
  pl.xq = xq;
  pl.xs = xs;
  pl.xsum = xsum;
  pl.ldq = K;
  pl.ldb = nblk;
  pl.y = y;
  pl.ldy = ldy;
  pl.bias = bias;
  // M <= 2: 4 tiles per panel (one x broadcast and one row's scalar work
  // serve 64 columns); else 2, leaving registers for 4 rows.
  pl.panel_nb = M <= static_cast<size_t>(kWideRows) ? kMaxNB : kNB;
  pl.panels = div_up(L.tiles, pl.panel_nb);
  const size_t panels = pl.panels;

  if (M <= static_cast<size_t>(kMaxMR)) {
    // Decode: one row tile, every weight byte read once; a few contiguous
    // panel ranges per thread.
    const size_t tasks = std::min(panels, threads == 1 ? 1 : threads * 4);
    pool.parallel_for(tasks, [&](size_t i, int) {
      run_q(pl, 0, M, panels * i / tasks, panels * (i + 1) / tasks);
    });
    return;
  }
  // Prefill: split rows too when there are too few panels for the threads.
  const size_t want = threads * 8;
  size_t row_blocks = panels >= want ? 1 : div_up(want, panels);
  size_t rows_per = div_up(div_up(M, row_blocks), static_cast<size_t>(kMaxMR)) * kMaxMR;
  rows_per = std::max<size_t>(rows_per, 8 * kMaxMR);
  row_blocks = div_up(M, rows_per);
  if (row_blocks == 1) {
    const size_t tasks = std::min(panels, threads == 1 ? 1 : threads * 4);
    pool.parallel_for(tasks, [&](size_t i, int) {
      run_q(pl, 0, M, panels * i / tasks, panels * (i + 1) / tasks);
    });
    return;
  }
  pool.parallel_for(panels * row_blocks, [&](size_t i, int) {
    const size_t p = i / row_blocks, rb = i % row_blocks;
    const size_t m0 = rb * rows_per;
    run_q(pl, m0, std::min(M, m0 + rows_per), p, p + 1);
  });
}

void dequantize(const QuantSource& src, size_t K, float* dst) {
  if (src.group == 0 || K % src.group != 0)
    throw std::invalid_argument("dequantize: group must divide K");
  const size_t groups = K / src.group;
  for (size_t r = 0; r < src.rows; ++r) {
    for (size_t k = 0; k < K; ++k) {
      const size_t gi = r * groups + k / src.group;
      int32_t q;
      if (src.type == QType::INT8) {
        q = static_cast<const int8_t*>(src.values)[r * K + k];
      } else {
        const uint8_t byte = static_cast<const uint8_t*>(src.values)[r * (K / 2) + k / 2];
        q = (byte >> (4 * (k & 1))) & 15;
      }
      const float s = load_src_scale(src.scales, src.scale_dtype, gi);
      const float o =
          src.offsets != nullptr ? load_src_scale(src.offsets, src.scale_dtype, gi) : 0.f;
      // Two roundings, as the formula reads (the file has no contraction).
      const float sq = s * static_cast<float>(q);
      dst[r * K + k] = sq + o;
    }
  }
}

}  // namespace halo::kernels
