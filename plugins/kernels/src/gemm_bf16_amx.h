// AMX (tdpbf16ps) path of gemm_bf16; internal to halo_kernels.
//
// The packed weights are already AMX's B-tile (VNNI) format: 16 consecutive
// k-pairs of one 16-column block are 16 rows x 64 bytes, 1 KiB contiguous.
// An A tile is up to 16 activation rows x 32 bf16 (one "chunk" of 16
// k-pairs), a C tile up to 16 rows x 16 fp32 columns.
//
// Batch invariance: every output element is one C-tile element that starts
// at 0 and takes one tdpbf16ps per chunk, chunks 0, 1, ... in order (chunks
// always start at a multiple of 32 k, the padding past K is 0 in x and W).
// When K is cut into blocks the element goes through y, an exact fp32 store
// and reload, and the bias is added once at the end. Which tile, tile row or
// thread holds the element, and how many rows the tile has, do not change
// its bits; so the result of a row does not depend on M, the row's place in
// the batch, the blocking or the threads.
#pragma once

#include <cstddef>
#include <cstdint>

namespace halo::kernels::amx {

constexpr size_t kChunkPairs = 16;   // k-pairs per tile step: 32 bf16 = one 64-byte A row
constexpr size_t kTileRows = 16;     // rows of an A / C tile at most
constexpr size_t kDecodePanel = 4;   // column blocks per panel when rows <= 16 (1 A x 4 C tiles)
constexpr size_t kPrefillPanel = 2;  // column blocks per panel past 16 rows (2 A x 2 C tiles)

// True once the CPU has AMX-TILE and AMX-BF16, the OS enables tile state
// (XCR0) and Linux granted this process the tile data permission
// (arch_prctl(ARCH_REQ_XCOMP_PERM)); asked for once per process. The
// permission is process wide: threads started before it may use tiles too.
bool supported();

struct Gemm {
  // bf16 activations as A tiles: chunk c of rows 16g..16g+15 is 16 x 32
  // values (1 KiB, rows 64 bytes apart) at xb + (g * chunks + c) * 512; 0 past K.
  const uint16_t* xb;
  const uint16_t* w;  // packed weights: block b at w + b * wstride
  size_t wstride;     // a multiple of kChunkPairs * 32 elements
  size_t chunks;      // K in chunks of kChunkPairs k-pairs
  size_t kblock;      // chunks per K block (the element goes through y between blocks)
  size_t N;
  float* y;  // rows ldy apart
  size_t ldy;
  const float* bias;  // [N] or nullptr
};

// y rows [m0, m1) x column blocks [b0, b1), on the calling thread (m0 a
// multiple of 16). Up to 16 rows use 1 x 4 tiles (weights read once); more
// use 2 x 2 tiles over groups of 32 rows, K block outermost per panel so the
// panel's slice is reused from cache by every row group.
void run(const Gemm& g, size_t m0, size_t m1, size_t b0, size_t b1);

}  // namespace halo::kernels::amx
