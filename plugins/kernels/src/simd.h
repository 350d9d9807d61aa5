// Internal: SIMD kernels selected once at run time.
#pragma once

#include <cstddef>
#include <cstdint>

namespace halo::kernels::detail {

// out[r] = dot(x, w + r*K) for r < nrows (1..4). Per output element the
// arithmetic does not depend on nrows, and bf16/fp16 rows give bitwise the
// same result as their exact fp32 conversion passed to rows_f32.
using RowsFn = void (*)(const float* x, const void* w, size_t K, int nrows, float* out);

// out[i * ldo + r] = dot(x + i * ldx, w + r*K) for i < 4, r < nrows (1..4):
// a register tile over 4 activation rows, each element computed with exactly
// the arithmetic of RowsFn.
using TileFn = void (*)(const float* x, size_t ldx, const void* w, size_t K, int nrows, float* out,
                        size_t ldo);

struct SimdTable {
  const char* name;
  RowsFn rows_f32;
  RowsFn rows_bf16;
  RowsFn rows_f16;
  TileFn tile_f32;
  TileFn tile_bf16;
  TileFn tile_f16;
  float (*dot)(const float* a, const float* b, size_t n);
  void (*axpy)(float* y, float a, const float* x, size_t n);
  void (*bf16_to_f32)(const uint16_t* src, float* dst, size_t n);
  void (*f16_to_f32)(const uint16_t* src, float* dst, size_t n);
};

const SimdTable& simd();

}  // namespace halo::kernels::detail
