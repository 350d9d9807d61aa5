// LoRA adapters on the cuda plugin (ABI v1.6) in host emulation: the grouped
// shrink / expand kernels (plugins/cuda/src/kernels/lora.cuh) with the step
// plan that groups a step's rows by slot (step_plan.h, plan_lora), against a
// double-precision reference of
//
//   y[t, col0 + n] = y0[t, col0 + n] + sum_j (sum_k x[t, k] A[j, k]) B[n, j]
//
// for the rows of sequences with a filled slot, y0 untouched elsewhere. A
// fused q|k|v projection, the base model and three adapters in one step,
// ranks differing per projection (one absent) and not multiples of the
// kernels' tiles; an empty slot runs as the base. Batch invariance: a
// sequence's rows are bitwise the same alone, in the mixed step, and packed
// in a CUDA graph's uniform tiles (padding rows, unused tiles).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "emulated_util.h"
#include "halo/kernels/dtype.h"
#include "kernels/emulate.h"
#include "kernels/lora.cuh"
#include "step_plan.h"

namespace {

namespace hk = halo::kernels;
namespace hc = halo::cuda;
namespace k = halo::cuda::k;
using hc::emu::Step;
using hc::emu::StepSeq;

constexpr int kLoraBs = 16;
constexpr int K = 72;      // the projections' input (not a multiple of 32 lanes)
constexpr int kSlots = 4;  // max_loras
constexpr int kMaxRank = 17;
constexpr int kShrinkThreads = 128;  // 4 rank outputs a block
constexpr int kExpandThreads = 32;   // 32 columns a block: q spans two blocks
const int kOut[3] = {40, 24, 24};    // q | k | v
const int kCol0[3] = {0, 40, 64};
constexpr int kLdy = 88;
// Ranks per slot and projection: slot 1 is empty, slot 0 has no k_proj adapter.
const int kRank[kSlots][3] = {{3, 0, 5}, {0, 0, 0}, {9, 1, 7}, {17, 12, 4}};

template <class V>
V store(float f) {
  if constexpr (std::is_same_v<V, float>)
    return f;
  else
    return V{hk::f32_to_bf16(f)};
}
template <class V>
double value(V v) {
  if constexpr (std::is_same_v<V, float>) {
    return v;
  } else {
    float f;
    hk::to_f32(&v.bits, hk::DType::BF16, &f, 1);
    return f;
  }
}

// The adapters as the kernels read them (W) and as the reference does (double).
template <class W>
struct Adapters {
  std::vector<W> a[kSlots][3], bt[kSlots][3];
  std::vector<double> ad[kSlots][3], bd[kSlots][3];  // A [r, K], B [out, r]
  std::vector<k::LoraMat<W>> mats[3];                // [kSlots] per projection
  uint8_t filled[kSlots] = {};

  explicit Adapters(uint32_t seed) {
    std::mt19937 rng(seed);
    std::normal_distribution<float> d(0.f, 0.3f);
    for (int z = 0; z < 3; ++z) mats[z].resize(kSlots);
    for (int s = 0; s < kSlots; ++s)
      for (int z = 0; z < 3; ++z) {
        const int r = kRank[s][z], out = kOut[z];
        filled[s] |= r > 0;
        a[s][z].resize(size_t(r) * K), ad[s][z].resize(a[s][z].size());
        for (size_t i = 0; i < a[s][z].size(); ++i)
          a[s][z][i] = store<W>(d(rng)), ad[s][z][i] = value(a[s][z][i]);
        bt[s][z].resize(size_t(r) * out), bd[s][z].resize(bt[s][z].size());
        for (int n = 0; n < out; ++n)
          for (int j = 0; j < r; ++j) {
            const W w = store<W>(d(rng));
            bt[s][z][size_t(j) * out + n] = w;  // transposed, as the plugin uploads it
            bd[s][z][size_t(n) * r + j] = value(w);
          }
        mats[z][size_t(s)] = {a[s][z].data(), bt[s][z].data(), r};
      }
  }
};

// Tiles as the kernels read them: from a plan, or from a packed input buffer.
struct TileView {
  k::LoraTiles t;
  int n = 0;
};
TileView view(const hc::LoraPlan& p) {
  return {{p.slot.data(), p.start.data(), p.count.data(), p.rows.data()},
          static_cast<int>(p.slot.size())};
}
TileView view(const hc::Layout& y, const char* h) {
  return {{hc::at<int32_t>(h, y.l_slot), hc::at<int32_t>(h, y.l_start),
           hc::at<int32_t>(h, y.l_count), hc::at<int32_t>(h, y.l_rows)},
          y.lora_tiles};
}

// Shrink then expand over `rows` rows of x [rows, K] and y [rows, kLdy], as
// model.cpp launches them after the q|k|v GEMM.
template <class T, class W>
void run_lora(const Adapters<W>& ad, const TileView& tv, const std::vector<T>& x, int rows,
              std::vector<float>& y, uint32_t seed) {
  if (tv.n == 0) return;
  const int ld = 3 * kMaxRank;
  std::vector<float> xa(size_t(rows) * ld, std::numeric_limits<float>::quiet_NaN());
  using S = k::LoraShrinkKernel<T, W>;
  typename S::Params sp{x.data(), K, {}, 3, tv.t, xa.data(), ld, kMaxRank};
  using E = k::LoraExpandKernel<W>;
  typename E::Params ep{xa.data(), ld, kMaxRank, {}, {}, {}, 3, tv.t, y.data(), kLdy};
  for (int z = 0; z < 3; ++z) {
    sp.mats[z] = ad.mats[z].data(), ep.mats[z] = ad.mats[z].data();
    ep.col0[z] = kCol0[z], ep.out[z] = kOut[z];
  }
  const int warps = kShrinkThreads / 32;
  k::emulate<S>(sp, {tv.n, k::ceil_div(kMaxRank, warps), 3}, kShrinkThreads,
                S::smem_floats(kShrinkThreads), seed);
  k::emulate<E>(ep, {tv.n, k::ceil_div(40, kExpandThreads), 3}, kExpandThreads,
                E::smem_floats(kMaxRank), seed + 1);
}

template <class T>
std::vector<T> make_x(int rows, uint32_t seed, std::vector<double>& xd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<T> x(size_t(rows) * K);
  xd.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) x[i] = store<T>(d(rng)), xd[i] = value(x[i]);
  return x;
}

// Sequences with query lengths q (cached 5, block table 0..3).
std::vector<StepSeq> lora_seqs_with(const std::vector<int>& q) {
  std::vector<StepSeq> out;
  for (size_t s = 0; s < q.size(); ++s) {
    StepSeq x;
    x.cached = 5;
    for (int i = 0; i < q[s]; ++i) x.tokens.push_back(static_cast<int32_t>(10 * s + i + 1));
    x.blocks = {0, 1, 2, 3};
    out.push_back(x);
  }
  return out;
}

// The mixed step: base (-1), every slot (1 empty) and slots repeated, one
// slot's rows spanning several tiles.
const std::vector<int> kQ{3, 1, 11, 1, 2, 9, 1, 4, 1};
const std::vector<int32_t> kSlotOf{-1, 0, 2, 3, -1, 0, 2, 1, 3};

template <class T, class W>
void check_mixed_step(uint32_t seed, double tol) {
  const Adapters<W> ad(seed);
  Step st(lora_seqs_with(kQ), kLoraBs, 4);
  st.a.lora_slots = kSlotOf.data();
  const int rows = st.a.num_tokens;
  std::vector<double> xd;
  const std::vector<T> x = make_x<T>(rows, seed + 1, xd);
  const std::vector<float> y0 = hc::emu::randn(size_t(rows) * kLdy, seed + 2);
  std::vector<float> y = y0;
  const hc::LoraPlan plan = hc::eager_lora(&st.a, ad.filled, kSlots, k::kLoraTileRows);
  run_lora<T, W>(ad, view(plan), x, rows, y, seed + 3);
  double worst = 0;
  for (size_t s = 0; s < kQ.size(); ++s) {
    const int slot = kSlotOf[s] >= 0 && ad.filled[kSlotOf[s]] ? kSlotOf[s] : -1;
    for (int t = st.qs[s]; t < st.qs[s + 1]; ++t)
      for (int z = 0; z < 3; ++z) {
        const int r = slot >= 0 ? kRank[slot][z] : 0;
        std::vector<double> xa(static_cast<size_t>(r)), xa_mag(static_cast<size_t>(r));
        for (int j = 0; j < r; ++j)
          for (int kk = 0; kk < K; ++kk) {
            const double p = xd[size_t(t) * K + kk] * ad.ad[slot][z][size_t(j) * K + kk];
            xa[size_t(j)] += p, xa_mag[size_t(j)] += std::fabs(p);
          }
        for (int n = 0; n < kOut[z]; ++n) {
          const size_t i = size_t(t) * kLdy + size_t(kCol0[z] + n);
          if (r == 0) {  // the base model, an empty slot or no adapter on this projection
            ASSERT_EQ(y[i], y0[i]) << "row " << t << " column " << kCol0[z] + n << " was touched";
            continue;
          }
          double ref = y0[i], mag = std::fabs(y0[i]);
          for (int j = 0; j < r; ++j) {
            const double b = ad.bd[slot][z][size_t(n) * r + j];
            ref += xa[size_t(j)] * b, mag += xa_mag[size_t(j)] * std::fabs(b);
          }
          ASSERT_FALSE(std::isnan(y[i])) << "row " << t << " column " << kCol0[z] + n;
          worst = std::max(worst, std::fabs(y[i] - ref) / mag);
        }
      }
  }
  EXPECT_LE(worst, tol);
}

TEST(CudaLoraEmulated, MixedSlotsFp32MatchReference) { check_mixed_step<float, float>(1, 2e-6); }

// The plugin's instantiation: bf16 activations and adapters, fp32 xa and y.
TEST(CudaLoraEmulated, MixedSlotsBf16MatchReference) {
  check_mixed_step<k::bf16, k::bf16>(7, 2e-6);
}

// Every sequence's rows alone (a step of that sequence only) are bitwise its
// rows of the mixed step, and so are they when the step is packed in a
// graph's uniform tiles (padding rows between sequences, unused tiles).
template <class T, class W>
void check_batch_invariance(uint32_t seed) {
  const Adapters<W> ad(seed);
  Step st(lora_seqs_with(kQ), kLoraBs, 4);
  st.a.lora_slots = kSlotOf.data();
  const int rows = st.a.num_tokens;
  std::vector<double> xd;
  const std::vector<T> x = make_x<T>(rows, seed + 1, xd);
  const std::vector<float> y0 = hc::emu::randn(size_t(rows) * kLdy, seed + 2);
  std::vector<float> mixed = y0;
  run_lora<T, W>(ad, view(hc::eager_lora(&st.a, ad.filled, kSlots, k::kLoraTileRows)), x, rows,
                 mixed, seed + 3);
  for (size_t s = 0; s < kQ.size(); ++s) {
    SCOPED_TRACE(testing::Message() << "sequence " << s << " slot " << kSlotOf[s]);
    Step one(lora_seqs_with({kQ[s]}), kLoraBs, 4);
    one.a.lora_slots = &kSlotOf[s];
    const int b = st.qs[s], n = kQ[s];
    std::vector<T> xs(x.begin() + b * K, x.begin() + (b + n) * K);
    std::vector<float> ys(y0.begin() + b * kLdy, y0.begin() + (b + n) * kLdy);
    run_lora<T, W>(ad, view(hc::eager_lora(&one.a, ad.filled, kSlots, k::kLoraTileRows)), xs, n, ys,
                   seed + 10 + uint32_t(s));
    EXPECT_EQ(0, std::memcmp(ys.data(), mixed.data() + size_t(b) * kLdy, ys.size() * 4));
  }

  // A graph of uniform tiles of q = 12 rows (the verify graph's padding).
  const hc::GraphConfig gc{true, 128, 11, ad.filled, kSlots};
  const hc::GraphShape g = hc::graph_shape(&st.a, gc);
  ASSERT_TRUE(g);
  ASSERT_TRUE(g.lora);
  ASSERT_EQ(g.q, 12);
  const hc::Layout y = hc::graph_layout(g, 4, kSlots, k::kLoraTileRows);
  std::vector<char> h(y.bytes);
  hc::pack_graph_inputs(&st.a, kLoraBs, g, y, h.data(), ad.filled, kSlots, k::kLoraTileRows);
  const TileView tv = view(y, h.data());
  ASSERT_GT(tv.n, static_cast<int>(
                      hc::eager_lora(&st.a, ad.filled, kSlots, k::kLoraTileRows).slot.size()));
  std::vector<T> xg(size_t(g.rows()) * K, store<T>(1e3f));  // padding rows: anything
  std::vector<float> yg(size_t(g.rows()) * kLdy, 5.f);
  for (size_t s = 0; s < kQ.size(); ++s)
    for (int j = 0; j < kQ[s]; ++j) {
      const size_t r = s * size_t(g.q) + size_t(j), t = size_t(st.qs[s] + j);
      std::copy_n(x.begin() + long(t) * K, K, xg.begin() + long(r) * K);
      std::copy_n(y0.begin() + long(t) * kLdy, kLdy, yg.begin() + long(r) * kLdy);
    }
  run_lora<T, W>(ad, tv, xg, g.rows(), yg, seed + 50);
  for (int r = 0; r < g.rows(); ++r) {
    const size_t s = size_t(r / g.q), j = size_t(r % g.q);
    const float* got = yg.data() + size_t(r) * kLdy;
    if (s >= kQ.size() || j >= size_t(kQ[s])) {  // padding: untouched
      for (int c = 0; c < kLdy; ++c) ASSERT_EQ(got[c], 5.f) << "padding row " << r;
      continue;
    }
    EXPECT_EQ(0, std::memcmp(got, mixed.data() + size_t(st.qs[s] + int(j)) * kLdy, kLdy * 4))
        << "graph row " << r;
  }
}

TEST(CudaLoraEmulated, BatchInvariantFp32) { check_batch_invariance<float, float>(21); }
TEST(CudaLoraEmulated, BatchInvariantBf16) { check_batch_invariance<k::bf16, k::bf16>(31); }

// The plan: rows grouped by slot (ascending, sequences in order within a
// slot), tiles of at most kLoraTileRows rows of one slot; base sequences,
// empty slots, a NULL array and a caller older than v1.6 give no tiles.
TEST(CudaLoraPlan, GroupsRowsBySlot) {
  Step st(lora_seqs_with({2, 1, 10, 1, 3}), kLoraBs, 4);
  const std::vector<int32_t> slots{2, -1, 0, 1, 2};
  const uint8_t filled[3] = {1, 0, 1};
  st.a.lora_slots = slots.data();
  const hc::LoraPlan p = hc::eager_lora(&st.a, filled, 3, 8);
  // slot 0: sequence 2 (rows 3..12); slot 2: sequences 0 (rows 0, 1) and 4 (rows 14..16).
  EXPECT_EQ(p.rows, (std::vector<int32_t>{3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0, 1, 14, 15, 16}));
  EXPECT_EQ(p.slot, (std::vector<int32_t>{0, 0, 2}));
  EXPECT_EQ(p.start, (std::vector<int32_t>{0, 8, 10}));
  EXPECT_EQ(p.count, (std::vector<int32_t>{8, 2, 5}));
  EXPECT_LE(int(p.slot.size()), hc::lora_tile_cap(st.a.num_tokens, 5, 3, 8));

  EXPECT_TRUE(hc::any_lora(&st.a, filled, 3));
  const hc::GraphShape g = hc::graph_shape(&st.a, {true, 64, 9, filled, 3});
  EXPECT_TRUE(g.lora);

  const std::vector<int32_t> base{-1, 1, -1, 1, -1};  // slot 1 is empty
  st.a.lora_slots = base.data();
  EXPECT_TRUE(hc::eager_lora(&st.a, filled, 3, 8).slot.empty());
  EXPECT_FALSE(hc::graph_shape(&st.a, {true, 64, 9, filled, 3}).lora);
  st.a.lora_slots = nullptr;
  EXPECT_FALSE(hc::any_lora(&st.a, filled, 3));
  st.a.lora_slots = slots.data();
  st.a.struct_size = offsetof(halo_execute_args, lora_slots);  // a v1.5 caller
  EXPECT_FALSE(hc::any_lora(&st.a, filled, 3));
  EXPECT_TRUE(hc::eager_lora(&st.a, filled, 3, 8).rows.empty());
}

// A graph without LoRA keeps its layout (and bytes) as before v1.6.
TEST(CudaLoraPlan, BaseGraphLayoutUnchanged) {
  const hc::GraphShape g{4, 1, false};
  const hc::Layout y = hc::graph_layout(g, 8, kSlots, k::kLoraTileRows);
  const hc::Layout old = hc::make_layout(4, 4, 8, 4, 4, 0);
  EXPECT_EQ(y.bytes, old.bytes);
  EXPECT_EQ(y.lora_tiles, 0);
  EXPECT_LT(hc::GraphShape({4, 1, false}), hc::GraphShape({4, 1, true}));
  EXPECT_FALSE(hc::GraphShape({4, 1, false}) == hc::GraphShape({4, 1, true}));
}

}  // namespace
