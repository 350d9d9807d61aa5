// Helpers shared by the host-emulation tests of tests/cuda: random data, a
// relative closeness check, a paged KV cache with shuffled block tables, and
// a halo_execute_args built from sequences (for step_plan.h).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "halo/device_abi.h"
#include "halo/kernels/kernels.h"

namespace halo::cuda::emu {

namespace hk = halo::kernels;

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

inline void expect_close(const float* a, const float* b, size_t n, float tol, const char* what) {
  float worst = 0.f;
  size_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    ASSERT_FALSE(std::isnan(a[i])) << what << " NaN at " << i;
    const float e = std::fabs(a[i] - b[i]) / std::max(1.f, std::fabs(b[i]));
    if (e > worst) worst = e, at = i;
  }
  EXPECT_LE(worst, tol) << what << ": worst at " << at << ": " << a[at] << " vs " << b[at];
}

// A paged cache with shuffled block tables, filled with random K/V.
struct PagedFixture {
  int kv_heads, D, bs, num_blocks;
  std::vector<float> k, v;
  std::vector<int32_t> tables;  // [seqs, max_blocks], -1 padded
  int max_blocks;

  PagedFixture(int kvh, int d, int block_size, const std::vector<int>& ctx, uint32_t seed)
      : kv_heads(kvh), D(d), bs(block_size) {
    max_blocks = 1;
    int total = 0;
    for (int c : ctx) {
      max_blocks = std::max(max_blocks, (c + bs - 1) / bs);
      total += (c + bs - 1) / bs;
    }
    num_blocks = total + 3;
    k = randn(size_t(num_blocks) * bs * kvh * d, seed);
    v = randn(size_t(num_blocks) * bs * kvh * d, seed + 1);
    std::vector<int32_t> ids(static_cast<size_t>(num_blocks), 0);
    std::iota(ids.begin(), ids.end(), 0);
    std::shuffle(ids.begin(), ids.end(), std::mt19937(seed + 2));
    tables.assign(ctx.size() * size_t(max_blocks), -1);
    size_t next = 0;
    for (size_t s = 0; s < ctx.size(); ++s)
      for (int j = 0; j < (ctx[s] + bs - 1) / bs; ++j)
        tables[s * size_t(max_blocks) + size_t(j)] = ids[next++];
  }
  hk::PagedKV view() const { return {k.data(), v.data(), bs, kv_heads, D}; }
  std::vector<int32_t> blocks(int s) const {
    const auto* row = &tables[size_t(s) * size_t(max_blocks)];
    return std::vector<int32_t>(row, row + max_blocks);
  }

  // CPU reference for the query heads of one token attending to [0, n_ctx) of sequence s.
  std::vector<float> reference(const float* q_token, int heads, int s, int n_ctx) const {
    const int G = heads / kv_heads;
    std::vector<float> out(size_t(heads) * D), scores(size_t(std::max(n_ctx, 1)));
    for (int g = 0; g < kv_heads; ++g)
      hk::paged_attention(q_token + size_t(g) * G * D, G, view(), g,
                          &tables[size_t(s) * max_blocks], n_ctx, 1.0f / std::sqrt(float(D)),
                          scores.data(), out.data() + size_t(g) * G * D);
    return out;
  }
};

// One sequence of a step: `cached` tokens already in the KV cache, then the
// new tokens; its block table (-1 padded); logits for every new row or the
// last one.
struct StepSeq {
  int cached = 0;
  std::vector<int32_t> tokens;
  std::vector<int32_t> blocks;
  bool all_logits = true;
};

// A halo_execute_args over its own arrays (the engine's layout: flat tokens
// sequence after sequence, positions cached.., slots through the block table).
struct Step {
  std::vector<int32_t> tok, pos, qs{0}, ctx, bt, lidx;
  std::vector<int64_t> slots;
  halo_execute_args a{};

  Step(const std::vector<StepSeq>& seqs, int bs, int mb) {
    for (const StepSeq& s : seqs) {
      const int n = static_cast<int>(s.tokens.size());
      for (int i = 0; i < n; ++i) {
        const int p = s.cached + i;
        if (s.all_logits || i == n - 1) lidx.push_back(static_cast<int32_t>(tok.size()));
        tok.push_back(s.tokens[size_t(i)]), pos.push_back(p);
        slots.push_back(int64_t{s.blocks[size_t(p / bs)]} * bs + p % bs);
      }
      qs.push_back(static_cast<int32_t>(tok.size())), ctx.push_back(s.cached + n);
      for (int j = 0; j < mb; ++j)
        bt.push_back(j < static_cast<int>(s.blocks.size()) ? s.blocks[size_t(j)] : -1);
    }
    a.struct_size = sizeof a;
    a.num_tokens = static_cast<int32_t>(tok.size());
    a.token_ids = tok.data(), a.positions = pos.data(), a.slot_mapping = slots.data();
    a.num_seqs = static_cast<int32_t>(seqs.size());
    a.query_start = qs.data(), a.context_lens = ctx.data(), a.block_tables = bt.data();
    a.max_blocks_per_seq = mb;
    a.num_logits = static_cast<int32_t>(lidx.size()), a.logits_indices = lidx.data();
  }
  Step(const Step&) = delete;
  Step& operator=(const Step&) = delete;
};

}  // namespace halo::cuda::emu
