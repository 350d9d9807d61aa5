// Paged attention micro-benchmarks, TinyLlama-1.1B shapes (32 query heads,
// 4 kv heads, head_dim 64, block 16): the fast tile kernel
// (halo/kernels/attention.h) with bf16 and fp32 KV against the old
// halo::kernels::paged_attention (fp32 KV, one head at a time), same run.
// Decode: one sequence, one query token, all kv heads; the KvBytes counter is
// the K+V bytes read per second. Prefill: 512 tokens from position 0.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "halo/kernels/attention.h"
#include "halo/kernels/kernels.h"

namespace k = halo::kernels;

namespace {

constexpr int32_t kQHeads = 32, kKvHeads = 4, kHeadDim = 64, kBlock = 16;
constexpr size_t kGroup = kQHeads / kKvHeads;

struct Setup {
  std::vector<uint8_t> kbuf, vbuf;
  std::vector<int32_t> table;
  k::KvLayer kv;
  std::vector<float> q, out, scratch, scores;

  Setup(k::DType dt, size_t ctx, size_t n_q) {
    const size_t blocks = (ctx + kBlock - 1) / kBlock;
    const size_t row = static_cast<size_t>(kKvHeads) * kHeadDim;
    const size_t es = k::dtype_size(dt);
    kbuf.assign(blocks * kBlock * row * es, 0);
    vbuf.assign(blocks * kBlock * row * es, 0);
    table.resize(blocks);
    std::iota(table.begin(), table.end(), 0);
    std::mt19937 rng(1);
    std::shuffle(table.begin(), table.end(), rng);
    kv = k::KvLayer{kbuf.data(), vbuf.data(), dt, kBlock, kKvHeads, kHeadDim};
    std::normal_distribution<float> nd(0.f, 1.f);
    std::vector<float> kt(row), vt(row);
    for (size_t p = 0; p < ctx; ++p) {
      for (auto& x : kt) x = nd(rng);
      for (auto& x : vt) x = nd(rng);
      k::kv_store(
          kv, static_cast<int64_t>(table[p / kBlock]) * kBlock + static_cast<int64_t>(p % kBlock),
          kt.data(), vt.data());
    }
    q.resize(n_q * kQHeads * kHeadDim);
    for (auto& x : q) x = nd(rng);
    out.resize(q.size());
    scratch.resize(k::attention_scratch_floats(n_q, kGroup, kHeadDim, kBlock));
    scores.resize(ctx);
  }
  k::PagedKV old_kv() const {
    return k::PagedKV{reinterpret_cast<const float*>(kbuf.data()),
                      reinterpret_cast<const float*>(vbuf.data()), kBlock, kKvHeads, kHeadDim};
  }
};

const float kScale = 1.0f / std::sqrt(static_cast<float>(kHeadDim));

void set_kv_counter(benchmark::State& state, size_t ctx, size_t esize) {
  const double bytes =
      2.0 * static_cast<double>(ctx) * kKvHeads * kHeadDim * static_cast<double>(esize);
  state.counters["KvBytes"] = benchmark::Counter(
      bytes, benchmark::Counter::kIsIterationInvariantRate, benchmark::Counter::kIs1024);
}

void BM_DecodeTile(benchmark::State& state, k::DType dt) {
  const size_t ctx = static_cast<size_t>(state.range(0));
  Setup s(dt, ctx, 1);
  const size_t stride = kQHeads * kHeadDim;
  for (auto _ : state) {
    for (int32_t h = 0; h < kKvHeads; ++h)
      k::paged_attention_tile(s.q.data() + h * kGroup * kHeadDim, stride, 1, kGroup, s.kv, h,
                              s.table.data(), static_cast<int32_t>(ctx), kScale,
                              s.out.data() + h * kGroup * kHeadDim, stride, s.scratch.data());
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  set_kv_counter(state, ctx, k::dtype_size(dt));
}

void BM_DecodeOld(benchmark::State& state) {
  const size_t ctx = static_cast<size_t>(state.range(0));
  Setup s(k::DType::F32, ctx, 1);
  const k::PagedKV kv = s.old_kv();
  for (auto _ : state) {
    for (int32_t h = 0; h < kKvHeads; ++h)
      k::paged_attention(s.q.data() + h * kGroup * kHeadDim, kGroup, kv, h, s.table.data(),
                         static_cast<int32_t>(ctx), kScale, s.scores.data(),
                         s.out.data() + h * kGroup * kHeadDim);
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  set_kv_counter(state, ctx, 4);
}

constexpr size_t kPrefill = 512;

void BM_PrefillTile(benchmark::State& state, k::DType dt) {
  Setup s(dt, kPrefill, kPrefill);
  const size_t stride = kQHeads * kHeadDim;
  for (auto _ : state) {
    for (int32_t h = 0; h < kKvHeads; ++h)
      k::paged_attention_tile(s.q.data() + h * kGroup * kHeadDim, stride, kPrefill, kGroup, s.kv, h,
                              s.table.data(), 1, kScale, s.out.data() + h * kGroup * kHeadDim,
                              stride, s.scratch.data());
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(kPrefill),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

void BM_PrefillOld(benchmark::State& state) {
  Setup s(k::DType::F32, kPrefill, kPrefill);
  const k::PagedKV kv = s.old_kv();
  const size_t stride = kQHeads * kHeadDim;
  for (auto _ : state) {
    for (size_t t = 0; t < kPrefill; ++t)
      for (int32_t h = 0; h < kKvHeads; ++h)
        k::paged_attention(s.q.data() + t * stride + h * kGroup * kHeadDim, kGroup, kv, h,
                           s.table.data(), static_cast<int32_t>(t + 1), kScale, s.scores.data(),
                           s.out.data() + t * stride + h * kGroup * kHeadDim);
    benchmark::DoNotOptimize(s.out.data());
    benchmark::ClobberMemory();
  }
  state.counters["tokens"] = benchmark::Counter(static_cast<double>(kPrefill),
                                                benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK_CAPTURE(BM_DecodeTile, bf16, k::DType::BF16)->Arg(128)->Arg(512)->Arg(2048);
BENCHMARK_CAPTURE(BM_DecodeTile, f32, k::DType::F32)->Arg(128)->Arg(512)->Arg(2048);
BENCHMARK(BM_DecodeOld)->Arg(128)->Arg(512)->Arg(2048);
BENCHMARK_CAPTURE(BM_PrefillTile, bf16, k::DType::BF16)->Unit(benchmark::kMillisecond);
BENCHMARK_CAPTURE(BM_PrefillTile, f32, k::DType::F32)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_PrefillOld)->Unit(benchmark::kMillisecond);
