// Host emulation of the CUDA plugin's kernels (plugins/cuda/src/kernels):
// the same step() code the GPU runs, executed block by block and phase by
// phase (threads shuffled within a phase), compared with the CPU plugin's
// kernels (halo_kernels) on random inputs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "emulated_util.h"
#include "halo/kernels/kernels.h"
#include "kernels/attention.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/emulate.h"

namespace hk = halo::kernels;
namespace k = halo::cuda::k;

namespace {

using halo::cuda::emu::expect_close;
using halo::cuda::emu::PagedFixture;
using halo::cuda::emu::randn;

// ------------------------------------------------------------- embedding

TEST(CudaKernelsEmulated, EmbeddingGatherBf16) {
  const int V = 37, H = 300, T = 5;
  const auto f = randn(size_t{V} * H, 1);
  std::vector<k::bf16> table(f.size());
  for (size_t i = 0; i < f.size(); ++i) table[i] = k::bf16{hk::f32_to_bf16(f[i])};
  const std::vector<int32_t> tok{3, 0, 36, 3, 17};
  std::vector<float> x(size_t{T} * H, -1.f), want(H);
  k::emulate<k::EmbedKernel<k::bf16>>({tok.data(), table.data(), x.data(), H}, {T, 1, 1}, 128, 0);
  for (int t = 0; t < T; ++t) {
    hk::to_f32(&table[size_t(tok[t]) * H], hk::DType::BF16, want.data(), H);
    expect_close(&x[size_t(t) * H], want.data(), H, 0.f, "embedding");
  }
}

// ---------------------------------------------------------------- rmsnorm

TEST(CudaKernelsEmulated, RmsNormFusedResidual) {
  for (int H : {64, 333, 4096}) {
    SCOPED_TRACE(H);
    const int T = 4;
    auto x = randn(size_t{T} * H, 2), d = randn(size_t{T} * H, 3), w = randn(H, 4);
    auto x0 = x;
    std::vector<float> out(size_t{T} * H);
    k::emulate<k::RmsNormKernel<float>>({x.data(), d.data(), nullptr, w.data(), out.data(), H, 1e-5f, true},
                                        {T, 1, 1}, 256, 256);
    std::vector<float> want(H);
    for (int t = 0; t < T; ++t) {
      std::vector<float> v(x0.begin() + t * H, x0.begin() + (t + 1) * H);
      hk::add_inplace(v.data(), &d[size_t(t) * H], H);
      expect_close(&x[size_t(t) * H], v.data(), H, 0.f, "residual");
      hk::rmsnorm(v.data(), w.data(), H, 1e-5f, want.data());
      expect_close(&out[size_t(t) * H], want.data(), H, 1e-5f, "rmsnorm");
    }
    // Rows gathered (the final norm of logits rows): residual untouched.
    const std::vector<int32_t> rows{3, 1, 3};
    auto xr = x;
    std::vector<k::bf16> ob(rows.size() * H);
    k::emulate<k::RmsNormKernel<k::bf16>>({xr.data(), d.data(), rows.data(), w.data(), ob.data(), H, 1e-6f, false},
                                          {3, 1, 1}, 128, 128);
    EXPECT_EQ(xr, x);
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<float> v(x.begin() + rows[i] * H, x.begin() + (rows[i] + 1) * H), got(H);
      hk::add_inplace(v.data(), &d[size_t(rows[i]) * H], H);
      hk::rmsnorm(v.data(), w.data(), H, 1e-6f, want.data());
      hk::to_f32(&ob[i * H], hk::DType::BF16, got.data(), H);
      expect_close(got.data(), want.data(), H, 8e-3f, "rmsnorm rows bf16");
    }
  }
}

// ------------------------------------------------------- rope + KV write

struct RopeCase {
  int heads, kv_heads, D;
  hk::RopeScaling scaling;
  bool bias, qk_norm;
};

TEST(CudaKernelsEmulated, RopeFusedWithKvWrite) {
  const RopeCase cases[] = {{4, 4, 64, hk::RopeScaling::None, false, false},
                            {8, 2, 128, hk::RopeScaling::Llama3, true, false},
                            {8, 1, 64, hk::RopeScaling::Linear, false, true},
                            {16, 2, 128, hk::RopeScaling::Llama3, true, true}};
  for (const RopeCase& c : cases) {
    SCOPED_TRACE(testing::Message() << c.heads << "/" << c.kv_heads << " D=" << c.D << " scaling="
                                    << static_cast<int>(c.scaling) << " bias=" << c.bias << " qk_norm=" << c.qk_norm);
    hk::RopeParams rp;
    rp.theta = 500000.0;
    rp.scaling = c.scaling;
    rp.factor = 8.0;
    rp.low_freq_factor = 1.0;
    rp.high_freq_factor = 4.0;
    rp.original_max_position = 64.0;  // small so that all three llama3 bands occur
    std::vector<double> inv(size_t(c.D / 2));
    hk::rope_inv_freq(rp, size_t(c.D), inv.data());
    const int T = 6, nq = c.heads * c.D, nkv = c.kv_heads * c.D, stride = nq + 2 * nkv;
    const std::vector<int32_t> pos{0, 1, 7, 63, 64, 5000};
    const std::vector<int64_t> slots{5, -1, 0, 17, 2, 9};
    auto qkv = randn(size_t{T} * stride, 7);
    const auto qkv0 = qkv;
    const auto bias = randn(stride, 8, 0.3f);
    const auto qn = randn(c.D, 9), kn = randn(c.D, 10);
    const int num_slots = 20;
    std::vector<float> kc(size_t{num_slots} * nkv, 42.f), vc(size_t{num_slots} * nkv, 42.f);
    k::RopeKvKernel<float>::Params p{qkv.data(), stride, c.bias ? bias.data() : nullptr,
                                     c.qk_norm ? qn.data() : nullptr, c.qk_norm ? kn.data() : nullptr,
                                     pos.data(), slots.data(), inv.data(), kc.data(), vc.data(),
                                     c.heads, c.kv_heads, c.D, 1e-6f};
    k::emulate<k::RopeKvKernel<float>>(p, {T, 1, 1}, 128, size_t(c.heads + c.kv_heads));
    std::vector<float> cs(size_t(c.D / 2)), sn(size_t(c.D / 2));
    for (int t = 0; t < T; ++t) {
      std::vector<float> r(qkv0.begin() + t * stride, qkv0.begin() + (t + 1) * stride);
      if (c.bias) hk::add_inplace(r.data(), bias.data(), size_t(stride));
      if (c.qk_norm) {
        for (int h = 0; h < c.heads; ++h) hk::rmsnorm(&r[size_t(h) * c.D], qn.data(), c.D, 1e-6f, &r[size_t(h) * c.D]);
        for (int h = 0; h < c.kv_heads; ++h)
          hk::rmsnorm(&r[size_t(nq + h * c.D)], kn.data(), c.D, 1e-6f, &r[size_t(nq + h * c.D)]);
      }
      hk::rope_cos_sin(pos[t], inv.data(), size_t(c.D / 2), cs.data(), sn.data());
      hk::rope_neox(r.data(), c.heads, c.D, cs.data(), sn.data());
      hk::rope_neox(r.data() + nq, c.kv_heads, c.D, cs.data(), sn.data());
      expect_close(&qkv[size_t(t) * stride], r.data(), nq, 2e-5f, "q");
      if (slots[t] >= 0) {
        expect_close(&kc[size_t(slots[t]) * nkv], r.data() + nq, nkv, 2e-5f, "k cache");
        expect_close(&vc[size_t(slots[t]) * nkv], r.data() + nq + nkv, nkv, 0.f, "v cache");
      }
    }
    // Slots never written keep their values (slot -1 writes nothing).
    for (int s : {1, 3, 19}) EXPECT_EQ(kc[size_t(s) * nkv], 42.f);
  }
}

// ------------------------------------------------------- gated activation

TEST(CudaKernelsEmulated, SiluAndGeluMul) {
  const int T = 3, I = 1000;
  const auto gu = randn(size_t{T} * 2 * I, 11, 3.f);
  for (bool gelu : {false, true}) {
    std::vector<float> out(size_t{T} * I), want(I);
    k::emulate<k::GatedActKernel<float>>({gu.data(), out.data(), T, I, gelu}, {5, 1, 1}, 128, 0);
    for (int t = 0; t < T; ++t) {
      const float* g = &gu[size_t(t) * 2 * I];
      (gelu ? hk::gelu_tanh_mul : hk::silu_mul)(g, g + I, want.data(), I);
      expect_close(&out[size_t(t) * I], want.data(), I, 1e-5f, gelu ? "gelu_mul" : "silu_mul");
    }
  }
}

// -------------------------------------------------------------- attention

struct AttnCase {
  int heads, kv_heads, D, bs;
};
const AttnCase kAttnCases[] = {{4, 4, 64, 16}, {8, 2, 128, 32}, {8, 1, 64, 16}, {16, 2, 128, 16}, {4, 1, 128, 32}};

TEST(CudaKernelsEmulated, DecodeAttentionSplitContext) {
  // Contexts: empty, single token, block boundaries, and several partitions
  // (part_size 64 here, so 200 and 300 take the split + reduction path).
  const std::vector<int> ctx{0, 1, 15, 16, 17, 33, 64, 65, 200, 300};
  for (const AttnCase& c : kAttnCases) {
    SCOPED_TRACE(testing::Message() << "heads=" << c.heads << " kv=" << c.kv_heads << " D=" << c.D << " bs=" << c.bs);
    const PagedFixture f(c.kv_heads, c.D, c.bs, ctx, 20);
    const int S = int(ctx.size()), P = 64, max_parts = 300 / P + 1, nh = c.heads;
    // Items: sequence s's query is flat token S-1-s (tokens need not follow sequences).
    std::vector<int32_t> it_tok(S), it_ctx(ctx.begin(), ctx.end()), it_row(S);
    for (int s = 0; s < S; ++s) it_tok[s] = S - 1 - s, it_row[s] = s;
    const int q_stride = nh * c.D + 7;  // rows of a wider qkv buffer
    const auto q = randn(size_t(S) * q_stride, 21);
    std::vector<float> out(size_t(S) * nh * c.D, NAN);
    std::vector<float> tmp_out(size_t(S) * nh * max_parts * c.D), tmp_ml(size_t(S) * nh * max_parts * 2);
    k::AttnShape sh;
    sh.heads = nh, sh.kv_heads = c.kv_heads, sh.head_dim = c.D, sh.block_size = c.bs;
    sh.scale = 1.0f / std::sqrt(float(c.D));
    const int nt = 128;
    k::DecodeAttnKernel<float>::Params p{sh, q.data(), q_stride, f.k.data(), f.v.data(), it_tok.data(), it_ctx.data(),
                                         it_row.data(), f.tables.data(), f.max_blocks, P, max_parts, out.data(),
                                         tmp_out.data(), tmp_ml.data()};
    k::emulate<k::DecodeAttnKernel<float>>(p, {S, c.kv_heads, max_parts}, nt,
                                           k::DecodeAttnKernel<float>::smem_floats(sh, P, nt));
    k::emulate<k::DecodeReduceKernel<float>>({sh, it_tok.data(), it_ctx.data(), P, max_parts, tmp_out.data(),
                                              tmp_ml.data(), out.data()},
                                             {S, nh, 1}, 64, 0);
    for (int s = 0; s < S; ++s) {
      SCOPED_TRACE(testing::Message() << "ctx=" << ctx[s]);
      const auto want = f.reference(&q[size_t(it_tok[s]) * q_stride], nh, s, ctx[s]);
      expect_close(&out[size_t(it_tok[s]) * nh * c.D], want.data(), want.size(), 2e-5f, "decode attention");
    }
  }
}

TEST(CudaKernelsEmulated, DecodeAttentionBf16Cache) {
  const std::vector<int> ctx{1, 40, 130};
  const int nh = 8, kvh = 2, D = 64, bs = 16, P = 64, max_parts = 3;
  const PagedFixture f32(kvh, D, bs, ctx, 30);
  // The same cache rounded to bf16; the reference reads the rounded values.
  PagedFixture fr = f32;
  std::vector<k::bf16> kb(f32.k.size()), vb(f32.v.size());
  for (size_t i = 0; i < kb.size(); ++i) {
    kb[i] = k::bf16{hk::f32_to_bf16(f32.k[i])}, vb[i] = k::bf16{hk::f32_to_bf16(f32.v[i])};
    fr.k[i] = hk::bf16_to_f32(kb[i].bits), fr.v[i] = hk::bf16_to_f32(vb[i].bits);
  }
  const int S = 3;
  std::vector<int32_t> it_tok{0, 1, 2}, it_ctx(ctx.begin(), ctx.end()), it_row{0, 1, 2};
  const auto q = randn(size_t(S) * nh * D, 31);
  std::vector<k::bf16> out(size_t(S) * nh * D);
  std::vector<float> tmp_out(size_t(S) * nh * max_parts * D), tmp_ml(size_t(S) * nh * max_parts * 2);
  k::AttnShape sh;
  sh.heads = nh, sh.kv_heads = kvh, sh.head_dim = D, sh.block_size = bs, sh.scale = 1.0f / std::sqrt(float(D));
  k::DecodeAttnKernel<k::bf16>::Params p{sh, q.data(), nh * D, kb.data(), vb.data(), it_tok.data(), it_ctx.data(),
                                         it_row.data(), fr.tables.data(), fr.max_blocks, P, max_parts, out.data(),
                                         tmp_out.data(), tmp_ml.data()};
  k::emulate<k::DecodeAttnKernel<k::bf16>>(p, {S, kvh, max_parts}, 128,
                                           k::DecodeAttnKernel<k::bf16>::smem_floats(sh, P, 128));
  k::emulate<k::DecodeReduceKernel<k::bf16>>({sh, it_tok.data(), it_ctx.data(), P, max_parts, tmp_out.data(),
                                              tmp_ml.data(), out.data()},
                                             {S, nh, 1}, 32, 0);
  for (int s = 0; s < S; ++s) {
    const auto want = fr.reference(&q[size_t(s) * nh * D], nh, s, ctx[s]);
    std::vector<float> got(want.size());
    hk::to_f32(&out[size_t(s) * nh * D], hk::DType::BF16, got.data(), got.size());
    expect_close(got.data(), want.data(), got.size(), 8e-3f, "decode attention bf16");
  }
}

TEST(CudaKernelsEmulated, PrefillAttentionChunkedCausal) {
  // (cached context, new tokens): whole prompts, chunks after a cached
  // prefix (crossing block boundaries), a one-token chunk and an empty one.
  const std::vector<std::pair<int, int>> seqs{{0, 5}, {17, 20}, {40, 33}, {0, 1}, {3, 0}, {31, 2}};
  for (const AttnCase& c : kAttnCases) {
    SCOPED_TRACE(testing::Message() << "heads=" << c.heads << " kv=" << c.kv_heads << " D=" << c.D << " bs=" << c.bs);
    std::vector<int> ctx;
    for (auto [cached, n] : seqs) ctx.push_back(cached + n);
    const PagedFixture f(c.kv_heads, c.D, c.bs, ctx, 40);
    const int G = c.heads / c.kv_heads, q_tile = std::max(1, 32 / G) / 2 + 1, kv_tile = 16, nh = c.heads;
    std::vector<int32_t> t_tok0, t_nq, t_c0, t_row;
    int T = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto [cached, n] = seqs[s];
      for (int i = 0; i < n; i += q_tile) {
        t_tok0.push_back(T + i), t_nq.push_back(std::min(q_tile, n - i)), t_c0.push_back(cached + i);
        t_row.push_back(int32_t(s));
      }
      T += n;
    }
    const int q_stride = nh * c.D;
    const auto q = randn(size_t(T) * q_stride, 41);
    std::vector<float> out(size_t(T) * nh * c.D, NAN);
    k::AttnShape sh;
    sh.heads = nh, sh.kv_heads = c.kv_heads, sh.head_dim = c.D, sh.block_size = c.bs;
    sh.scale = 1.0f / std::sqrt(float(c.D));
    k::PrefillAttnKernel<float>::Params p{sh, q.data(), q_stride, f.k.data(), f.v.data(), t_tok0.data(),
                                          t_nq.data(), t_c0.data(), t_row.data(), f.tables.data(), f.max_blocks,
                                          q_tile, kv_tile, out.data()};
    k::emulate<k::PrefillAttnKernel<float>>(p, {int(t_tok0.size()), c.kv_heads, 1}, 128,
                                            k::PrefillAttnKernel<float>::smem_floats(sh, q_tile, kv_tile));
    int t = 0;
    for (size_t s = 0; s < seqs.size(); ++s) {
      const auto [cached, n] = seqs[s];
      for (int i = 0; i < n; ++i, ++t) {
        SCOPED_TRACE(testing::Message() << "seq " << s << " query " << i);
        const auto want = f.reference(&q[size_t(t) * q_stride], nh, int(s), cached + i + 1);
        expect_close(&out[size_t(t) * nh * c.D], want.data(), want.size(), 2e-5f, "prefill attention");
      }
    }
  }
}

// ------------------------------------------------------------ block copies

TEST(CudaKernelsEmulated, CopyBlocks) {
  const size_t block_words = 24, blocks = 6, arrays = 4;
  std::vector<uint32_t> cache(arrays * blocks * block_words);
  std::iota(cache.begin(), cache.end(), 0u);
  const auto before = cache;
  const std::vector<int32_t> src{0, 4, 2}, dst{3, 1, 2};
  k::emulate<k::CopyBlocksKernel>({cache.data(), src.data(), dst.data(), blocks * block_words, block_words},
                                  {3, int(arrays), 1}, 16, 0);
  for (size_t a = 0; a < arrays; ++a)
    for (size_t b = 0; b < blocks; ++b) {
      size_t from = b;
      for (size_t i = 0; i < src.size(); ++i)
        if (size_t(dst[i]) == b) from = size_t(src[i]);
      for (size_t w = 0; w < block_words; ++w)
        ASSERT_EQ(cache[(a * blocks + b) * block_words + w], before[(a * blocks + from) * block_words + w]);
    }
}

// The emulator itself: a divergent barrier is reported, not silently run.
struct DivergentKernel {
  struct Params {};
  struct Regs {};
  static int step(int phase, const Params&, const k::Ctx& c, Regs&) { return phase == 0 && c.tid == 3 ? 1 : -1; }
};
TEST(CudaKernelsEmulated, EmulatorDetectsDivergentBarrier) {
  EXPECT_THROW(k::emulate<DivergentKernel>({}, {1, 1, 1}, 8, 0), std::runtime_error);
}

}  // namespace
