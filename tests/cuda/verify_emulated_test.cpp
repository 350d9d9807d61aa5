// Speculative decoding on the cuda plugin, in host emulation (no GPU): a
// verify step's sequence has q = K + 1 query tokens after a cached context.
//
//  - Attention: the verify graph runs every row as an item of
//    DecodeAttnKernel (step_plan.h); such a row gives bitwise the output of
//    the one-token decode step at that position, both match the cpu kernels,
//    and so does the eager path's PrefillAttnKernel tile.
//  - A mini forward (2 layers, int8 weights so that every GEMM is one of the
//    plugin's own emulatable kernels, bf16 activations and KV cache) run
//    through the kernels in the order model.cpp's Forward launches them, with
//    the packing and graph choice of step_plan.h: greedy speculative decoding
//    emits exactly the tokens of plain greedy decoding, with verify graphs and
//    eagerly; a verify row's logits are bitwise the decode step's whenever the
//    verify graph's GEMMs run the same kernel as decode (<= 8 rows: GEMV).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <random>
#include <vector>

#include "emulated_util.h"
#include "halo/kernels/kernels.h"
#include "kernels/attention.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/emulate.h"
#include "kernels/quant_matmul.cuh"
#include "step_plan.h"

namespace {

namespace hk = halo::kernels;
namespace hc = halo::cuda;
namespace k = halo::cuda::k;
using hc::GraphShape;
using hc::Layout;
using hc::emu::expect_close;
using hc::emu::PagedFixture;
using hc::emu::randn;
using hc::emu::Step;
using hc::emu::StepSeq;

// ------------------------------------------------------------- attention

struct VerifyAttnCase {
  int heads, kv_heads, D, bs;
};
const VerifyAttnCase kVerifyAttnCases[] = {{4, 4, 64, 16}, {4, 2, 64, 32}, {8, 2, 128, 16}, {8, 1, 64, 16}};
constexpr int kPart = 64;  // decode partitions of 64 positions: long contexts split

k::AttnShape attn_shape(const VerifyAttnCase& c) {
  k::AttnShape sh;
  sh.heads = c.heads, sh.kv_heads = c.kv_heads, sh.head_dim = c.D, sh.block_size = c.bs;
  sh.scale = 1.0f / std::sqrt(float(c.D));
  return sh;
}

// DecodeAttnKernel (+ the partition reduction) over `items` items, as
// model.cpp launches it.
void decode_attention(const VerifyAttnCase& c, const PagedFixture& f, const float* q, int q_stride,
                      const int32_t* it_tok, const int32_t* it_ctx, const int32_t* it_row,
                      const int32_t* bt, int bt_stride, int items, int max_parts, float* out) {
  const k::AttnShape sh = attn_shape(c);
  const size_t scratch = size_t(items) * c.heads * max_parts;
  std::vector<float> tmp_out(scratch * c.D), tmp_ml(scratch * 2);
  const int G = c.heads / c.kv_heads, nt = std::max(128, (G + 31) / 32 * 32);
  k::DecodeAttnKernel<float>::Params p{
      sh, q,         q_stride, f.k.data(), f.v.data(), it_tok,         it_ctx,       it_row,
      bt, bt_stride, kPart,    max_parts,  out,        tmp_out.data(), tmp_ml.data()};
  k::emulate<k::DecodeAttnKernel<float>>(p, {items, c.kv_heads, max_parts}, nt,
                                         k::DecodeAttnKernel<float>::smem_floats(sh, kPart, nt));
  k::emulate<k::DecodeReduceKernel<float>>(
      {sh, it_tok, it_ctx, kPart, max_parts, tmp_out.data(), tmp_ml.data(), out},
      {items, c.heads, 1}, 128, 0);
}

// The eager path of the same step (step_plan.h's packing): verifies as
// PrefillAttnKernel tiles, plain decodes as decode items. q and out are in
// the caller's flat rows.
void eager_attention(const VerifyAttnCase& c, const PagedFixture& f, const halo_execute_args* a,
                     const float* q, int q_stride, int max_parts, float* out) {
  const int G = c.heads / c.kv_heads, q_tile = std::max(1, 32 / G), kv_tile = 16;
  const hc::StepItems w = hc::collect_items(a, q_tile);
  const Layout y = hc::eager_layout(a, w);
  std::vector<uint64_t> buf((y.bytes + 7) / 8);
  char* h = reinterpret_cast<char*>(buf.data());
  hc::pack_eager_inputs(a, w, y, h);
  const int32_t* bt = hc::at<int32_t>(h, y.bt);
  if (y.items > 0)
    decode_attention(c, f, q, q_stride, hc::at<int32_t>(h, y.it_tok), hc::at<int32_t>(h, y.it_ctx),
                     hc::at<int32_t>(h, y.it_row), bt, y.mb, y.items, max_parts, out);
  const k::AttnShape sh = attn_shape(c);
  k::PrefillAttnKernel<float>::Params p{sh,
                                        q,
                                        q_stride,
                                        f.k.data(),
                                        f.v.data(),
                                        hc::at<int32_t>(h, y.t_tok0),
                                        hc::at<int32_t>(h, y.t_nq),
                                        hc::at<int32_t>(h, y.t_c0),
                                        hc::at<int32_t>(h, y.t_row),
                                        bt,
                                        y.mb,
                                        q_tile,
                                        kv_tile,
                                        out};
  k::emulate<k::PrefillAttnKernel<float>>(
      p, {y.tiles, c.kv_heads, 1}, 128,
      k::PrefillAttnKernel<float>::smem_floats(sh, q_tile, kv_tile));
}

TEST(CudaVerifyEmulated, VerifyRowsAttendExactlyAsSuccessiveDecodeSteps) {
  // Cached contexts: a single token, around the block boundaries (16, 32) and
  // the partition boundaries (64, 128), and a long one (several partitions).
  const std::vector<int> cached{1, 12, 15, 16, 17, 30, 62, 63, 127, 200};
  for (const VerifyAttnCase& c : kVerifyAttnCases) {
    for (int K : {1, 3, 4}) {
      SCOPED_TRACE(testing::Message() << "heads=" << c.heads << " kv=" << c.kv_heads << " D=" << c.D
                                      << " bs=" << c.bs << " K=" << K);
      const int Q = K + 1, nh = c.heads, D = c.D, S = int(cached.size());
      // Every sequence verifies K proposals but the last two: a plain decode
      // and a verify of fewer proposals (padding rows inside its tile).
      std::vector<int> q(size_t(S), Q), ctx;
      q[size_t(S - 2)] = 1, q[size_t(S - 1)] = std::max(2, Q - 2);
      for (int s = 0; s < S; ++s) ctx.push_back(cached[size_t(s)] + q[size_t(s)]);
      const PagedFixture f(c.kv_heads, D, c.bs, ctx, 50 + uint32_t(K));
      std::vector<StepSeq> seqs;
      for (int s = 0; s < S; ++s)
        seqs.push_back(
            {cached[size_t(s)], std::vector<int32_t>(size_t(q[size_t(s)]), 1), f.blocks(s)});
      Step st(seqs, c.bs, f.max_blocks);
      const GraphShape g = hc::graph_shape(&st.a, {true, 64, K});
      ASSERT_EQ(g.q, Q);
      ASSERT_GT(g.B, S);  // padding sequences too
      const Layout y = hc::graph_layout(g, f.max_blocks);
      std::vector<uint64_t> buf((y.bytes + 7) / 8);
      char* h = reinterpret_cast<char*>(buf.data());
      hc::pack_graph_inputs(&st.a, c.bs, g, y, h);

      const int max_parts = (*std::max_element(ctx.begin(), ctx.end()) + kPart - 1) / kPart;
      const int q_stride = nh * D + 5, row = nh * D;
      const auto qv = randn(size_t(y.T) * q_stride, 60 + uint32_t(K));
      std::vector<float> out(size_t(y.T) * row, NAN);
      decode_attention(c, f, qv.data(), q_stride, hc::at<int32_t>(h, y.it_tok),
                       hc::at<int32_t>(h, y.it_ctx), hc::at<int32_t>(h, y.it_row),
                       hc::at<int32_t>(h, y.bt), y.mb, y.items, max_parts, out.data());

      // The eager path over the caller's flat rows.
      std::vector<float> q_flat(size_t(st.a.num_tokens) * q_stride),
          out_flat(size_t(st.a.num_tokens) * row, NAN);
      for (int t = 0; t < st.a.num_tokens; ++t)
        std::copy_n(&qv[size_t(hc::graph_row(&st.a, g, t)) * q_stride], q_stride,
                    &q_flat[size_t(t) * q_stride]);
      eager_attention(c, f, &st.a, q_flat.data(), q_stride, max_parts, out_flat.data());

      for (int s = 0; s < g.B; ++s)
        for (int j = 0; j < Q; ++j) {
          const int r = s * Q + j;
          const float* got = &out[size_t(r) * row];
          if (s >= S || j >= q[size_t(s)]) {  // padding rows attend to nothing: zeros
            for (int e = 0; e < row; ++e) ASSERT_EQ(got[e], 0.f) << "padding row " << r;
            continue;
          }
          SCOPED_TRACE(testing::Message() << "cached=" << cached[size_t(s)] << " row " << j);
          const int n_ctx = cached[size_t(s)] + j + 1;
          // The decode step at this position: one item, the sequence's own table.
          std::vector<float> one(size_t(row), NAN);
          const int32_t zero = 0;
          decode_attention(c, f, &qv[size_t(r) * q_stride], q_stride, &zero, &n_ctx, &zero,
                           &f.tables[size_t(s) * f.max_blocks], f.max_blocks, 1, max_parts,
                           one.data());
          EXPECT_EQ(std::memcmp(one.data(), got, size_t(row) * 4), 0)
              << "verify row != decode step";
          const auto want = f.reference(&qv[size_t(r) * q_stride], nh, s, n_ctx);
          expect_close(got, want.data(), want.size(), 2e-5f, "verify row vs cpu");
          const int t = st.qs[size_t(s)] + j;
          expect_close(&out_flat[size_t(t) * row], want.data(), want.size(), 2e-5f,
                       "eager verify tile vs cpu");
        }
    }
  }
}

// ------------------------------------------------------------ mini forward

using T16 = k::bf16;
constexpr int kV = 61, kH = 64, kI = 96, kLayers = 2, kNH = 4, kNKV = 2, kD = 16;
constexpr int kQkvN = (kNH + 2 * kNKV) * kD;
constexpr int kBlock = 16, kNumBlocks = 16, kMaxLen = 64, kMbCap = kMaxLen / kBlock;
constexpr int kFwdPart = 32, kMaxParts = kMaxLen / kFwdPart, kMaxGraph = 16;
constexpr float kEps = 1e-5f;

// An int8 projection [N, K], per-channel fp32 scales (the plugin's
// weight-only quantized path: QuantGemvKernel / QuantTiledKernel).
struct QLinear {
  int N = 0, K = 0;
  std::vector<uint8_t> values;
  std::vector<float> scales;
  QLinear(int n, int kk, uint32_t seed) : N(n), K(kk), values(size_t(n) * kk), scales(size_t(n)) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> q(-127, 127);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    for (auto& v : values) v = static_cast<uint8_t>(static_cast<int8_t>(q(rng)));
    for (auto& s : scales) s = u(rng) / (73.f * std::sqrt(float(kk)));
  }
  k::QuantWeight view() const { return {values.data(), scales.data(), nullptr, k::kScaleF32, K}; }
};

std::vector<float> norm_weight(uint32_t seed) {
  auto w = randn(kH, seed, 0.1f);
  for (auto& x : w) x += 1.f;
  return w;
}

struct MiniModel {
  struct Layer {
    QLinear qkv, o, gate_up, down;
    std::vector<float> attn_norm, mlp_norm;
  };
  std::vector<T16> embed;
  std::vector<float> final_norm = norm_weight(2);
  QLinear lm_head{kV, kH, 3};
  std::vector<Layer> layers;
  std::vector<double> inv_freq = std::vector<double>(kD / 2);
  MiniModel() {
    for (float x : randn(size_t(kV) * kH, 1)) embed.push_back(T16{hk::f32_to_bf16(x)});
    for (uint32_t l = 0; l < kLayers; ++l)
      layers.push_back({QLinear(kQkvN, kH, 10 + l), QLinear(kH, kNH * kD, 20 + l),
                        QLinear(2 * kI, kH, 30 + l), QLinear(kH, kI, 40 + l), norm_weight(50 + l),
                        norm_weight(60 + l)});
    hk::RopeParams rp;
    rp.theta = 10000.0;
    hk::rope_inv_freq(rp, kD, inv_freq.data());
  }
};

// Per layer K and V [blocks * block_size, kv heads, D] in bf16.
struct Cache {
  std::vector<std::vector<T16>> k, v;
  Cache() : k(kLayers, std::vector<T16>(size_t(kNumBlocks) * kBlock * kNKV * kD, T16{0})), v(k) {}
};

// One step through the plugin's kernels in host emulation, launched as
// model.cpp's Forward launches them (embedding, then per layer norm, qkv
// GEMM, RoPE + KV write, attention, o GEMM, norm, gate/up GEMM, activation,
// down GEMM; the final norm of the logits rows and lm_head), on inputs packed
// by step_plan.h for the graph graph_shape chooses (or eagerly).
class EmuForward {
 public:
  EmuForward(const MiniModel& m, Cache& kv) : m_(m), kv_(kv) {}

  // The step's logits [num_logits, V]; *taken: the graph replayed (B = 0: eager).
  std::vector<float> run(const halo_execute_args* a, bool graphs, int K, GraphShape* taken) {
    const GraphShape gs = hc::graph_shape(a, {graphs, kMaxGraph, K});
    const hc::StepItems w = gs ? hc::StepItems{} : hc::collect_items(a, 32 / (kNH / kNKV));
    y_ = gs ? hc::graph_layout(gs, kMbCap) : hc::eager_layout(a, w);
    in_.assign((y_.bytes + 7) / 8, 0);
    if (gs)
      hc::pack_graph_inputs(a, kBlock, gs, y_, h());
    else
      hc::pack_eager_inputs(a, w, y_, h());
    const size_t T = size_t(y_.T);
    x_.assign(T * kH, 0.f), delta_.assign(T * kH, 0.f), qkv_.assign(T * kQkvN, 0.f);
    gu_.assign(T * 2 * kI, 0.f), hs_.assign(T * kH, T16{0}), attn_.assign(T * kNH * kD, T16{0});
    act_.assign(T * kI, T16{0});
    for (int l = 0; l < kLayers; ++l) attention(l), mlp(l);
    const int L = a->num_logits, n = gs ? gs.rows() : L;  // eager: one chunk (L < 256)
    logits(n);
    *taken = gs;
    return std::vector<float>(logits_.begin(), logits_.begin() + ptrdiff_t(L) * kV);
  }

 private:
  char* h() { return reinterpret_cast<char*>(in_.data()); }
  template <class P>
  P* in(size_t off) {
    return hc::at<P>(h(), off);
  }

  static void gemm(const T16* x, int M, const QLinear& w, float* out) {
    if (M <= k::kQuantGemvMaxM) {
      using G = k::QuantGemvInt8<T16>;
      k::emulate<G>({x, w.view(), out, M, w.N, w.K}, {k::ceil_div(w.N, 4), 1, 1}, 128,
                    G::smem_floats(128));
    } else {
      using Ti = k::QuantTiledInt8<T16>;
      k::emulate<Ti>({x, w.view(), out, M, w.N, w.K},
                     {k::ceil_div(w.N, Ti::BN), k::ceil_div(M, Ti::BM), 1}, Ti::kThreads,
                     Ti::smem_floats());
    }
  }

  void attention(int l) {
    const MiniModel::Layer& W = m_.layers[size_t(l)];
    const int T = y_.T;
    T16 *kc = kv_.k[size_t(l)].data(), *vc = kv_.v[size_t(l)].data();
    if (l == 0)
      k::emulate<k::EmbedKernel<T16>>({in<int32_t>(y_.tok), m_.embed.data(), x_.data(), kH},
                                      {T, 1, 1}, 256, 0);
    k::emulate<k::RmsNormKernel<T16>>({x_.data(), l == 0 ? nullptr : delta_.data(), nullptr,
                                       W.attn_norm.data(), hs_.data(), kH, kEps, true},
                                      {T, 1, 1}, 256, 256);
    gemm(hs_.data(), T, W.qkv, qkv_.data());
    k::emulate<k::RopeKvKernel<T16>>(
        {qkv_.data(), kQkvN, nullptr, nullptr, nullptr, in<int32_t>(y_.pos), in<int64_t>(y_.slots),
         m_.inv_freq.data(), kc, vc, kNH, kNKV, kD, kEps},
        {T, 1, 1}, 128, size_t(kNH + kNKV));
    k::AttnShape s;
    s.heads = kNH, s.kv_heads = kNKV, s.head_dim = kD, s.block_size = kBlock;
    s.scale = 1.0f / std::sqrt(float(kD));
    if (y_.items > 0) {
      const size_t scratch = size_t(y_.items) * kNH * kMaxParts;
      std::vector<float> tmp_out(scratch * kD), tmp_ml(scratch * 2);
      k::DecodeAttnKernel<T16>::Params p{s,
                                         qkv_.data(),
                                         kQkvN,
                                         kc,
                                         vc,
                                         in<int32_t>(y_.it_tok),
                                         in<int32_t>(y_.it_ctx),
                                         in<int32_t>(y_.it_row),
                                         in<int32_t>(y_.bt),
                                         y_.mb,
                                         kFwdPart,
                                         kMaxParts,
                                         attn_.data(),
                                         tmp_out.data(),
                                         tmp_ml.data()};
      k::emulate<k::DecodeAttnKernel<T16>>(p, {y_.items, kNKV, kMaxParts}, 128,
                                           k::DecodeAttnKernel<T16>::smem_floats(s, kFwdPart, 128));
      k::emulate<k::DecodeReduceKernel<T16>>(
          {s, in<int32_t>(y_.it_tok), in<int32_t>(y_.it_ctx), kFwdPart, kMaxParts, tmp_out.data(),
           tmp_ml.data(), attn_.data()},
          {y_.items, kNH, 1}, 128, 0);
    }
    if (y_.tiles > 0) {
      const int q_tile = 32 / (kNH / kNKV), kv_tile = 16;
      k::PrefillAttnKernel<T16>::Params p{s,
                                          qkv_.data(),
                                          kQkvN,
                                          kc,
                                          vc,
                                          in<int32_t>(y_.t_tok0),
                                          in<int32_t>(y_.t_nq),
                                          in<int32_t>(y_.t_c0),
                                          in<int32_t>(y_.t_row),
                                          in<int32_t>(y_.bt),
                                          y_.mb,
                                          q_tile,
                                          kv_tile,
                                          attn_.data()};
      k::emulate<k::PrefillAttnKernel<T16>>(
          p, {y_.tiles, kNKV, 1}, 128, k::PrefillAttnKernel<T16>::smem_floats(s, q_tile, kv_tile));
    }
    gemm(attn_.data(), T, W.o, delta_.data());
  }

  void mlp(int l) {
    const MiniModel::Layer& W = m_.layers[size_t(l)];
    const int T = y_.T;
    k::emulate<k::RmsNormKernel<T16>>(
        {x_.data(), delta_.data(), nullptr, W.mlp_norm.data(), hs_.data(), kH, kEps, true},
        {T, 1, 1}, 256, 256);
    gemm(hs_.data(), T, W.gate_up, gu_.data());
    const int blocks = std::min((T * kI + 255) / 256, 65535);
    k::emulate<k::GatedActKernel<T16>>({gu_.data(), act_.data(), T, kI, false}, {blocks, 1, 1}, 256,
                                       0);
    gemm(act_.data(), T, W.down, delta_.data());
  }

  void logits(int n) {
    hf_.assign(size_t(n) * kH, T16{0});
    logits_.assign(size_t(n) * kV, 0.f);
    k::emulate<k::RmsNormKernel<T16>>({x_.data(), delta_.data(), in<int32_t>(y_.lidx),
                                       m_.final_norm.data(), hf_.data(), kH, kEps, false},
                                      {n, 1, 1}, 256, 256);
    gemm(hf_.data(), n, m_.lm_head, logits_.data());
  }

  const MiniModel& m_;
  Cache& kv_;
  Layout y_;
  std::vector<uint64_t> in_;
  std::vector<float> x_, delta_, qkv_, gu_, logits_;
  std::vector<T16> hs_, attn_, act_, hf_;
};

int argmax(const float* row) { return int(std::max_element(row, row + kV) - row); }

struct Seq {
  std::vector<int32_t> toks;  // prompt, then generated tokens
  std::vector<int32_t> blocks;
  int prompt = 0;
  int generated() const { return int(toks.size()) - prompt; }
  int cached() const { return int(toks.size()) - 1; }  // the last token's KV is not in yet
};

constexpr int kGenerate = 16;

// Two prompts (13 and 22 tokens, shuffled blocks) prefilled in one step, then
// plain greedy decoding (decode graphs) of kGenerate tokens each; the logits of
// every decode row by (sequence, position).
struct Plain {
  MiniModel m;
  Cache kv_after_prefill;
  std::vector<Seq> after_prefill;
  std::vector<Seq> done;
  std::map<std::pair<int, int>, std::vector<float>> logits;

  Plain() {
    Cache kv;
    std::vector<Seq> seqs(2);
    seqs[0].blocks = {5, 2, 9, 11}, seqs[1].blocks = {7, 0, 14, 3};
    const std::vector<int> prompt{13, 22};
    for (size_t s = 0; s < 2; ++s) {
      std::mt19937 rng(uint32_t(70 + s));
      for (int i = 0; i < prompt[s]; ++i) seqs[s].toks.push_back(int32_t(rng() % kV));
      seqs[s].prompt = prompt[s];
    }
    EmuForward f(m, kv);
    GraphShape g;
    Step pre({{0, seqs[0].toks, seqs[0].blocks, false}, {0, seqs[1].toks, seqs[1].blocks, false}},
             kBlock, kMbCap);
    const auto first = f.run(&pre.a, true, 4, &g);
    EXPECT_FALSE(g) << "a prefill runs eagerly";
    for (size_t s = 0; s < 2; ++s) seqs[s].toks.push_back(argmax(&first[s * kV]));
    kv_after_prefill = kv;
    after_prefill = seqs;
    for (int n = 1; n < kGenerate; ++n) {
      std::vector<StepSeq> step;
      for (const Seq& q : seqs) step.push_back({q.cached(), {q.toks.back()}, q.blocks, true});
      Step st(step, kBlock, kMbCap);
      const auto out = f.run(&st.a, true, 4, &g);
      EXPECT_EQ(g, (GraphShape{2, 1})) << "a decode step replays the B = 2 decode graph";
      for (size_t s = 0; s < 2; ++s) {
        logits[{int(s), seqs[s].cached()}].assign(&out[s * kV], &out[(s + 1) * kV]);
        seqs[s].toks.push_back(argmax(&out[s * kV]));
      }
    }
    done = seqs;
  }
};

const Plain& plain() {
  static const Plain p;
  return p;
}

// What a speculative run saw.
struct SpecStats {
  int verify_graphs = 0, accepted = 0, rejected = 0, bitwise_rows = 0, close_rows = 0;
  float worst = 0.f;  // largest |verify - decode| / max(1, |decode|) of the rows not bitwise
};

// Greedy speculative decoding of sequences `which` from the prefilled state:
// proposals are plain greedy's next tokens, some corrupted, some sequences
// proposing fewer; accepted by the greedy rule (a proposal stays while it is
// the argmax of the row before it; the first other row's argmax is emitted).
// Compares every verify row whose inputs equal plain decoding's with the
// decode step's logits. Returns the sequences' tokens.
std::vector<Seq> speculate(const std::vector<int>& which, bool graphs, int K, SpecStats* st) {
  const Plain& p = plain();
  Cache kv = p.kv_after_prefill;
  std::vector<Seq> seqs = p.after_prefill;
  EmuForward f(p.m, kv);
  bool same_kernels = true;  // every step so far ran decode's kernels (so the KV is decode's too)
  for (int round = 0;; ++round) {
    std::vector<StepSeq> step;
    std::vector<int> active;
    for (int s : which) {
      Seq& q = seqs[size_t(s)];
      if (q.generated() >= kGenerate) continue;
      const int n_want = s == 1 ? K - round % 2 : K;  // sequence 1 proposes fewer every other round
      const int n_prop = std::min(n_want, kGenerate - q.generated() - 1);
      std::vector<int32_t> toks{q.toks.back()};
      for (int j = 0; j < n_prop; ++j) {
        int32_t t = p.done[size_t(s)].toks[size_t(q.toks.size()) + size_t(j)];
        if ((round * 7 + j * 3 + s * 5) % 6 == 0) t = (t + 7) % kV;  // a wrong proposal
        toks.push_back(t);
      }
      step.push_back({q.cached(), toks, q.blocks, true});
      active.push_back(s);
    }
    if (active.empty()) break;
    Step stp(step, kBlock, kMbCap);
    GraphShape g;
    const auto out = f.run(&stp.a, graphs, K, &g);
    EXPECT_EQ(bool(g), graphs) << "round " << round;
    if (g && g.q == K + 1) ++st->verify_graphs;
    same_kernels = same_kernels && g && g.rows() <= k::kQuantGemvMaxM;  // GEMV as in decode
    for (size_t i = 0; i < active.size(); ++i) {
      Seq& q = seqs[size_t(active[i])];
      const int row0 = stp.qs[i], n_prop = int(step[i].tokens.size()) - 1, c0 = q.cached();
      int j = 0;
      for (;; ++j) {  // rows 0..j have plain decoding's inputs
        const float* r = &out[size_t(row0 + j) * kV];
        const auto want = p.logits.find({active[i], c0 + j});
        if (want != p.logits.end()) {
          if (same_kernels) {
            EXPECT_EQ(std::memcmp(r, want->second.data(), kV * 4), 0) << "round " << round;
            ++st->bitwise_rows;
          } else {
            for (int v = 0; v < kV; ++v)
              st->worst =
                  std::max(st->worst, std::fabs(r[v] - want->second[size_t(v)]) /
                                          std::max(1.f, std::fabs(want->second[size_t(v)])));
            ++st->close_rows;
          }
        }
        if (j == n_prop || argmax(r) != step[i].tokens[size_t(j) + 1]) break;
        ++st->accepted;
      }
      if (j < n_prop) ++st->rejected;
      for (int a = 1; a <= j; ++a) q.toks.push_back(step[i].tokens[size_t(a)]);
      q.toks.push_back(argmax(&out[size_t(row0 + j) * kV]));
    }
  }
  return seqs;
}

TEST(CudaVerifyEmulated, GreedySpeculativeDecodingEmitsPlainGreedyTokens) {
  const Plain& p = plain();
  for (int K : {1, 4}) {
    for (const std::vector<int>& which : {std::vector<int>{0, 1}, std::vector<int>{0}}) {
      for (bool graphs : {true, false}) {
        SCOPED_TRACE(testing::Message() << "K=" << K << " sequences=" << which.size()
                                        << (graphs ? " verify graphs" : " eager"));
        SpecStats st;
        const auto seqs = speculate(which, graphs, K, &st);
        for (int s : which)
          EXPECT_EQ(seqs[size_t(s)].toks, p.done[size_t(s)].toks) << "sequence " << s;
        EXPECT_GT(st.accepted, 0);
        EXPECT_GT(st.rejected, 0);
        EXPECT_EQ(st.verify_graphs > 0, graphs);
        // Bitwise where the verify graph runs decode's kernels: attention
        // always (DecodeAttnKernel), GEMMs up to 8 rows (GEMV).
        const bool gemv = graphs && int(which.size()) * (K + 1) <= k::kQuantGemvMaxM;
        if (gemv) {
          EXPECT_GT(st.bitwise_rows, 0);
        } else {
          EXPECT_GT(st.close_rows, 0);
        }
        // Otherwise (tiled GEMM, or eager prefill tiles) the low bits may
        // differ (measured: at most 6e-7 here, bf16 activations absorb most).
        EXPECT_LE(st.worst, 5e-3f);
        std::printf(
            "K=%d seqs=%zu %s: accepted %d rejected %d, rows bitwise %d, close %d (worst %.2e)\n",
            K, which.size(), graphs ? "graphs" : "eager", st.accepted, st.rejected, st.bitwise_rows,
            st.close_rows, double(st.worst));
      }
    }
  }
}

}  // namespace
