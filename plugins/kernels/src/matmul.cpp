#include <algorithm>

#include "halo/kernels/kernels.h"
#include "simd.h"

namespace halo::kernels {

namespace {
constexpr size_t kRowsPerTile = 16;    // weight rows (output columns) per task
constexpr size_t kXRowsPerBlock = 32;  // activation rows per task
}  // namespace

void matmul_nt(ThreadPool& pool, const float* x, size_t M, size_t K, const void* w, DType wt,
               size_t N, const float* bias, float* y) {
  matmul_nt_strided(pool, x, M, K, K, w, wt, N, bias, y, N);
}

void matmul_nt_strided(ThreadPool& pool, const float* x, size_t M, size_t K, size_t ldx,
                       const void* w, DType wt, size_t N, const float* bias, float* y, size_t ldy) {
  if (M == 0 || N == 0) return;
  const detail::SimdTable& simd = detail::simd();
  const detail::RowsFn direct =
      wt == DType::F32 ? simd.rows_f32 : (wt == DType::BF16 ? simd.rows_bf16 : simd.rows_f16);
  const detail::TileFn direct_tile =
      wt == DType::F32 ? simd.tile_f32 : (wt == DType::BF16 ? simd.tile_bf16 : simd.tile_f16);
  const size_t esize = dtype_size(wt);
  const size_t n_tiles = (N + kRowsPerTile - 1) / kRowsPerTile;
  const size_t m_blocks = (M + kXRowsPerBlock - 1) / kXRowsPerBlock;
  // With many activation rows a 16-bit weight tile is converted to fp32
  // once per task and reused; conversion is exact, so this gives bitwise the
  // same result as converting in registers (what small batches do).
  const bool convert_tile = wt != DType::F32 && M >= 16;
  const char* wbytes = static_cast<const char*>(w);

  pool.parallel_for(n_tiles * m_blocks, [&](size_t task, int worker) {
    const size_t mb = task / n_tiles;
    const size_t nt = task % n_tiles;
    const size_t n0 = nt * kRowsPerTile;
    const size_t n1 = std::min(N, n0 + kRowsPerTile);
    const size_t m0 = mb * kXRowsPerBlock;
    const size_t m1 = std::min(M, m0 + kXRowsPerBlock);
    const void* tile = wbytes + n0 * K * esize;
    detail::RowsFn rows = direct;
    detail::TileFn tile4 = direct_tile;
    size_t tile_esize = esize;
    if (convert_tile) {
      float* buf = pool.scratch(worker, 0, (n1 - n0) * K);
      to_f32(tile, wt, buf, (n1 - n0) * K);
      tile = buf;
      rows = simd.rows_f32;
      tile4 = simd.tile_f32;
      tile_esize = sizeof(float);
    }
    // 4 activation rows x 4 weight rows per register tile: each weight vector
    // loaded feeds four FMAs. Leftover rows go one at a time.
    float out4[16];
    size_t m = m0;
    for (; m + 4 <= m1; m += 4) {
      for (size_t n = n0; n < n1; n += 4) {
        const int nr = static_cast<int>(std::min<size_t>(4, n1 - n));
        tile4(x + m * ldx, ldx, static_cast<const char*>(tile) + (n - n0) * K * tile_esize, K, nr,
              out4, 4);
        for (int i = 0; i < 4; ++i)
          for (int r = 0; r < nr; ++r)
            y[(m + i) * ldy + n + r] = bias ? out4[i * 4 + r] + bias[n + r] : out4[i * 4 + r];
      }
    }
    float out[4];
    for (; m < m1; ++m) {
      const float* xr = x + m * ldx;
      float* yr = y + m * ldy;
      for (size_t n = n0; n < n1; n += 4) {
        const int nr = static_cast<int>(std::min<size_t>(4, n1 - n));
        rows(xr, static_cast<const char*>(tile) + (n - n0) * K * tile_esize, K, nr, out);
        for (int r = 0; r < nr; ++r) yr[n + r] = bias ? out[r] + bias[n + r] : out[r];
      }
    }
  });
}

}  // namespace halo::kernels
