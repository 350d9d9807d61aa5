// AMX path of gemm_bf16: see gemm_bf16_amx.h for the tiles and why every
// element's arithmetic is the same for any M.
//
// Tiles: tmm0..3 are C (accumulators), tmm4/5 the A tiles of up to two
// groups of 16 rows, tmm6/7 B tiles (weights, loaded straight from the
// packed layout, stride 64 bytes). Up to 16 rows: one A tile and 4 C tiles
// (tmm0..3 = blocks 0..3 of the panel), so each weight byte is read once per
// call. Past 16 rows: groups of 32 rows as two A tiles x 2 blocks (tmm0/1 =
// rows 0-15 x blocks 0/1, tmm2/3 = rows 16-31), 4 KiB of loads per 4
// tdpbf16ps. A C tile of 16 valid columns is stored to y (and reloaded from
// it between K blocks) directly, one with fewer through a stack buffer, so
// columns past N are never written; the bias is added in fp32 after the
// last store.
#include "gemm_bf16_amx.h"

#include <algorithm>

#if defined(__x86_64__) && defined(__GNUC__) && defined(__linux__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>
#define HALO_HAVE_AMX_PATH 1
#define HALO_TARGET_AMX __attribute__((target("amx-tile,amx-bf16")))
#endif

namespace halo::kernels::amx {

#ifdef HALO_HAVE_AMX_PATH
namespace {

constexpr size_t kLanes = 16;                     // columns per block
constexpr size_t kChunkElems = kChunkPairs * 32;  // uint16 per (block, chunk): 1 KiB
constexpr long kRowBytes = 64;                    // B and C tile row stride in memory
constexpr int kArchReqXcompPerm = 0x1023;         // <asm/prctl.h>
// Software prefetch distance of the weights, in chunks (1 KiB per block),
// by the first row group over a slice (the one that reads it from memory);
// 0 = off. Two B tile registers keep too few lines in flight to stream from
// DRAM at the AVX-512 kernel's rate (hardware prefetch alone: about 15%
// slower at M = 1 over 1 GiB of weights; at M = 20 up to 1.5x slower).
#ifndef HALO_GEMM_AMX_PREFETCH
#define HALO_GEMM_AMX_PREFETCH 4
#endif
constexpr size_t kPrefetchChunks = HALO_GEMM_AMX_PREFETCH;
constexpr int kXfeatureXtiledata = 18;

bool cpu_and_os_have_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return false;
  const bool amx_bf16 = (d >> 22) & 1u, amx_tile = (d >> 24) & 1u;
  if (!amx_bf16 || !amx_tile) return false;
  if (!__get_cpuid(1, &a, &b, &c, &d) || ((c >> 27) & 1u) == 0) return false;  // OSXSAVE
  unsigned lo = 0, hi = 0;
  __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
  return ((lo >> 17) & 3u) == 3u;  // XTILECFG and XTILEDATA state enabled
}

// The tile instructions' asm statements do not tell the compiler which
// memory they read (ldtilecfg claims 8 bytes): plain stores to a buffer a
// tile instruction reads next must be forced out first.
inline void compiler_barrier() { __asm__ volatile("" ::: "memory"); }

struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// The configured shape of the calling thread's tiles during one run().
struct TileShape {
  int h0 = -1, h1 = -1;
  bool small = false;
};

// h0 rows in the first A tile, h1 in the second (0: one A tile). small: one
// A tile with 4 C tiles, all of h0 rows.
HALO_TARGET_AMX void configure(TileShape& cur, int h0, int h1, bool small) {
  if (cur.h0 == h0 && cur.h1 == h1 && cur.small == small) return;
  TileConfig cfg;
  const int c23 = small ? h0 : h1;
  const int rows[8] = {
      h0, h0, c23, c23, h0, h1, static_cast<int>(kChunkPairs), static_cast<int>(kChunkPairs)};
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = static_cast<uint8_t>(rows[t]);
    cfg.colsb[t] = rows[t] == 0 ? 0 : static_cast<uint16_t>(kRowBytes);
  }
  compiler_barrier();
  _tile_loadconfig(&cfg);
  cur = {h0, h1, small};
}

// One row group x one panel x one K block [c0, c1) of chunks.
struct Step {
  const uint16_t* x0;  // A tile 0 (tmm4) at chunk 0, tiled as Gemm::xb
  const uint16_t* x1;  // A tile 1 (tmm5)
  const uint16_t* w;   // the panel's first block at chunk 0
  size_t c0, c1;
  float* y0;  // rows of tile 0 at the panel's first column
  float* y1;
  int h0, h1;
  size_t ncols;       // valid columns of the panel
  const float* bias;  // at the panel's first column, or nullptr
  bool first, last;
  bool prefetch;  // the first row group over this slice of the weights: they come from memory
};

// Which rows and columns C tile t holds: A tile t / 2 x block t % 2 with two
// A tiles, else A tile 0 x block t.
struct CTile {
  float* y;
  int rows;
  size_t col, cols;  // panel column of its first lane, valid columns
};

CTile c_tile(const Step& s, int t, bool two_a) {
  const int a = two_a ? t / 2 : 0;
  const size_t b = two_a ? static_cast<size_t>(t % 2) : static_cast<size_t>(t);
  const size_t col = b * kLanes;
  return {a == 0 ? s.y0 : s.y1, a == 0 ? s.h0 : s.h1, col, std::min(kLanes, s.ncols - col)};
}

// y -> buffer (columns past N as 0), exact fp32 copies.
void c_from_y(const CTile& c, float* buf, size_t ldy) {
  for (int r = 0; r < c.rows; ++r) {
    const float* yr = c.y + static_cast<size_t>(r) * ldy + c.col;
    float* br = buf + static_cast<size_t>(r) * kLanes;
    for (size_t l = 0; l < kLanes; ++l) br[l] = l < c.cols ? yr[l] : 0.f;
  }
}

// buffer -> y (buf == nullptr: C was stored in y), the bias added once
// (fp32) in the last K block.
void c_to_y(const CTile& c, const float* buf, size_t ldy, const float* bias) {
  if (buf == nullptr && bias == nullptr) return;
  for (int r = 0; r < c.rows; ++r) {
    float* yr = c.y + static_cast<size_t>(r) * ldy + c.col;
    const float* br = buf != nullptr ? buf + static_cast<size_t>(r) * kLanes : yr;
    if (bias != nullptr) {
      for (size_t l = 0; l < c.cols; ++l) yr[l] = br[l] + bias[c.col + l];
    } else {
      for (size_t l = 0; l < c.cols; ++l) yr[l] = br[l];
    }
  }
}

// The 16 lines of chunk c of NB blocks `wstride` elements apart, into L1.
template <int NB>
inline void prefetch_chunk(const uint16_t* w, size_t wstride) {
  for (int b = 0; b < NB; ++b) {
    const char* p = reinterpret_cast<const char*>(w + b * wstride);
    for (int l = 0; l < 16; ++l) _mm_prefetch(p + l * kRowBytes, _MM_HINT_T0);
  }
}

// Tile numbers are immediates of the instructions (the intrinsics are macros
// that paste them): one statement per C tile in use.
#define HALO_AMX_FOR_C(USED, OP) \
  do {                           \
    if (USED(0)) OP(0);          \
    if (USED(1)) OP(1);          \
    if (USED(2)) OP(2);          \
    if (USED(3)) OP(3);          \
  } while (0)

// TwoA: two A tiles (rows 0-15 and 16-31 of the group) x NB <= 2 blocks;
// else one A tile x NB <= 4 blocks.
template <int NB, bool TwoA>
HALO_TARGET_AMX void tile_step(const Step& s, size_t wstride, size_t ldy) {
  static_assert(NB >= 1 && NB <= (TwoA ? 2 : 4));
  constexpr int kUsed[4] = {1, NB > 1, TwoA || NB > 2, TwoA ? NB > 1 : NB > 3};
#define HALO_USED(t) kUsed[t]
  // C of a block with 16 valid columns is stored to (and reloaded from) y
  // directly, the others through buf.
  alignas(64) float buf[4][kTileRows * kLanes];
  CTile ct[4];
  void* cp[4];
  long cs[4];
  for (int t = 0; t < 4; ++t) {
    if (!kUsed[t]) continue;
    ct[t] = c_tile(s, t, TwoA);
    const bool direct = ct[t].cols == kLanes;
    cp[t] = direct ? static_cast<void*>(ct[t].y + ct[t].col) : static_cast<void*>(buf[t]);
    cs[t] = direct ? static_cast<long>(ldy * sizeof(float)) : kRowBytes;
  }
  if (s.first) {
#define HALO_ZERO(t) _tile_zero(t)
    HALO_AMX_FOR_C(HALO_USED, HALO_ZERO);
  } else {
    for (int t = 0; t < 4; ++t)
      if (kUsed[t] && cp[t] == buf[t]) c_from_y(ct[t], buf[t], ldy);
    compiler_barrier();
#define HALO_LOAD_C(t) _tile_loadd(t, cp[t], cs[t])
    HALO_AMX_FOR_C(HALO_USED, HALO_LOAD_C);
  }
  const uint16_t* wc = s.w + s.c0 * kChunkElems;
  for (size_t c = s.c0; c < s.c1; ++c, wc += kChunkElems) {
    if (kPrefetchChunks > 0 && s.prefetch && c + kPrefetchChunks < s.c1)
      prefetch_chunk<NB>(wc + kPrefetchChunks * kChunkElems, wstride);
    _tile_loadd(4, s.x0 + c * kChunkElems, kRowBytes);
    if constexpr (TwoA) {
      _tile_loadd(5, s.x1 + c * kChunkElems, kRowBytes);
      _tile_loadd(6, wc, kRowBytes);
      _tile_dpbf16ps(0, 4, 6);
      _tile_dpbf16ps(2, 5, 6);
      if constexpr (NB > 1) {
        _tile_loadd(7, wc + wstride, kRowBytes);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(3, 5, 7);
      }
    } else {
      _tile_loadd(6, wc, kRowBytes);
      _tile_dpbf16ps(0, 4, 6);
      if constexpr (NB > 1) {
        _tile_loadd(7, wc + wstride, kRowBytes);
        _tile_dpbf16ps(1, 4, 7);
      }
      if constexpr (NB > 2) {
        _tile_loadd(6, wc + 2 * wstride, kRowBytes);
        _tile_dpbf16ps(2, 4, 6);
      }
      if constexpr (NB > 3) {
        _tile_loadd(7, wc + 3 * wstride, kRowBytes);
        _tile_dpbf16ps(3, 4, 7);
      }
    }
  }
#define HALO_STORE_C(t) _tile_stored(t, cp[t], cs[t])
  HALO_AMX_FOR_C(HALO_USED, HALO_STORE_C);
  const float* bias = s.last ? s.bias : nullptr;
  for (int t = 0; t < 4; ++t)
    if (kUsed[t]) c_to_y(ct[t], cp[t] == buf[t] ? buf[t] : nullptr, ldy, bias);
#undef HALO_USED
#undef HALO_ZERO
#undef HALO_LOAD_C
#undef HALO_STORE_C
}

using StepFn = void (*)(const Step&, size_t, size_t);
constexpr StepFn kOneA[4] = {tile_step<1, false>, tile_step<2, false>, tile_step<3, false>,
                             tile_step<4, false>};
constexpr StepFn kTwoA[2] = {tile_step<1, true>, tile_step<2, true>};

HALO_TARGET_AMX void release_tiles() { _tile_release(); }

}  // namespace

bool supported() {
  static const bool ok = [] {
    if (!cpu_and_os_have_amx()) return false;
    // Per process: threads that exist already (the pools) get it too.
    return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  }();
  return ok;
}

void run(const Gemm& g, size_t m0, size_t m1, size_t b0, size_t b1) {
  const size_t rows = m1 - m0;
  const bool small = rows <= kTileRows;
  const size_t panel = small ? kDecodePanel : kPrefillPanel;
  const size_t group = small ? kTileRows : 2 * kTileRows;
  TileShape shape;
  Step s{};
  for (size_t q = b0; q < b1; q += panel) {
    const size_t nbq = std::min(panel, b1 - q);
    const size_t col0 = q * kLanes;
    s.w = g.w + q * g.wstride;
    s.ncols = std::min(nbq * kLanes, g.N - col0);
    s.bias = g.bias != nullptr ? g.bias + col0 : nullptr;
    for (size_t c0 = 0; c0 < g.chunks; c0 += g.kblock) {
      s.c0 = c0;
      s.c1 = std::min(g.chunks, c0 + g.kblock);
      s.first = c0 == 0;
      s.last = s.c1 == g.chunks;
      for (size_t m = m0; m < m1; m += group) {
        const size_t h = std::min(group, m1 - m);
        s.h0 = static_cast<int>(std::min(kTileRows, h));
        s.h1 = static_cast<int>(h) - s.h0;
        s.x0 = g.xb + (m / kTileRows) * g.chunks * kChunkElems;
        s.x1 = s.h1 > 0 ? s.x0 + g.chunks * kChunkElems : nullptr;
        s.y0 = g.y + m * g.ldy + col0;
        s.y1 = s.h1 > 0 ? s.y0 + kTileRows * g.ldy : nullptr;
        s.prefetch = m == m0;
        configure(shape, s.h0, s.h1, small);
        const StepFn fn = s.h1 > 0 ? kTwoA[nbq - 1] : kOneA[nbq - 1];
        fn(s, g.wstride, g.ldy);
      }
    }
  }
  if (shape.h0 >= 0) release_tiles();
}

#else  // no AMX path in this build

bool supported() { return false; }
void run(const Gemm&, size_t, size_t, size_t, size_t) {}

#endif

}  // namespace halo::kernels::amx
