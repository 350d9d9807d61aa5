// Paged attention (online softmax, K/V shared by the query heads of a group
// and by the query tokens of a tile) and fused elementwise kernels of the CPU
// fast path. AVX-512 when the SIMD path in use (set_simd_path /
// HALO_KERNELS_SIMD) is "avx512", portable C++ otherwise.
//
// Batch invariance of paged_attention_tile. The context of a sequence is cut
// into chunks that depend only on the cache geometry: every block of
// block_size positions is split into pieces of up to 16 positions starting at
// the block start. A query token with causal limit L visits the chunks that
// start below L in order and, in each, exactly its positions [start, L):
//   scores   s_j = ((a0 + a1) + (a2 + a3)) * scale, a_k accumulating
//            q[d] * k_j[d] over d = k (mod 4) in increasing d, one lane per
//            position (K transposed so lanes are positions)
//   max      m' = max(m, max_j s_j)        (exact, order-free)
//   rescale  alpha = exp(m - m'), l = l * alpha + p (16 lanes), acc *= alpha
//   update   p_j = exp(s_j - m'), acc = fma(p_j, v_j, acc) for j in order
// and finally out = acc * (1 / sum(l)). Positions at or beyond L are never
// read into its state (masked lanes, skipped FMAs), and nothing depends on the
// other queries or heads processed alongside, on the tile or on the register
// blocking; the file is compiled with -ffp-contract=off so the compiler cannot
// fuse differently in the different instantiations.
#include "halo/kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "halo/kernels/kernels.h"
#include "simd.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALO_HAVE_AVX512_PATH 1
// GCC 12's AVX-512 headers build some vectors with the self-initialising
// `__m512 __Y = __Y;` idiom, which trips -Wuninitialized when inlined.
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace halo::kernels {
namespace {

constexpr size_t kChunk = 16;  // positions per softmax step (one vector of scores)
constexpr size_t kTileQ = 16;  // query tokens sharing one pass over K/V

inline uint16_t bf16_rne(float f) {
  const uint32_t x = f32_to_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

bool use_avx512() { return std::strncmp(detail::simd().name, "avx512", 6) == 0; }

// Geometry of one kv head of a layer.
struct Geo {
  size_t hd, bs, token_stride, head_off;
  bool bf16;
  const char* kbase;
  const char* vbase;
  size_t esize;
  Geo(const KvLayer& kv, int32_t kv_head)
      : hd(static_cast<size_t>(kv.head_dim)),
        bs(static_cast<size_t>(kv.block_size)),
        token_stride(static_cast<size_t>(kv.kv_heads) * static_cast<size_t>(kv.head_dim)),
        head_off(static_cast<size_t>(kv_head) * static_cast<size_t>(kv.head_dim)),
        bf16(kv.dtype == DType::BF16),
        kbase(static_cast<const char*>(kv.k)),
        vbase(static_cast<const char*>(kv.v)),
        esize(kv.dtype == DType::BF16 ? 2 : 4) {}
  // Element offset of sequence position pos (block `blk` of the table).
  size_t elem(const int32_t* bt, size_t pos) const {
    const size_t blk = static_cast<size_t>(bt[pos / bs]);
    return (blk * bs + pos % bs) * token_stride + head_off;
  }
  float kval(size_t e) const { return load(kbase, e); }
  float vval(size_t e) const { return load(vbase, e); }
  float load(const char* base, size_t e) const {
    if (bf16) {
      uint16_t h;
      std::memcpy(&h, base + e * 2, 2);
      return bf16_to_f32(h);
    }
    float f;
    std::memcpy(&f, base + e * 4, 4);
    return f;
  }
};

// Scratch layout (floats) for `rows` query heads.
struct Scratch {
  float* kt;   // [pad16(hd)][16] transposed K chunk
  float* vc;   // [16][hd] V chunk converted to fp32 (bf16 caches)
  float* s;    // [rows][16] scores, then probabilities
  float* lv;   // [rows][16] running sums (lanes)
  float* m;    // [rows] running max
  float* acc;  // [rows][hd]
  Scratch(float* base, size_t rows, size_t hd) {
    kt = base;
    vc = kt + pad16(hd) * kChunk;
    s = vc + hd * kChunk;
    lv = s + rows * kChunk;
    m = lv + rows * kChunk;
    acc = m + rows;
  }
  static size_t pad16(size_t n) { return (n + 15) / 16 * 16; }
  static size_t floats(size_t rows, size_t hd) {
    return (pad16(hd) + hd) * kChunk + rows * (2 * kChunk + 1 + hd);
  }
};

// ------------------------------------------------------------ generic C++

float dot4_generic(const float* q, const float* kt, size_t hd, size_t lane) {
  float a[4] = {0.f, 0.f, 0.f, 0.f};
  for (size_t d = 0; d < hd; ++d) a[d & 3] += q[d] * kt[d * kChunk + lane];
  return (a[0] + a[1]) + (a[2] + a[3]);
}

// Same chunking and update order as the AVX-512 path (lane-wise), so each
// query's result is independent of the tile; one row at a time.
void tile_generic(const float* q, size_t q_stride, size_t n_q, size_t group, const Geo& g,
                  const int32_t* bt, int32_t ctx0, float scale, float* out, size_t out_stride,
                  float* scratch) {
  const size_t hd = g.hd;
  for (size_t i0 = 0; i0 < n_q; i0 += kTileQ) {
    const size_t nt = std::min(kTileQ, n_q - i0);
    const size_t rows = nt * group;
    Scratch sc(scratch, rows, hd);
    for (size_t r = 0; r < rows; ++r) {
      sc.m[r] = -INFINITY;
      for (size_t l = 0; l < kChunk; ++l) sc.lv[r * kChunk + l] = 0.f;
      for (size_t d = 0; d < hd; ++d) sc.acc[r * hd + d] = 0.f;
    }
    const size_t lmax = static_cast<size_t>(ctx0) + i0 + nt - 1;
    for (size_t b0 = 0; b0 < lmax; b0 += g.bs) {
      for (size_t c0 = b0; c0 < std::min(b0 + g.bs, lmax); c0 += kChunk) {
        const size_t len = std::min(kChunk, b0 + g.bs - c0);
        const size_t cnt = std::min(len, lmax - c0);
        for (size_t j = 0; j < kChunk; ++j) {
          const size_t e = j < cnt ? g.elem(bt, c0 + j) : 0;
          for (size_t d = 0; d < hd; ++d) sc.kt[d * kChunk + j] = j < cnt ? g.kval(e + d) : 0.f;
        }
        for (size_t r = 0; r < rows; ++r) {
          const size_t i = i0 + r / group;
          const size_t lim = static_cast<size_t>(ctx0) + i;
          if (lim <= c0) continue;
          const size_t n = std::min(len, lim - c0);
          const float* qr = q + i * q_stride + (r % group) * hd;
          float s[kChunk];
          float mc = -INFINITY;
          for (size_t j = 0; j < n; ++j) {
            s[j] = dot4_generic(qr, sc.kt, hd, j) * scale;
            mc = std::max(mc, s[j]);
          }
          const float mn = std::max(sc.m[r], mc);
          const float alpha = std::exp(sc.m[r] - mn);
          sc.m[r] = mn;
          float* lv = sc.lv + r * kChunk;
          for (size_t l = 0; l < kChunk; ++l) {
            const float p = l < n ? std::exp(s[l] - mn) : 0.f;
            s[l] = p;
            lv[l] = lv[l] * alpha + p;
          }
          float* acc = sc.acc + r * hd;
          for (size_t d = 0; d < hd; ++d) acc[d] *= alpha;
          for (size_t j = 0; j < n; ++j) {
            const size_t e = g.elem(bt, c0 + j);
            for (size_t d = 0; d < hd; ++d) acc[d] += s[j] * g.vval(e + d);
          }
        }
      }
    }
    for (size_t r = 0; r < rows; ++r) {
      const float* lv = sc.lv + r * kChunk;
      float lsum = 0.f;
      for (size_t l = 0; l < kChunk; ++l) lsum += lv[l];
      const float inv = lsum > 0.f ? 1.0f / lsum : 0.f;
      float* o = out + (i0 + r / group) * out_stride + (r % group) * hd;
      for (size_t d = 0; d < hd; ++d) o[d] = sc.acc[r * hd + d] * inv;
    }
  }
}

void add_rmsnorm_generic(float* x, const float* delta, const float* w, size_t n, float eps,
                         float* out) {
  float acc[16] = {};
  for (size_t i = 0; i < n; ++i) {
    if (delta != nullptr) x[i] += delta[i];
    acc[i & 15] += x[i] * x[i];
  }
  float ss = 0.f;
  for (float v : acc) ss += v;
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
}

// ------------------------------------------------------------------ AVX-512
#ifdef HALO_HAVE_AVX512_PATH
#define HALO_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma")))
// Register tiles are arrays of vectors indexed by constant-trip loops; GCC
// keeps them in registers only when those loops are unrolled early.
#define HALO_UNROLL _Pragma("GCC unroll 16")

HALO_AVX512 inline __mmask16 lane_mask(size_t n) {
  return n >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
}

// exp(x), about 1 ulp: x = n ln2 + r (Cody-Waite with FMA), |r| <= ln2/2,
// degree-7 Taylor polynomial, then scalef (exact overflow to inf and gradual
// underflow to 0). The clamp maps +-inf to in-range values (exp(-inf) = 0).
HALO_AVX512 inline __m512 exp512(__m512 x) {
  x = _mm512_max_ps(_mm512_min_ps(x, _mm512_set1_ps(150.f)), _mm512_set1_ps(-150.f));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693145751953125f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(1.428606820309417232e-6f), r);
  __m512 p = _mm512_set1_ps(1.f / 5040.f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 720.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 120.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 24.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f / 6.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.f));
  return _mm512_scalef_ps(p, n);
}

template <bool Bf16>
HALO_AVX512 inline __m512 load_row(const char* base, size_t e, __mmask16 m) {
  if constexpr (Bf16) {
    const __m256i h = _mm256_maskz_loadu_epi16(m, base + e * 2);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
  } else {
    return _mm512_maskz_loadu_ps(m, base + e * 4);
  }
}

HALO_AVX512 inline void transpose16(__m512 r[16]) {
  __m512 t[16];
  HALO_UNROLL for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
  }
  HALO_UNROLL for (int i = 0; i < 16; i += 4) {
    const __m512d a = _mm512_castps_pd(t[i]), b = _mm512_castps_pd(t[i + 1]);
    const __m512d c = _mm512_castps_pd(t[i + 2]), d = _mm512_castps_pd(t[i + 3]);
    r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, c));
    r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, c));
    r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(b, d));
    r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(b, d));
  }
  // r[4g + k] holds, for rows 4g..4g+3, column k + 4c in 128-bit lane c.
  HALO_UNROLL for (int g = 0; g < 16; g += 8) {
    HALO_UNROLL for (int k = 0; k < 4; ++k) {
      t[g + k] = _mm512_shuffle_f32x4(r[g + k], r[g + 4 + k], 0x88);
      t[g + 4 + k] = _mm512_shuffle_f32x4(r[g + k], r[g + 4 + k], 0xdd);
    }
  }
  HALO_UNROLL for (int k = 0; k < 8; ++k) {
    r[k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0x88);
    r[8 + k] = _mm512_shuffle_f32x4(t[k], t[8 + k], 0xdd);
  }
}

// kt[d][j] = K[c0 + j][d] for j < cnt, 0 for cnt <= j < 16.
template <bool Bf16>
HALO_AVX512 void load_k_transposed(const Geo& g, const int32_t* bt, size_t c0, size_t cnt,
                                   float* kt) {
  const size_t e0 = g.elem(bt, c0);  // the chunk lies inside one block
  for (size_t d0 = 0; d0 < g.hd; d0 += 16) {
    const size_t w = std::min<size_t>(16, g.hd - d0);
    const __mmask16 m = lane_mask(w);
    __m512 r[16];
    HALO_UNROLL for (size_t j = 0; j < 16; ++j) r[j] =
        j < cnt ? load_row<Bf16>(g.kbase, e0 + j * g.token_stride + d0, m) : _mm512_setzero_ps();
    transpose16(r);
    HALO_UNROLL for (size_t d = 0; d < 16; ++d) _mm512_storeu_ps(kt + (d0 + d) * kChunk, r[d]);
  }
}

HALO_AVX512 void convert_v(const Geo& g, size_t e0, size_t cnt, float* vc) {
  for (size_t j = 0; j < cnt; ++j) {
    const size_t e = e0 + j * g.token_stride;
    for (size_t d0 = 0; d0 < g.hd; d0 += 16) {
      const __mmask16 m = lane_mask(g.hd - d0);
      _mm512_mask_storeu_ps(vc + j * g.hd + d0, m, load_row<true>(g.vbase, e + d0, m));
    }
  }
}

// s[r][lane] = dot(q_r, K[lane]) * scale for R query heads.
template <int R>
HALO_AVX512 void scores_tile(const float* const* qp, const float* kt, size_t hd, float scale,
                             float* s) {
  __m512 a[R][4];
  HALO_UNROLL for (int r = 0; r < R; ++r) HALO_UNROLL for (int k = 0; k < 4; ++k) a[r][k] =
      _mm512_setzero_ps();
  size_t d = 0;
  for (; d + 4 <= hd; d += 4) {
    const __m512 k0 = _mm512_loadu_ps(kt + d * kChunk);
    const __m512 k1 = _mm512_loadu_ps(kt + (d + 1) * kChunk);
    const __m512 k2 = _mm512_loadu_ps(kt + (d + 2) * kChunk);
    const __m512 k3 = _mm512_loadu_ps(kt + (d + 3) * kChunk);
    HALO_UNROLL for (int r = 0; r < R; ++r) {
      a[r][0] = _mm512_fmadd_ps(_mm512_set1_ps(qp[r][d]), k0, a[r][0]);
      a[r][1] = _mm512_fmadd_ps(_mm512_set1_ps(qp[r][d + 1]), k1, a[r][1]);
      a[r][2] = _mm512_fmadd_ps(_mm512_set1_ps(qp[r][d + 2]), k2, a[r][2]);
      a[r][3] = _mm512_fmadd_ps(_mm512_set1_ps(qp[r][d + 3]), k3, a[r][3]);
    }
  }
  const size_t rem = hd - d;
  if (rem > 0) {
    const __m512 k0 = _mm512_loadu_ps(kt + d * kChunk);
    HALO_UNROLL for (int r = 0; r < R; ++r) a[r][0] =
        _mm512_fmadd_ps(_mm512_set1_ps(qp[r][d]), k0, a[r][0]);
  }
  if (rem > 1) {
    const __m512 k1 = _mm512_loadu_ps(kt + (d + 1) * kChunk);
    HALO_UNROLL for (int r = 0; r < R; ++r) a[r][1] =
        _mm512_fmadd_ps(_mm512_set1_ps(qp[r][d + 1]), k1, a[r][1]);
  }
  if (rem > 2) {
    const __m512 k2 = _mm512_loadu_ps(kt + (d + 2) * kChunk);
    HALO_UNROLL for (int r = 0; r < R; ++r) a[r][2] =
        _mm512_fmadd_ps(_mm512_set1_ps(qp[r][d + 2]), k2, a[r][2]);
  }
  const __m512 sv = _mm512_set1_ps(scale);
  HALO_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 t =
        _mm512_add_ps(_mm512_add_ps(a[r][0], a[r][1]), _mm512_add_ps(a[r][2], a[r][3]));
    _mm512_storeu_ps(s + r * kChunk, _mm512_mul_ps(t, sv));
  }
}

// Online-softmax step of one query head over n valid lanes of s (in place:
// scores -> probabilities); returns the factor that rescales its state.
HALO_AVX512 float softmax_step(float* s, size_t n, float* m, float* lv) {
  const __mmask16 msk = lane_mask(n);
  const __m512 sv = _mm512_loadu_ps(s);
  const float mc = _mm512_reduce_max_ps(_mm512_mask_mov_ps(_mm512_set1_ps(-INFINITY), msk, sv));
  const float mo = *m;
  const float mn = mo > mc ? mo : mc;
  *m = mn;
  const __m512 mnv = _mm512_set1_ps(mn);
  // exp512(0) is exactly 1: skipping it when the max is unchanged is bitwise neutral.
  const float alpha =
      mo == mn ? 1.0f : _mm512_cvtss_f32(exp512(_mm512_sub_ps(_mm512_set1_ps(mo), mnv)));
  const __m512 p = _mm512_maskz_mov_ps(msk, exp512(_mm512_sub_ps(sv, mnv)));
  _mm512_storeu_ps(s, p);
  _mm512_storeu_ps(lv, _mm512_add_ps(_mm512_mul_ps(_mm512_loadu_ps(lv), _mm512_set1_ps(alpha)), p));
  return alpha;
}

// acc_r = acc_r * alpha_r + sum_{j0 <= j < j1} p_r[j] * v_j over ND 16-wide
// column chunks (the last one masked by last), for R query heads.
template <int R, int ND>
HALO_AVX512 void pv_tile(float* const* acc, const float* alpha, const float* const* p, size_t j0,
                         size_t j1, const float* v, size_t vstride, __mmask16 last) {
  __m512 c[R][ND];
  HALO_UNROLL for (int r = 0; r < R; ++r) {
    const __m512 al = _mm512_set1_ps(alpha[r]);
    HALO_UNROLL for (int k = 0; k < ND; ++k) c[r][k] =
        _mm512_mul_ps(_mm512_maskz_loadu_ps(k == ND - 1 ? last : 0xffff, acc[r] + 16 * k), al);
  }
  for (size_t j = j0; j < j1; ++j) {
    __m512 vk[ND];
    HALO_UNROLL for (int k = 0; k < ND; ++k) vk[k] =
        _mm512_maskz_loadu_ps(k == ND - 1 ? last : 0xffff, v + j * vstride + 16 * k);
    HALO_UNROLL for (int r = 0; r < R; ++r) {
      const __m512 pb = _mm512_set1_ps(p[r][j]);
      HALO_UNROLL for (int k = 0; k < ND; ++k) c[r][k] = _mm512_fmadd_ps(pb, vk[k], c[r][k]);
    }
  }
  HALO_UNROLL for (int r = 0; r < R; ++r) HALO_UNROLL for (int k = 0; k < ND; ++k)
      _mm512_mask_storeu_ps(acc[r] + 16 * k, k == ND - 1 ? last : 0xffff, c[r][k]);
}

template <int R>
HALO_AVX512 void pv(float* const* acc, const float* alpha, const float* const* p, size_t j0,
                    size_t j1, const float* v, size_t vstride, size_t hd) {
  float* a2[R];
  for (size_t d0 = 0; d0 < hd; d0 += 64) {
    const size_t w = std::min<size_t>(64, hd - d0);
    const size_t nd = (w + 15) / 16;
    const __mmask16 last = lane_mask(w - (nd - 1) * 16);
    HALO_UNROLL for (int r = 0; r < R; ++r) a2[r] = acc[r] + d0;
    const float* vd = v + d0;
    if (nd == 4)
      pv_tile<R, 4>(a2, alpha, p, j0, j1, vd, vstride, last);
    else if (nd == 3)
      pv_tile<R, 3>(a2, alpha, p, j0, j1, vd, vstride, last);
    else if (nd == 2)
      pv_tile<R, 2>(a2, alpha, p, j0, j1, vd, vstride, last);
    else
      pv_tile<R, 1>(a2, alpha, p, j0, j1, vd, vstride, last);
  }
}

// One register tile of R query heads over one chunk: scores, softmax step,
// then the positions all R heads see and each head's remaining ones (the
// same per-head order: rescale, then positions ascending).
struct RowTile {
  const float* qp[6];
  float* acc[6];
  float* s[6];
  float* m[6];
  float* lv[6];
  size_t n[6];
};

template <int R>
HALO_AVX512 void row_tile(const RowTile& t, const float* kt, const float* v, size_t vstride,
                          size_t hd, float scale, float* s_rows) {
  scores_tile<R>(t.qp, kt, hd, scale, s_rows);
  float alpha[R];
  size_t nmin = kChunk;
  HALO_UNROLL for (int k = 0; k < R; ++k) {
    alpha[k] = softmax_step(t.s[k], t.n[k], t.m[k], t.lv[k]);
    nmin = std::min(nmin, t.n[k]);
  }
  const float* const* pp = t.s;
  pv<R>(t.acc, alpha, pp, 0, nmin, v, vstride, hd);
  const float one = 1.0f;
  HALO_UNROLL for (int k = 0; k < R; ++k) if (t.n[k] > nmin)
      pv<1>(t.acc + k, &one, pp + k, nmin, t.n[k], v, vstride, hd);
}

using RowTileFn = void (*)(const RowTile&, const float*, const float*, size_t, size_t, float,
                           float*);
constexpr int kMaxR = 6;  // query heads per register tile
constexpr RowTileFn kRowTile[kMaxR + 1] = {nullptr,     row_tile<1>, row_tile<2>, row_tile<3>,
                                           row_tile<4>, row_tile<5>, row_tile<6>};

// Prefetches the K and V rows of cnt positions from sequence index c0.
HALO_AVX512 void prefetch_chunk(const Geo& g, const int32_t* bt, size_t c0, size_t cnt) {
  const size_t e0 = g.elem(bt, c0);
  const size_t bytes = g.hd * g.esize;
  for (size_t j = 0; j < cnt; ++j) {
    const size_t off = (e0 + j * g.token_stride) * g.esize;
    for (size_t b = 0; b < bytes; b += 64) {
      _mm_prefetch(g.kbase + off + b, _MM_HINT_T0);
      _mm_prefetch(g.vbase + off + b, _MM_HINT_T0);
    }
  }
}

template <bool Bf16>
HALO_AVX512 void tile_avx512(const float* q, size_t q_stride, size_t n_q, size_t group,
                             const Geo& g, const int32_t* bt, int32_t ctx0, float scale, float* out,
                             size_t out_stride, float* scratch) {
  const size_t hd = g.hd;
  const size_t ctx = static_cast<size_t>(ctx0);
  for (size_t i0 = 0; i0 < n_q; i0 += kTileQ) {
    const size_t nt = std::min(kTileQ, n_q - i0);
    const size_t rows = nt * group;
    Scratch sc(scratch, rows, hd);
    for (size_t r = 0; r < rows; ++r) {
      sc.m[r] = -INFINITY;
      _mm512_storeu_ps(sc.lv + r * kChunk, _mm512_setzero_ps());
      for (size_t d = 0; d < hd; d += 16)
        _mm512_mask_storeu_ps(sc.acc + r * hd + d, lane_mask(hd - d), _mm512_setzero_ps());
    }
    const size_t lmax = ctx + i0 + nt - 1;  // limit of the last query of the tile
    for (size_t b0 = 0; b0 < lmax; b0 += g.bs) {
      const size_t bend = std::min(b0 + g.bs, lmax);
      for (size_t c0 = b0; c0 < bend; c0 += kChunk) {
        const size_t len = std::min(kChunk, b0 + g.bs - c0);
        const size_t cnt = std::min(len, lmax - c0);
        const size_t next = c0 + len;
        if (next < lmax)
          prefetch_chunk(g, bt, next, std::min(std::min(kChunk, lmax - next), g.bs - next % g.bs));
        load_k_transposed<Bf16>(g, bt, c0, cnt, sc.kt);
        const size_t e0 = g.elem(bt, c0);
        const float* v;
        size_t vstride;
        if constexpr (Bf16) {
          convert_v(g, e0, cnt, sc.vc);
          v = sc.vc;
          vstride = hd;
        } else {
          v = reinterpret_cast<const float*>(g.vbase) + e0;
          vstride = g.token_stride;
        }
        // Queries i with ctx + i > c0 see this chunk: rows [r0, rows).
        const size_t ifirst = c0 + 1 > ctx + i0 ? c0 + 1 - ctx - i0 : 0;
        const size_t r0 = ifirst * group;
        const size_t active = rows - r0;
        const size_t ntiles = (active + kMaxR - 1) / kMaxR;
        const size_t per = (active + ntiles - 1) / ntiles;
        for (size_t rt = r0; rt < rows; rt += per) {
          const size_t R = std::min(per, rows - rt);
          RowTile t;
          for (size_t k = 0; k < R; ++k) {
            const size_t r = rt + k;
            const size_t i = i0 + r / group;
            t.qp[k] = q + i * q_stride + (r % group) * hd;
            t.acc[k] = sc.acc + r * hd;
            t.s[k] = sc.s + r * kChunk;
            t.m[k] = sc.m + r;
            t.lv[k] = sc.lv + r * kChunk;
            t.n[k] = std::min(len, ctx + i - c0);
          }
          kRowTile[R](t, sc.kt, v, vstride, hd, scale, sc.s + rt * kChunk);
        }
      }
    }
    for (size_t r = 0; r < rows; ++r) {
      const float lsum = _mm512_reduce_add_ps(_mm512_loadu_ps(sc.lv + r * kChunk));
      const __m512 inv = _mm512_set1_ps(lsum > 0.f ? 1.0f / lsum : 0.f);
      float* o = out + (i0 + r / group) * out_stride + (r % group) * hd;
      const float* a = sc.acc + r * hd;
      for (size_t d = 0; d < hd; d += 16) {
        const __mmask16 m = lane_mask(hd - d);
        _mm512_mask_storeu_ps(o + d, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + d), inv));
      }
    }
  }
}

HALO_AVX512 void add_rmsnorm_avx512(float* x, const float* delta, const float* w, size_t n,
                                    float eps, float* out) {
  __m512 a0 = _mm512_setzero_ps(), a1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m512 x0 = _mm512_loadu_ps(x + i), x1 = _mm512_loadu_ps(x + i + 16);
    if (delta != nullptr) {
      x0 = _mm512_add_ps(x0, _mm512_loadu_ps(delta + i));
      x1 = _mm512_add_ps(x1, _mm512_loadu_ps(delta + i + 16));
      _mm512_storeu_ps(x + i, x0);
      _mm512_storeu_ps(x + i + 16, x1);
    }
    a0 = _mm512_fmadd_ps(x0, x0, a0);
    a1 = _mm512_fmadd_ps(x1, x1, a1);
  }
  for (; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    __m512 x0 = _mm512_maskz_loadu_ps(m, x + i);
    if (delta != nullptr) {
      x0 = _mm512_add_ps(x0, _mm512_maskz_loadu_ps(m, delta + i));
      _mm512_mask_storeu_ps(x + i, m, x0);
    }
    a0 = _mm512_fmadd_ps(x0, x0, a0);
  }
  const float ss = _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
  const __m512 r = _mm512_set1_ps(1.0f / std::sqrt(ss / static_cast<float>(n) + eps));
  for (i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    const __m512 y = _mm512_mul_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), r),
                                   _mm512_maskz_loadu_ps(m, w + i));
    _mm512_mask_storeu_ps(out + i, m, y);
  }
}

HALO_AVX512 void silu_mul_avx512(const float* gate, const float* up, float* out, size_t n) {
  const __m512 one = _mm512_set1_ps(1.f);
  for (size_t i = 0; i < n; i += 16) {
    const __mmask16 m = lane_mask(n - i);
    const __m512 g = _mm512_maskz_loadu_ps(m, gate + i);
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), g));
    const __m512 y =
        _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, up + i));
    _mm512_mask_storeu_ps(out + i, m, y);
  }
}

HALO_AVX512 void rope_avx512(float* x, size_t num_heads, size_t head_dim, const float* cs,
                             const float* sn) {
  const size_t half = head_dim / 2;
  for (size_t h = 0; h < num_heads; ++h) {
    float* v = x + h * head_dim;
    for (size_t i = 0; i < half; i += 16) {
      const __mmask16 m = lane_mask(half - i);
      const __m512 a = _mm512_maskz_loadu_ps(m, v + i);
      const __m512 b = _mm512_maskz_loadu_ps(m, v + half + i);
      const __m512 c = _mm512_maskz_loadu_ps(m, cs + i);
      const __m512 s = _mm512_maskz_loadu_ps(m, sn + i);
      _mm512_mask_storeu_ps(v + i, m, _mm512_sub_ps(_mm512_mul_ps(a, c), _mm512_mul_ps(b, s)));
      _mm512_mask_storeu_ps(v + half + i, m,
                            _mm512_add_ps(_mm512_mul_ps(b, c), _mm512_mul_ps(a, s)));
    }
  }
}
#endif  // HALO_HAVE_AVX512_PATH

}  // namespace

size_t attention_scratch_floats(size_t n_q, size_t group, size_t head_dim, size_t /*block_size*/) {
  const size_t rows = std::min(n_q, kTileQ) * group;
  return Scratch::floats(rows, head_dim);
}

void kv_store(const KvLayer& kv, int64_t slot, const float* k, const float* v) {
  const size_t n = static_cast<size_t>(kv.kv_heads) * static_cast<size_t>(kv.head_dim);
  const size_t off = static_cast<size_t>(slot) * n;
  if (kv.dtype == DType::BF16) {
    uint16_t* kd = static_cast<uint16_t*>(kv.k) + off;
    uint16_t* vd = static_cast<uint16_t*>(kv.v) + off;
    for (size_t i = 0; i < n; ++i) kd[i] = bf16_rne(k[i]);
    for (size_t i = 0; i < n; ++i) vd[i] = bf16_rne(v[i]);
  } else {
    std::memcpy(static_cast<float*>(kv.k) + off, k, n * sizeof(float));
    std::memcpy(static_cast<float*>(kv.v) + off, v, n * sizeof(float));
  }
}

void paged_attention_tile(const float* q, size_t q_stride, size_t n_q, size_t group,
                          const KvLayer& kv, int32_t kv_head, const int32_t* block_table,
                          int32_t ctx0, float scale, float* out, size_t out_stride,
                          float* scratch) {
  if (n_q == 0 || group == 0) return;
  const Geo g(kv, kv_head);
#ifdef HALO_HAVE_AVX512_PATH
  if (use_avx512()) {
    if (g.bf16)
      tile_avx512<true>(q, q_stride, n_q, group, g, block_table, ctx0, scale, out, out_stride,
                        scratch);
    else
      tile_avx512<false>(q, q_stride, n_q, group, g, block_table, ctx0, scale, out, out_stride,
                         scratch);
    return;
  }
#endif
  tile_generic(q, q_stride, n_q, group, g, block_table, ctx0, scale, out, out_stride, scratch);
}

void paged_attention_reference(const float* q, size_t q_stride, size_t n_q, size_t group,
                               const KvLayer& kv, int32_t kv_head, const int32_t* block_table,
                               int32_t ctx0, float scale, float* out, size_t out_stride) {
  const Geo g(kv, kv_head);
  const size_t hd = g.hd;
  for (size_t i = 0; i < n_q; ++i) {
    const size_t lim = static_cast<size_t>(ctx0) + i;
    for (size_t h = 0; h < group; ++h) {
      const float* qh = q + i * q_stride + h * hd;
      float* o = out + i * out_stride + h * hd;
      auto score = [&](size_t j) {
        const size_t e = g.elem(block_table, j);
        float s = 0.f;
        for (size_t d = 0; d < hd; ++d) s += qh[d] * g.kval(e + d);
        return s * scale;
      };
      float mx = -INFINITY;
      for (size_t j = 0; j < lim; ++j) mx = std::max(mx, score(j));
      for (size_t d = 0; d < hd; ++d) o[d] = 0.f;
      float sum = 0.f;
      for (size_t j = 0; j < lim; ++j) {
        const float p = std::exp(score(j) - mx);
        sum += p;
        const size_t e = g.elem(block_table, j);
        for (size_t d = 0; d < hd; ++d) o[d] += p * g.vval(e + d);
      }
      const float inv = sum > 0.f ? 1.0f / sum : 0.f;
      for (size_t d = 0; d < hd; ++d) o[d] *= inv;
    }
  }
}

void add_rmsnorm(float* x, const float* delta, const float* w, size_t n, float eps, float* out) {
#ifdef HALO_HAVE_AVX512_PATH
  if (use_avx512()) return add_rmsnorm_avx512(x, delta, w, n, eps, out);
#endif
  add_rmsnorm_generic(x, delta, w, n, eps, out);
}

void silu_mul_fast(const float* gate, const float* up, float* out, size_t n) {
#ifdef HALO_HAVE_AVX512_PATH
  if (use_avx512()) return silu_mul_avx512(gate, up, out, n);
#endif
  silu_mul(gate, up, out, n);  // the portable kernel of ops.cpp
}

void rope_neox_fast(float* x, size_t num_heads, size_t head_dim, const float* cos_half,
                    const float* sin_half) {
#ifdef HALO_HAVE_AVX512_PATH
  if (use_avx512()) return rope_avx512(x, num_heads, head_dim, cos_half, sin_half);
#endif
  rope_neox(x, num_heads, head_dim, cos_half, sin_half);  // the portable kernel of ops.cpp
}

}  // namespace halo::kernels
