#include "simd.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "halo/kernels/dtype.h"
#include "halo/kernels/kernels.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HALO_HAVE_AVX512_PATH 1
// GCC 12's AVX-512 headers build some vectors with the self-initialising
// `__m512 __Y = __Y;` idiom (_mm512_undefined_ps), which trips
// -Wuninitialized when inlined; the values are never read.
#pragma GCC diagnostic ignored "-Wuninitialized"
#ifndef __clang__  // a GCC-only warning
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#endif

namespace halo::kernels::detail {
namespace {

// ------------------------------------------------------------ generic C++
// 16 lanes in two interleaved accumulator sets, mirroring the AVX-512 path.

template <int Kind>
inline float load_scalar(const void* p, size_t i) {
  if constexpr (Kind == 0) return static_cast<const float*>(p)[i];
  if constexpr (Kind == 1) return bf16_to_f32(static_cast<const uint16_t*>(p)[i]);
  if constexpr (Kind == 2) return f16_to_f32(static_cast<const uint16_t*>(p)[i]);
}

template <int Kind>
float row_generic(const float* x, const void* w, size_t K) {
  float a0[16] = {};
  float a1[16] = {};
  size_t k = 0;
  for (; k + 32 <= K; k += 32) {
    for (int l = 0; l < 16; ++l) a0[l] += x[k + l] * load_scalar<Kind>(w, k + l);
    for (int l = 0; l < 16; ++l) a1[l] += x[k + 16 + l] * load_scalar<Kind>(w, k + 16 + l);
  }
  for (; k + 16 <= K; k += 16)
    for (int l = 0; l < 16; ++l) a0[l] += x[k + l] * load_scalar<Kind>(w, k + l);
  for (size_t l = 0; k + l < K; ++l) a1[l] += x[k + l] * load_scalar<Kind>(w, k + l);
  float s = 0.f;
  for (int l = 0; l < 16; ++l) s += a0[l] + a1[l];
  return s;
}

template <int Kind>
void rows_generic(const float* x, const void* w, size_t K, int nrows, float* out) {
  const size_t esize = Kind == 0 ? 4 : 2;
  for (int r = 0; r < nrows; ++r)
    out[r] = row_generic<Kind>(x, static_cast<const char*>(w) + static_cast<size_t>(r) * K * esize, K);
}

float dot_generic(const float* a, const float* b, size_t n) {
  float acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[l] += a[i + l] * b[i + l];
  for (size_t l = 0; i + l < n; ++l) acc[l] += a[i + l] * b[i + l];
  float s = 0.f;
  for (float v : acc) s += v;
  return s;
}

void axpy_generic(float* y, float a, const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void bf16_generic(const uint16_t* s, float* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = bf16_to_f32(s[i]);
}
void f16_generic(const uint16_t* s, float* d, size_t n) {
  for (size_t i = 0; i < n; ++i) d[i] = f16_to_f32(s[i]);
}

// A 4-row tile is four independent row computations (same arithmetic).
template <int Kind>
void tile_generic(const float* x, size_t ldx, const void* w, size_t K, int nrows, float* out, size_t ldo) {
  for (int i = 0; i < 4; ++i) rows_generic<Kind>(x + i * ldx, w, K, nrows, out + i * ldo);
}

constexpr SimdTable kGeneric{"generic",       rows_generic<0>, rows_generic<1>, rows_generic<2>,
                             tile_generic<0>, tile_generic<1>, tile_generic<2>, dot_generic,
                             axpy_generic,    bf16_generic,    f16_generic};

// ------------------------------------------------------------------ AVX-512
#ifdef HALO_HAVE_AVX512_PATH
#define HALO_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,fma,f16c")))

template <int Kind>
HALO_AVX512 inline __m512 loadw(const void* p) {
  if constexpr (Kind == 0) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i h = _mm256_loadu_si256(static_cast<const __m256i*>(p));
    if constexpr (Kind == 1)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

template <int Kind>
HALO_AVX512 inline __m512 loadw_mask(const void* p, __mmask16 m) {
  if constexpr (Kind == 0) {
    return _mm512_maskz_loadu_ps(m, p);
  } else {
    const __m256i h = _mm256_maskz_loadu_epi16(m, p);
    if constexpr (Kind == 1)
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    else
      return _mm512_cvtph_ps(h);
  }
}

// One accumulator per output element, 16 lanes at a time, the tail masked,
// then one horizontal sum: the same arithmetic for every element whether it is
// computed alone (rows) or in a 4 x R register tile (tile), so results do not
// depend on how many activation rows a step has (batch invariance).
template <int Kind, int MR, int R>
HALO_AVX512 void tile_avx512_n(const float* x, size_t ldx, const void* w, size_t K, float* out, size_t ldo) {
  using WT = std::conditional_t<Kind == 0, float, uint16_t>;
  const WT* wp = static_cast<const WT*>(w);
  __m512 acc[MR][R];
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < R; ++r) acc[i][r] = _mm512_setzero_ps();
  size_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = loadw<Kind>(wp + r * K + k);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_loadu_ps(x + i * ldx + k);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  if (k < K) {
    const __mmask16 m = static_cast<__mmask16>((1u << (K - k)) - 1u);
    __m512 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = loadw_mask<Kind>(wp + r * K + k, m);
    for (int i = 0; i < MR; ++i) {
      const __m512 xv = _mm512_maskz_loadu_ps(m, x + i * ldx + k);
      for (int r = 0; r < R; ++r) acc[i][r] = _mm512_fmadd_ps(xv, wv[r], acc[i][r]);
    }
  }
  for (int i = 0; i < MR; ++i)
    for (int r = 0; r < R; ++r) out[i * ldo + r] = _mm512_reduce_add_ps(acc[i][r]);
}

template <int Kind, int R>
HALO_AVX512 void rows_avx512_n(const float* x, const void* w, size_t K, float* out) {
  tile_avx512_n<Kind, 1, R>(x, 0, w, K, out, 0);
}

template <int Kind>
HALO_AVX512 void tile_avx512(const float* x, size_t ldx, const void* w, size_t K, int nrows, float* out,
                             size_t ldo) {
  switch (nrows) {
    case 1: tile_avx512_n<Kind, 4, 1>(x, ldx, w, K, out, ldo); return;
    case 2: tile_avx512_n<Kind, 4, 2>(x, ldx, w, K, out, ldo); return;
    case 3: tile_avx512_n<Kind, 4, 3>(x, ldx, w, K, out, ldo); return;
    default: tile_avx512_n<Kind, 4, 4>(x, ldx, w, K, out, ldo); return;
  }
}

template <int Kind>
HALO_AVX512 void rows_avx512(const float* x, const void* w, size_t K, int nrows, float* out) {
  switch (nrows) {
    case 1: rows_avx512_n<Kind, 1>(x, w, K, out); return;
    case 2: rows_avx512_n<Kind, 2>(x, w, K, out); return;
    case 3: rows_avx512_n<Kind, 3>(x, w, K, out); return;
    default: rows_avx512_n<Kind, 4>(x, w, K, out); return;
  }
}

HALO_AVX512 float dot_avx512(const float* a, const float* b, size_t n) {
  __m512 a0 = _mm512_setzero_ps();
  __m512 a1 = _mm512_setzero_ps();
  size_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
    a1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), a1);
  }
  for (; i + 16 <= n; i += 16)
    a0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), a0);
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    a1 = _mm512_fmadd_ps(_mm512_maskz_loadu_ps(m, a + i), _mm512_maskz_loadu_ps(m, b + i), a1);
  }
  return _mm512_reduce_add_ps(_mm512_add_ps(a0, a1));
}

HALO_AVX512 void axpy_avx512(float* y, float a, const float* x, size_t n) {
  const __m512 av = _mm512_set1_ps(a);
  size_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(y + i, _mm512_fmadd_ps(av, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(
        y + i, m, _mm512_fmadd_ps(av, _mm512_maskz_loadu_ps(m, x + i), _mm512_maskz_loadu_ps(m, y + i)));
  }
}

template <int Kind>
HALO_AVX512 void convert_avx512(const uint16_t* s, float* d, size_t n) {
  size_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(d + i, loadw<Kind>(s + i));
  if (i < n) {
    const __mmask16 m = static_cast<__mmask16>((1u << (n - i)) - 1u);
    _mm512_mask_storeu_ps(d + i, m, loadw_mask<Kind>(s + i, m));
  }
}

constexpr SimdTable kAvx512{"avx512",          rows_avx512<0>,   rows_avx512<1>,    rows_avx512<2>,
                            tile_avx512<0>,    tile_avx512<1>,   tile_avx512<2>,    dot_avx512,
                            axpy_avx512,       convert_avx512<1>, convert_avx512<2>};

bool cpu_has_avx512() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
         __builtin_cpu_supports("fma");
}
#endif

const SimdTable* best_table() {
  const char* env = std::getenv("HALO_KERNELS_SIMD");
  if (env != nullptr && std::strcmp(env, "generic") == 0) return &kGeneric;
#ifdef HALO_HAVE_AVX512_PATH
  if (cpu_has_avx512()) return &kAvx512;
#endif
  return &kGeneric;
}

std::atomic<const SimdTable*>& current() {
  static std::atomic<const SimdTable*> table{best_table()};
  return table;
}

}  // namespace

const SimdTable& simd() { return *current().load(std::memory_order_relaxed); }

}  // namespace halo::kernels::detail

namespace halo::kernels {

const char* simd_name() { return detail::simd().name; }

bool set_simd_path(const char* name) {
  if (name == nullptr) return false;
  if (std::strcmp(name, "generic") == 0) {
    detail::current().store(&detail::kGeneric);
    return true;
  }
#ifdef HALO_HAVE_AVX512_PATH
  if (std::strcmp(name, "avx512") == 0 && detail::cpu_has_avx512()) {
    detail::current().store(&detail::kAvx512);
    return true;
  }
#endif
  return false;
}

float dot_f32(const float* a, const float* b, size_t n) { return detail::simd().dot(a, b, n); }
void axpy_f32(float* y, float a, const float* x, size_t n) { detail::simd().axpy(y, a, x, n); }

}  // namespace halo::kernels
