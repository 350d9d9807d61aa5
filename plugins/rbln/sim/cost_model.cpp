// The simulated clock: a roofline per operator on each chip plus the RSD link.
//
//   op time   = max(FLOPs / (peak * compute_efficiency), DRAM bytes / (bandwidth *
//   dram_efficiency))
//               (counted as compute time when the FLOPs term wins, memory time otherwise)
//   matmul    : FLOPs 2*M*K*N; DRAM bytes = weights (K*N*wbytes, or for an int8 matrix K*N + its
//   fp32
//               scales N*(K/group)*4: the bytes actually stored) once when the M rows of
//               activations (M*(K+N)*activation_bytes) fit in SRAM, else weights once per
//               SRAM-sized pass plus the activations themselves.
//   attention : FLOPs 4*ctx*head_dim per query head; DRAM bytes = K and V of ctx tokens of the
//   chip's kv heads. A verify graph's rows of one sequence (its last token and the proposals)
//   share one read of that sequence's K/V (the longest of their contexts: the K+1 queries
//   are tiled against the same K/V in SRAM); their FLOPs are each row's own.
//   all-reduce: ring over n chips: 2*(n-1)/n * bytes / link_bandwidth + 2*(n-1) *
//   link_latency, after the
//               o and down products of every layer (bytes = rows * hidden * activation_bytes).
//   all-gather: the logits shards, (n-1)/n * bytes / link_bandwidth + (n-1) * link_latency.
//   + launch_overhead once per execution. Elementwise ops (norms, RoPE, SiLU) run from SRAM and are
//   not charged. Chips run in lockstep; the step costs what the most loaded chip costs.
#include <algorithm>
#include <cmath>

#include "sim.h"

namespace rbln::sim {
namespace {

struct Acc {
  const Profile& p;
  ze_rbln_cost_t c{};
  void op(double flops, double bytes) {
    const double tc = flops / (p.peak_flops * p.compute_efficiency);
    const double tm = bytes / (p.dram_bandwidth * p.dram_efficiency);
    if (tc >= tm)
      c.compute_s += tc;
    else
      c.memory_s += tm;
    c.flops += flops;
    c.dram_bytes += bytes;
  }
  void matmul(double M, double K, double N, double weights) {
    const double act = M * (K + N) * p.activation_bytes;
    const double passes = std::max(1.0, std::ceil(act / std::max(1.0, p.sram_bytes)));
    op(2.0 * M * K * N, weights * passes + (passes > 1 ? act : 0.0));
  }
  void all_reduce(double n, double bytes) {
    if (n <= 1) return;
    c.link_s += 2.0 * (n - 1) / n * bytes / p.link_bandwidth + 2.0 * (n - 1) * p.link_latency;
    c.link_bytes += 2.0 * (n - 1) / n * bytes;
  }
  void all_gather(double n, double bytes) {
    if (n <= 1) return;
    c.link_s += (n - 1) / n * bytes / p.link_bandwidth + (n - 1) * p.link_latency;
    c.link_bytes += (n - 1) / n * bytes;
  }
};

// Bytes stored of a weight matrix [N, K] in `bit` of quant_mask (int8 + scales) or plain.
struct WeightBytes {
  const ze_rbln_decoder_desc_t& m;
  double wb;
  double operator()(uint32_t bit, double K, double N) const {
    if (m.quant_mask & bit) return double(ze_rbln_q8_bytes(&m, uint64_t(N), uint32_t(K)));
    return K * N * wb;
  }
};

// Context tokens attended over all rows (the FLOPs) and read from the KV
// cache (the bytes): the same, except in a verify graph, where each
// sequence's tokens_per_seq rows share one read of its longest context.
struct KvTokens {
  double attended = 0, read = 0;
};
KvTokens kv_tokens(const ze_rbln_graph_desc_t& d, const int32_t* ctx_lens) {
  KvTokens t;
  if (!ctx_lens) return t;
  const uint32_t group =
      d.kind == ZE_RBLN_GRAPH_VERIFY ? std::max<uint32_t>(1, d.tokens_per_seq) : 1;
  for (uint32_t r0 = 0; r0 < d.rows; r0 += group) {
    double longest = 0;
    for (uint32_t r = r0; r < std::min(d.rows, r0 + group); ++r) {
      const double ctx = std::max(0, ctx_lens[r]);
      t.attended += ctx;
      longest = std::max(longest, ctx);
    }
    t.read += longest;
  }
  return t;
}

}  // namespace

ze_rbln_cost_t estimate(const Profile& p, const ze_rbln_graph_desc_t& d, const int32_t* ctx_lens, uint32_t num_logits) {
  const ze_rbln_decoder_desc_t& m = *d.model;
  const uint32_t n = std::max<uint32_t>(1, d.num_devices);
  const double wb = m.weight_dtype == ZE_RBLN_DTYPE_FP32 ? 4.0 : 2.0;
  const WeightBytes W{m, wb};
  const double R = d.rows, H = m.hidden, hd = m.head_dim;
  const KvTokens kv = kv_tokens(d, ctx_lens);
  ze_rbln_cost_t worst{};
  for (uint32_t c = 0; c < n; ++c) {
    Acc a{p};
    const double hq = ze_rbln_split(m.heads, c + 1, n) - ze_rbln_split(m.heads, c, n);
    const double hkv = ze_rbln_kv_hi(&m, c, n) - ze_rbln_kv_lo(&m, c, n);
    const double ic = ze_rbln_split(m.intermediate, c + 1, n) - ze_rbln_split(m.intermediate, c, n);
    const double vc = ze_rbln_split(m.vocab, c + 1, n) - ze_rbln_split(m.vocab, c, n);
    a.op(0, R * H * wb);  // embedding rows
    for (uint32_t l = 0; l < m.layers; ++l) {
      a.matmul(R, H, hq * hd, W(1u << ZE_RBLN_L_Q, H, hq * hd));
      a.matmul(R, H, hkv * hd, W(1u << ZE_RBLN_L_K, H, hkv * hd));
      a.matmul(R, H, hkv * hd, W(1u << ZE_RBLN_L_V, H, hkv * hd));
      a.op(4.0 * kv.attended * hd * hq,
           2.0 * kv.read * hkv * hd * p.kv_bytes + 2.0 * R * hkv * hd * p.kv_bytes);
      a.matmul(R, hq * hd, H, W(1u << ZE_RBLN_L_O, hq * hd, H));
      a.all_reduce(n, R * H * p.activation_bytes);
      a.matmul(R, H, ic, W(1u << ZE_RBLN_L_GATE, H, ic));
      a.matmul(R, H, ic, W(1u << ZE_RBLN_L_UP, H, ic));
      a.matmul(R, ic, H, W(1u << ZE_RBLN_L_DOWN, ic, H));
      a.all_reduce(n, R * H * p.activation_bytes);
    }
    if (num_logits > 0) {
      a.matmul(num_logits, H, vc, W(ZE_RBLN_QUANT_LM_HEAD, H, vc));
      a.all_gather(n, double(num_logits) * m.vocab * 4.0);
    }
    a.c.overhead_s = p.launch_overhead;
    a.c.total_s = a.c.compute_s + a.c.memory_s + a.c.link_s + a.c.overhead_s;
    if (c == 0 || a.c.total_s > worst.total_s) worst = a.c;
  }
  return worst;
}

}  // namespace rbln::sim
