// The sampler's cost per token on a whole vocabulary row (Llama 2's 32k and
// Qwen3's 151,936 entries), as LLMEngine pays it for every sampled sequence:
// temperature, then the cuts of the sampling settings, then the draw.
// Args: vocabulary size, settings (0 temperature only: vLLM's default;
// 1 top_p 0.9: Llama's generation_config; 2 top_k 20 + top_p 0.95: Qwen3's),
// logits (0 peaked: a trained model's spread, 1 nearly flat: an untrained one
// or a high temperature, the worst case for top-p).
// Baseline in the same run: BM_FullSort, the sort by logit of the whole row
// that the sampler did every token before it selected instead.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <numeric>
#include <random>
#include <vector>

#include "engine/sampler.h"

using namespace halo::engine;

namespace {

std::vector<float> logits_row(int vocab, bool flat) {
  std::mt19937 gen(11);
  std::normal_distribution<float> n(0.0f, flat ? 0.05f : 3.0f);
  std::vector<float> row(static_cast<size_t>(vocab));
  for (auto& v : row) v = n(gen);
  return row;
}

SamplingParams settings(int which) {
  SamplingParams p;
  p.temperature = 1.0f;
  if (which == 1) p.top_p = 0.9f;
  if (which == 2) p.top_k = 20, p.top_p = 0.95f;
  return p;
}

void BM_Sample(benchmark::State& state) {
  const auto row = logits_row(static_cast<int>(state.range(0)), state.range(2) != 0);
  const SamplingParams p = settings(static_cast<int>(state.range(1)));
  Sampler s;
  std::mt19937_64 rng(5);
  std::vector<float> work(row.size());
  for (auto _ : state) {
    std::copy(row.begin(), row.end(), work.begin());
    benchmark::DoNotOptimize(Sampler::draw(s.distribution(work, p, {}, {}), rng));
  }
}

void BM_FullSort(benchmark::State& state) {
  const auto row = logits_row(static_cast<int>(state.range(0)), state.range(1) != 0);
  std::vector<int32_t> order(row.size());
  for (auto _ : state) {
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](int32_t a, int32_t b) { return row[a] > row[b] || (row[a] == row[b] && a < b); });
    benchmark::DoNotOptimize(order.data());
  }
}

}  // namespace

BENCHMARK(BM_Sample)
    ->ArgsProduct({{32000, 151936}, {0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_FullSort)->ArgsProduct({{32000, 151936}, {0, 1}})->Unit(benchmark::kMicrosecond);
