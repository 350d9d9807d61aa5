// The simulated clock follows the cost model (docs/rbln.md): estimates of a
// 1B-shape model built from its spec alone (no weights), through the driver's
// zeRblnGraphEstimate with the in-tree device profile.
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "rbln_sim/ze_rbln_ext.h"

namespace {

class CostModel : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ze_rbln_sim_desc_t d{};
    d.profile_path = HALO_SOURCE_DIR "/configs/rbln-atom.yaml";
    d.faults = "";
    d.host_threads = 1;
    ASSERT_EQ(zeRblnSimConfigure(&d), ZE_RESULT_SUCCESS) << zeRblnGetLastErrorMessage();
    ASSERT_EQ(zeInit(0), ZE_RESULT_SUCCESS);
    ASSERT_EQ(zeRblnSimGetProperties(&props_), ZE_RESULT_SUCCESS);
  }

  // Llama-3.2-1B's shape: 16 layers, hidden 2048, 32/8 heads, intermediate 8192, vocab 128256, bf16.
  ze_rbln_decoder_desc_t llama_1b() const {
    ze_rbln_decoder_desc_t m{};
    m.vocab = 128256;
    m.hidden = 2048;
    m.intermediate = 8192;
    m.layers = 16;
    m.heads = 32;
    m.kv_heads = 8;
    m.head_dim = 64;
    m.rms_norm_eps = 1e-5f;
    m.weight_dtype = ZE_RBLN_DTYPE_BF16;
    return m;
  }

  // All projections and the lm_head int8 (halo compile --quantization int8).
  static constexpr uint32_t kAllInt8 = (1u << ZE_RBLN_L_Q) | (1u << ZE_RBLN_L_K) |
                                       (1u << ZE_RBLN_L_V) | (1u << ZE_RBLN_L_O) |
                                       (1u << ZE_RBLN_L_GATE) | (1u << ZE_RBLN_L_UP) |
                                       (1u << ZE_RBLN_L_DOWN) | ZE_RBLN_QUANT_LM_HEAD;

  ze_rbln_cost_t decode(uint32_t batch, uint32_t tp, int32_t ctx, uint32_t quant_mask = 0,
                        uint32_t quant_group = 0) const {
    ze_rbln_decoder_desc_t m = llama_1b();
    m.quant_mask = quant_mask;
    m.quant_group = quant_group;
    ze_rbln_graph_desc_t g{};
    g.kind = ZE_RBLN_GRAPH_DECODE;
    g.rows = batch;
    g.max_seq_len = 4096;
    g.model = &m;
    g.num_devices = tp;
    std::vector<int32_t> ctxs(batch, ctx);
    ze_rbln_cost_t c{};
    EXPECT_EQ(zeRblnGraphEstimate(&g, ctxs.data(), batch, &c), ZE_RESULT_SUCCESS) << zeRblnGetLastErrorMessage();
    return c;
  }

  // TinyLlama-1.1B's shape: 22 layers, hidden 2048, 32/4 heads, intermediate 5632, vocab 32000.
  ze_rbln_decoder_desc_t tinyllama() const {
    ze_rbln_decoder_desc_t m = llama_1b();
    m.vocab = 32000;
    m.intermediate = 5632;
    m.layers = 22;
    m.kv_heads = 4;
    return m;
  }

  // A decode (k = 0) or a verify of k proposed tokens per sequence (halo compile
  // --num-speculative-tokens k): batch sequences of k + 1 rows, the last row of each at
  // context ctx, logits for every row.
  static ze_rbln_cost_t step(const ze_rbln_decoder_desc_t& m, uint32_t batch, uint32_t k,
                             int32_t ctx) {
    ze_rbln_graph_desc_t g{};
    g.kind = k == 0 ? ZE_RBLN_GRAPH_DECODE : ZE_RBLN_GRAPH_VERIFY;
    g.rows = batch * (k + 1);
    g.tokens_per_seq = k + 1;
    g.max_seq_len = 4096;
    g.model = &m;
    g.num_devices = 1;
    std::vector<int32_t> ctxs(g.rows);
    for (uint32_t r = 0; r < g.rows; ++r) ctxs[r] = ctx - int32_t(k - r % (k + 1));
    ze_rbln_cost_t c{};
    EXPECT_EQ(zeRblnGraphEstimate(&g, ctxs.data(), g.rows, &c), ZE_RESULT_SUCCESS)
        << zeRblnGetLastErrorMessage();
    return c;
  }

  static ze_rbln_sim_properties_t props_;
};
ze_rbln_sim_properties_t CostModel::props_{};

TEST_F(CostModel, ProfileIsTheDocumentedAtom) {
  EXPECT_EQ(props_.num_chips, 4u);
  EXPECT_DOUBLE_EQ(props_.peak_flops, 32e12);
  EXPECT_DOUBLE_EQ(props_.dram_bandwidth, 256e9);
  EXPECT_EQ(props_.memory_per_chip, (16ull << 30) - (288ull << 20));
  EXPECT_EQ(props_.prefill_chunk_size, 128u);
}

TEST_F(CostModel, DoublingAMemoryBoundDecodeBatchCostsFarLessThanTwice) {
  for (uint32_t b : {1u, 2u, 4u, 8u}) {
    const ze_rbln_cost_t one = decode(b, 1, 512), two = decode(2 * b, 1, 512);
    EXPECT_GT(one.memory_s, one.compute_s) << "batch " << b << " should be memory bound";
    EXPECT_GT(two.total_s, one.total_s);
    EXPECT_LT(two.total_s / one.total_s, 1.2) << "batch " << b << " -> " << 2 * b;
  }
  // One bf16 pass over the 1.236B weights read per token (16 layers + the lm_head; the embedding table
  // only gives one row) at 256 GB/s x 0.85, plus the KV cache and the launch: ~11.5 ms.
  const ze_rbln_cost_t b1 = decode(1, 1, 512);
  EXPECT_NEAR(b1.total_s, 1.236e9 * 2 / (256e9 * 0.85), 0.5e-3);
}

TEST_F(CostModel, TensorParallel4IsFasterByTheModeledAmount) {
  const ze_rbln_cost_t t1 = decode(1, 1, 1024), t4 = decode(1, 4, 1024);
  EXPECT_EQ(t1.link_s, 0.0);
  // Two ring all-reduces per layer of hidden*2 bytes plus the logits all-gather.
  const double n = 4, lat = props_.link_latency_s, bw = props_.link_bandwidth;
  const double allreduce = 2 * (n - 1) / n * 2048 * 2 / bw + 2 * (n - 1) * lat;
  const double gather = (n - 1) / n * 128256 * 4 / bw + (n - 1) * lat;
  EXPECT_NEAR(t4.link_s, 32 * allreduce + gather, 1e-9);
  // The on-chip part shrinks 4x: every chip reads a quarter of the sharded weights.
  const double chip1 = t1.compute_s + t1.memory_s, chip4 = t4.compute_s + t4.memory_s;
  EXPECT_NEAR(chip4, chip1 / 4, chip1 * 0.01);
  const double speedup = t1.total_s / t4.total_s;
  std::printf("TP1 %.3f ms, TP4 %.3f ms (link %.3f ms), speed-up %.2fx\n", 1e3 * t1.total_s, 1e3 * t4.total_s, 1e3 * t4.link_s, speedup);
  EXPECT_NEAR(speedup, t1.total_s / (chip1 / 4 + t4.link_s + t4.overhead_s), 0.1);
  EXPECT_GT(speedup, 3.0);
  EXPECT_LT(speedup, 4.0);
}

TEST_F(CostModel, Int8DecodeReadsHalfTheBytes) {
  // Per output channel: 1 byte per weight plus one fp32 scale per row.
  const ze_rbln_cost_t bf = decode(1, 1, 512), q8 = decode(1, 1, 512, kAllInt8);
  const double rows = 16 * (2048 + 512 + 512 + 2048 + 2 * 8192 + 2048) + 128256;
  const double saved = 1.236e9 - rows * 4;  // bf16 bytes - (int8 bytes + scales), sharded matrices
  EXPECT_NEAR(bf.dram_bytes - q8.dram_bytes, saved, 0.002e9);
  EXPECT_GT(q8.memory_s, q8.compute_s) << "an int8 decode is still memory bound";
  const double ratio = bf.total_s / q8.total_s;
  std::printf("decode b1 ctx 512: bf16 %.3f ms, int8 %.3f ms, %.2fx\n", 1e3 * bf.total_s,
              1e3 * q8.total_s, ratio);
  EXPECT_GT(ratio, 1.85);  // ~2x on the weights; the KV cache and the launch do not shrink
  EXPECT_LT(ratio, 2.0);
  // Groups of 128: 16 scales per 2048 inputs, still ~2x.
  const ze_rbln_cost_t g128 = decode(1, 1, 512, kAllInt8, 128);
  EXPECT_GT(g128.dram_bytes, q8.dram_bytes);
  EXPECT_GT(bf.total_s / g128.total_s, 1.8);
  // At TP 4 each chip reads a quarter of the int8 weights; the link time is the same.
  const ze_rbln_cost_t bf4 = decode(1, 4, 512), q84 = decode(1, 4, 512, kAllInt8);
  EXPECT_NEAR(q84.link_s, bf4.link_s, 1e-12);
  EXPECT_LT(q84.total_s, bf4.total_s * 0.6);
}

TEST_F(CostModel, PrefillIsComputeBound) {
  const ze_rbln_decoder_desc_t m = llama_1b();
  ze_rbln_graph_desc_t g{};
  g.kind = ZE_RBLN_GRAPH_PREFILL;
  g.rows = 128;
  g.max_seq_len = 4096;
  g.model = &m;
  g.num_devices = 1;
  std::vector<int32_t> ctx(128);
  for (int i = 0; i < 128; ++i) ctx[size_t(i)] = i + 1;
  ze_rbln_cost_t c{};
  ASSERT_EQ(zeRblnGraphEstimate(&g, ctx.data(), 1, &c), ZE_RESULT_SUCCESS);
  EXPECT_GT(c.compute_s, c.memory_s);
}

// Speculative decoding's verify step (docs/rbln.md): the weights are read once per step as in a
// decode, so verifying 4 proposals at batch 1 costs little more than decoding one token when
// the step is bound by that read; the rows' FLOPs, their attention and their K/V writes are
// still charged, and once the rows outgrow the read (b = 32: 160 rows) the verify is compute
// bound and costs visibly more.
TEST_F(CostModel, VerifyCostsLittleMoreThanDecodeWhenBandwidthBound) {
  const struct {
    const char* name;
    ze_rbln_decoder_desc_t m;
  } shapes[] = {{"llama-3.2-1b", llama_1b()}, {"tinyllama-1.1b", tinyllama()}};
  for (const auto& sh : shapes) {
    for (int32_t ctx : {512, 4096}) {
      const ze_rbln_cost_t d = step(sh.m, 1, 0, ctx), v = step(sh.m, 1, 4, ctx);
      std::printf("%s ctx %d: decode b1 %.3f ms, verify b1 k4 %.3f ms (+%.1f us, %.4fx)\n", sh.name,
                  ctx, 1e3 * d.total_s, 1e3 * v.total_s, 1e6 * (v.total_s - d.total_s),
                  v.total_s / d.total_s);
      EXPECT_GT(v.memory_s, v.compute_s) << sh.name << ": a 5-row verify is still memory bound";
      EXPECT_LE(v.total_s, 1.2 * d.total_s) << sh.name << " ctx " << ctx;
      EXPECT_GT(v.total_s, d.total_s) << sh.name << ": a verify is not free";
      // 5 rows of FLOPs, but the weights and the sequence's K/V are read once.
      EXPECT_NEAR(v.flops / d.flops, 5.0, 0.2);
      EXPECT_LT(v.dram_bytes, 1.01 * d.dram_bytes);
    }
  }
  for (uint32_t b : {1u, 2u, 4u, 8u, 32u}) {
    const ze_rbln_cost_t d = step(llama_1b(), b, 0, 1024), v = step(llama_1b(), b, 4, 1024);
    std::printf("llama-3.2-1b ctx 1024 batch %u: decode %.3f ms, verify k4 %.3f ms (%.4fx)\n", b,
                1e3 * d.total_s, 1e3 * v.total_s, v.total_s / d.total_s);
    EXPECT_GT(v.total_s, d.total_s) << "batch " << b;
    EXPECT_GT(v.flops, 4.5 * d.flops) << "batch " << b;
    if (b <= 8) {
      EXPECT_LE(v.total_s, 1.2 * d.total_s) << "batch " << b;
    }
  }
  const ze_rbln_cost_t d32 = step(llama_1b(), 32, 0, 1024), v32 = step(llama_1b(), 32, 4, 1024);
  EXPECT_GT(v32.compute_s, v32.memory_s)
      << "160 rows are past the roofline's ridge (~103 FLOP/byte)";
  EXPECT_GT(v32.total_s, 1.2 * d32.total_s);
}

// A verify's padding rows (a sequence with fewer proposals) attend to nothing: a verify whose
// sequences all carry fewer rows costs no more than a full one, and a graph whose rows are not
// whole sequences is refused.
TEST_F(CostModel, VerifyPaddingAndShape) {
  const ze_rbln_decoder_desc_t m = llama_1b();
  ze_rbln_graph_desc_t g{};
  g.kind = ZE_RBLN_GRAPH_VERIFY;
  g.rows = 8;
  g.tokens_per_seq = 4;
  g.max_seq_len = 4096;
  g.model = &m;
  g.num_devices = 1;
  const std::vector<int32_t> full{1021, 1022, 1023, 1024, 1021, 1022, 1023, 1024},
      padded{1023, 1024, 0, 0, 1024, 0, 0, 0};
  ze_rbln_cost_t a{}, b{};
  ASSERT_EQ(zeRblnGraphEstimate(&g, full.data(), 8, &a), ZE_RESULT_SUCCESS);
  ASSERT_EQ(zeRblnGraphEstimate(&g, padded.data(), 3, &b), ZE_RESULT_SUCCESS);
  EXPECT_LE(b.total_s, a.total_s);
  EXPECT_LT(b.flops, a.flops);
  g.rows = 7;
  EXPECT_EQ(zeRblnGraphEstimate(&g, full.data(), 7, &a), ZE_RESULT_ERROR_INVALID_ARGUMENT);
}

}  // namespace
