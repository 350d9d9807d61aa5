// The host side of a cuda step (plugins/cuda/src/step_plan.h), no GPU
// needed: which steps replay a CUDA graph and under which (B, q) key, and
// how a graph step's inputs are packed (uniform tiles of q rows per
// sequence, padding rows, the caller's logits rows in its order). The decode
// graphs' inputs are checked byte for byte against the packing they had
// before verify graphs existed.
#include "step_plan.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <vector>

#include "emulated_util.h"

namespace {

using halo::cuda::GraphConfig;
using halo::cuda::GraphShape;
using halo::cuda::Layout;
using halo::cuda::emu::Step;
using halo::cuda::emu::StepSeq;
namespace hc = halo::cuda;

constexpr int kBs = 16;

// Sequences with query lengths q (cached contexts 20, 27, 34, 41, 20, ...)
// and block tables of 4 blocks.
std::vector<StepSeq> seqs_with(const std::vector<int>& q) {
  std::vector<StepSeq> out;
  for (size_t s = 0; s < q.size(); ++s) {
    StepSeq x;
    x.cached = 20 + 7 * static_cast<int>(s % 4);
    for (int i = 0; i < q[s]; ++i) x.tokens.push_back(static_cast<int32_t>(100 * s + i + 1));
    x.blocks = {static_cast<int32_t>(3 * s + 2), static_cast<int32_t>(3 * s),
                static_cast<int32_t>(3 * s + 1), static_cast<int32_t>(40 + s)};
    out.push_back(x);
  }
  return out;
}

GraphShape shape_of(const std::vector<int>& q, GraphConfig c) {
  Step st(seqs_with(q), kBs, 4);
  return hc::graph_shape(&st.a, c);
}

TEST(CudaStepPlan, WhichStepsTakeAGraphAndItsKey) {
  const GraphConfig c{true, 16, 4};  // max_graph_batch 16, K = 4
  // Decode: every q = 1, B padded to a power of two up to max_graph_batch.
  EXPECT_EQ(shape_of({1}, c), (GraphShape{1, 1}));
  EXPECT_EQ(shape_of({1, 1, 1}, c), (GraphShape{4, 1}));
  EXPECT_EQ(shape_of(std::vector<int>(16, 1), c), (GraphShape{16, 1}));
  EXPECT_FALSE(shape_of(std::vector<int>(17, 1), c));
  // Verify: any q > 1 up to K + 1 pads every sequence to K + 1 rows, decodes
  // and short chunks included; B up to max_graph_batch / (K + 1) = 3.
  EXPECT_EQ(shape_of({5}, c), (GraphShape{1, 5}));
  EXPECT_EQ(shape_of({2}, c), (GraphShape{1, 5}));
  EXPECT_EQ(shape_of({5, 1}, c), (GraphShape{2, 5}));
  EXPECT_EQ(shape_of({5, 1, 3}, c), (GraphShape{3, 5}));  // the cap, not a power of two
  EXPECT_FALSE(shape_of({5, 1, 3, 1}, c));                // 4 x 5 rows > 16
  // Eager: a sequence longer than K + 1 (prefill), a sequence with no query.
  EXPECT_FALSE(shape_of({6}, c));
  EXPECT_FALSE(shape_of({1, 6}, c));
  EXPECT_FALSE(shape_of({5, 0}, c));
  EXPECT_FALSE(shape_of({1, 0}, c));
  // No speculation agreed (K = 0): only the decode graphs.
  EXPECT_EQ(shape_of({1, 1}, GraphConfig{true, 16, 0}), (GraphShape{2, 1}));
  EXPECT_FALSE(shape_of({2}, GraphConfig{true, 16, 0}));
  // K + 1 above max_graph_batch: verifies run eagerly.
  EXPECT_FALSE(shape_of({2}, GraphConfig{true, 4, 4}));
  EXPECT_EQ(shape_of({1}, GraphConfig{true, 4, 4}), (GraphShape{1, 1}));
  // Graphs off (cuda_graphs=0 or tensor parallel): never.
  EXPECT_FALSE(shape_of({1}, GraphConfig{false, 16, 4}));
  EXPECT_FALSE(shape_of({5}, GraphConfig{false, 16, 4}));
}

TEST(CudaStepPlan, MoreLogitsRowsThanTheGraphComputesRunEagerly) {
  Step st(seqs_with({1, 1, 1}), kBs, 4);
  const GraphConfig c{true, 16, 4};
  EXPECT_EQ(hc::graph_shape(&st.a, c), (GraphShape{4, 1}));
  st.lidx = {0, 1, 2, 2, 1};  // repeated rows: 5 > B = 4
  st.a.logits_indices = st.lidx.data(), st.a.num_logits = 5;
  EXPECT_FALSE(hc::graph_shape(&st.a, c));
  st.a.num_logits = 4;
  EXPECT_EQ(hc::graph_shape(&st.a, c), (GraphShape{4, 1}));
}

// The decode-graph packing as model.cpp did it before verify graphs (ABI
// v1.5's commit), the reference the q = 1 packing must reproduce.
std::vector<char> legacy_decode_pack(const halo_execute_args* a, int block_size, int B,
                                     int mb_cap) {
  const Layout y = hc::make_layout(B, B, mb_cap, B, B, 0);
  std::vector<char> buf(y.bytes, 0x5a);
  char* h = buf.data();
  const int T_ = a->num_tokens, S = a->num_seqs, L = a->num_logits;
  std::memset(h, 0, y.bytes);
  for (int t = 0; t < y.T; ++t) {
    hc::at<int64_t>(h, y.slots)[t] = t < T_ ? a->slot_mapping[t] : -1;
    hc::at<int32_t>(h, y.tok)[t] = t < T_ ? a->token_ids[t] : 0;
    hc::at<int32_t>(h, y.pos)[t] = t < T_ ? a->positions[t] : 0;
  }
  for (int s = 0; s < S; ++s) {
    const int nblk = (a->context_lens[s] + block_size - 1) / block_size;
    std::memcpy(hc::at<int32_t>(h, y.bt) + static_cast<size_t>(s) * y.mb,
                a->block_tables + static_cast<size_t>(s) * a->max_blocks_per_seq,
                static_cast<size_t>(nblk) * 4);
  }
  for (int i = 0; i < B; ++i) {
    hc::at<int32_t>(h, y.it_tok)[i] = i;
    hc::at<int32_t>(h, y.it_ctx)[i] = i < S ? a->context_lens[i] : 0;
    hc::at<int32_t>(h, y.it_row)[i] = i;
    hc::at<int32_t>(h, y.lidx)[i] = i < L ? a->logits_indices[i] : 0;
  }
  return buf;
}

TEST(CudaStepPlan, DecodeGraphInputsAreByteForByteUnchanged) {
  const int mb_cap = 8;
  for (int S : {1, 2, 3, 5, 8, 16}) {
    SCOPED_TRACE(S);
    Step st(seqs_with(std::vector<int>(size_t(S), 1)), kBs, 4);
    if (S == 5) std::reverse(st.lidx.begin(), st.lidx.end());  // any order of logits rows
    const GraphShape g = hc::graph_shape(&st.a, {true, 16, 3});
    ASSERT_EQ(g.q, 1);
    const Layout y = hc::graph_layout(g, mb_cap);
    std::vector<char> got(y.bytes, 0x11);
    hc::pack_graph_inputs(&st.a, kBs, g, y, got.data());
    EXPECT_EQ(got, legacy_decode_pack(&st.a, kBs, g.B, mb_cap));
  }
}

TEST(CudaStepPlan, VerifyGraphPacksUniformTilesWithPaddingRows) {
  // Sequence 0 verifies K = 4 proposals, 1 decodes, 2 verifies 2; B = 3 of 5 rows.
  const std::vector<int> q{5, 1, 3};
  Step st(seqs_with(q), kBs, 4);
  std::reverse(st.lidx.begin(), st.lidx.end());  // the caller's rows in its own order
  const GraphShape g = hc::graph_shape(&st.a, {true, 16, 4});
  ASSERT_EQ(g, (GraphShape{3, 5}));
  const int mb_cap = 6;
  const Layout y = hc::graph_layout(g, mb_cap);
  EXPECT_EQ(y.T, 15);
  EXPECT_EQ(y.items, 15);
  EXPECT_EQ(y.tiles, 0);
  std::vector<char> buf(y.bytes, 0x7f);
  hc::pack_graph_inputs(&st.a, kBs, g, y, buf.data());
  const char* h = buf.data();
  for (int s = 0; s < g.B; ++s) {
    for (int j = 0; j < g.q; ++j) {
      SCOPED_TRACE(testing::Message() << "sequence " << s << " row " << j);
      const int r = s * g.q + j;
      EXPECT_EQ(hc::at<int32_t>(h, y.it_tok)[r], r);
      EXPECT_EQ(hc::at<int32_t>(h, y.it_row)[r], s);
      if (j < q[size_t(s)]) {  // a real row: the caller's token j of sequence s
        const int t = st.qs[size_t(s)] + j;
        EXPECT_EQ(hc::at<int32_t>(h, y.tok)[r], st.tok[size_t(t)]);
        EXPECT_EQ(hc::at<int32_t>(h, y.pos)[r], st.pos[size_t(t)]);
        EXPECT_EQ(hc::at<int64_t>(h, y.slots)[r], st.slots[size_t(t)]);
        EXPECT_EQ(hc::at<int32_t>(h, y.it_ctx)[r], st.pos[size_t(t)] + 1);  // up to itself
      } else {  // padding: writes no KV, attends to nothing
        EXPECT_EQ(hc::at<int64_t>(h, y.slots)[r], -1);
        EXPECT_EQ(hc::at<int32_t>(h, y.tok)[r], 0);
        EXPECT_EQ(hc::at<int32_t>(h, y.it_ctx)[r], 0);
      }
    }
    const int nblk = (st.ctx[size_t(s)] + kBs - 1) / kBs;
    for (int b = 0; b < mb_cap; ++b)
      EXPECT_EQ(hc::at<int32_t>(h, y.bt)[s * mb_cap + b], b < nblk ? st.bt[size_t(s * 4 + b)] : 0);
  }
  // Logits rows: the packed row of each caller row, in the caller's order;
  // the rows past num_logits point at row 0 and are never copied out.
  for (int i = 0; i < g.rows(); ++i) {
    const int r = hc::at<int32_t>(h, y.lidx)[i];
    if (i >= st.a.num_logits) {
      EXPECT_EQ(r, 0);
      continue;
    }
    const int t = st.lidx[size_t(i)];
    EXPECT_EQ(r, hc::graph_row(&st.a, g, t));
    EXPECT_EQ(hc::at<int32_t>(h, y.tok)[r], st.tok[size_t(t)]) << "logits row " << i;
    EXPECT_EQ(hc::at<int32_t>(h, y.pos)[r], st.pos[size_t(t)]) << "logits row " << i;
  }
  EXPECT_EQ(hc::graph_row(&st.a, g, 0), 0);
  EXPECT_EQ(hc::graph_row(&st.a, g, 4), 4);
  EXPECT_EQ(hc::graph_row(&st.a, g, 5), 5);   // sequence 1's only token
  EXPECT_EQ(hc::graph_row(&st.a, g, 6), 10);  // sequence 2's first token
  EXPECT_EQ(hc::graph_row(&st.a, g, 8), 12);
}

TEST(CudaStepPlan, EagerStepKeepsTheCallersRowsAndTilesVerifies) {
  const std::vector<int> q{5, 1, 3};
  Step st(seqs_with(q), kBs, 4);
  const int q_tile = 2;
  const hc::StepItems w = hc::collect_items(&st.a, q_tile);
  EXPECT_EQ(w.it_tok, (std::vector<int32_t>{5}));
  EXPECT_EQ(w.it_ctx, (std::vector<int32_t>{st.ctx[1]}));
  EXPECT_EQ(w.t_tok0, (std::vector<int32_t>{0, 2, 4, 6, 8}));
  EXPECT_EQ(w.t_nq, (std::vector<int32_t>{2, 2, 1, 2, 1}));
  EXPECT_EQ(w.t_c0, (std::vector<int32_t>{20, 22, 24, 34, 36}));
  EXPECT_EQ(w.t_row, (std::vector<int32_t>{0, 0, 0, 2, 2}));
  const Layout y = hc::eager_layout(&st.a, w);
  std::vector<char> buf(y.bytes, 0x7f);
  hc::pack_eager_inputs(&st.a, w, y, buf.data());
  const char* h = buf.data();
  for (int t = 0; t < st.a.num_tokens; ++t) {
    EXPECT_EQ(hc::at<int32_t>(h, y.tok)[t], st.tok[size_t(t)]);
    EXPECT_EQ(hc::at<int64_t>(h, y.slots)[t], st.slots[size_t(t)]);
  }
  for (int i = 0; i < st.a.num_logits; ++i)
    EXPECT_EQ(hc::at<int32_t>(h, y.lidx)[i], st.lidx[size_t(i)]);
  EXPECT_EQ(std::memcmp(hc::at<int32_t>(h, y.t_c0), w.t_c0.data(), w.t_c0.size() * 4), 0);
}

}  // namespace
