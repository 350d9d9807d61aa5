#include "engine/sampler.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include <fmt/format.h>

#include "common/error.h"

namespace halo::engine {

void SamplingParams::validate() const {
  auto fail = [](const std::string& m) { throw Error(m); };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    fail(fmt::format("temperature must be >= 0, got {}", temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail(fmt::format("top_p must be in (0, 1], got {}", top_p));
  if (top_k < -1) fail(fmt::format("top_k must be -1 (off), 0 (off) or positive, got {}", top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f)) fail(fmt::format("min_p must be in [0, 1], got {}", min_p));
  if (!(repetition_penalty > 0.0f)) fail(fmt::format("repetition_penalty must be > 0, got {}", repetition_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    fail(fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    fail(fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  if (max_tokens < 1) fail(fmt::format("max_tokens must be at least 1, got {}", max_tokens));
  if (logprobs < -1 || logprobs > 20) fail(fmt::format("logprobs must be in [0, 20], got {}", logprobs));
  if (prompt_logprobs < -1 || prompt_logprobs > 20)
    fail(fmt::format("prompt_logprobs must be in [0, 20], got {}", prompt_logprobs));
  if (min_tokens < 0 || min_tokens > max_tokens)
    fail(fmt::format("min_tokens must be in [0, max_tokens={}], got {}", max_tokens, min_tokens));
  if (pooling.active()) {
    if (pooling.dimensions < 0)
      fail(fmt::format("dimensions must be positive, got {}", pooling.dimensions));
    if (logprobs >= 0 || prompt_logprobs >= 0 || guide)
      fail(
          "a pooling (embedding) request samples nothing: logprobs, prompt_logprobs and guided "
          "decoding do not apply");
  }
}

namespace {
// log(sum(exp(logits))), stable.
double log_sum_exp(std::span<const float> logits) {
  float mx = *std::max_element(logits.begin(), logits.end());
  double sum = 0.0;
  for (float v : logits) sum += std::exp(static_cast<double>(v - mx));
  return mx + std::log(sum);
}
}  // namespace

TokenLogprob token_logprob(std::span<const float> logits, int32_t token, int top_k) {
  double lse = log_sum_exp(logits);
  TokenLogprob r;
  r.token = token;
  r.logprob = static_cast<float>(logits[token] - lse);
  if (top_k > 0) {
    int k = std::min<int>(top_k, static_cast<int>(logits.size()));
    std::vector<int32_t> ids(logits.size());
    std::iota(ids.begin(), ids.end(), 0);
    std::partial_sort(ids.begin(), ids.begin() + k, ids.end(), [&](int32_t a, int32_t b) {
      return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
    });
    for (int i = 0; i < k; ++i) r.top.push_back({ids[i], static_cast<float>(logits[ids[i]] - lse)});
  }
  return r;
}

double TokenDist::prob(int32_t token) const {
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] == token) return weights[i] / total;
  return 0.0;
}

SampleResult Sampler::sample(std::span<float> logits, const SamplingParams& p,
                             std::span<const int32_t> prompt, std::span<const int32_t> output,
                             std::mt19937_64& rng) {
  // Raw logprobs are reported, so keep a copy only when processing changes them.
  const bool penalized = p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const bool copy = penalized || p.temperature > 0.0f;
  if (copy) raw_.assign(logits.begin(), logits.end());
  const int32_t token = draw(distribution(logits, p, prompt, output), rng);
  std::span<const float> raw = copy ? std::span<const float>(raw_) : std::span<const float>(logits);
  return SampleResult{token_logprob(raw, token, std::max(0, p.logprobs))};
}

void Sampler::penalize(std::span<float> logits, const SamplingParams& p, std::span<const int32_t> prompt,
                       std::span<const int32_t> output) {
  const int vocab = static_cast<int>(logits.size());
  counts_.assign(vocab, 0);
  for (int32_t t : output)
    if (t >= 0 && t < vocab) counts_[t]++;
  if (p.repetition_penalty != 1.0f) {
    // vLLM/HF: tokens seen in prompt or output get logit/penalty if positive, *penalty if negative.
    auto apply = [&](int32_t t) {
      float& v = logits[t];
      v = v > 0 ? v / p.repetition_penalty : v * p.repetition_penalty;
    };
    std::vector<bool> seen(vocab, false);
    for (auto seq : {prompt, output})
      for (int32_t t : seq)
        if (t >= 0 && t < vocab && !seen[t]) {
          seen[t] = true;
          apply(t);
        }
  }
  for (int i = 0; i < vocab; ++i) {
    if (counts_[i] == 0) continue;
    logits[i] -= p.frequency_penalty * counts_[i] + p.presence_penalty;
  }
}

const TokenDist& Sampler::distribution(std::span<float> logits, const SamplingParams& p,
                                       std::span<const int32_t> prompt, std::span<const int32_t> output) {
  const int vocab = static_cast<int>(logits.size());
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    penalize(logits, p, prompt, output);
  TokenDist& d = dist_;
  d.ids.clear();
  d.weights.clear();
  if (p.temperature == 0.0f) {  // greedy: lowest id wins ties
    d.ids.push_back(static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    d.weights.push_back(1.0f);
    d.total = 1.0;
    d.greedy = true;
    return d;
  }
  d.greedy = false;
  for (auto& v : logits) v /= p.temperature;
  // Candidates sorted by logit, then cut by min-p, top-k and top-p.
  order_.resize(vocab);
  std::iota(order_.begin(), order_.end(), 0);
  int k = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
  auto by_logit = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  if (k < vocab) {
    std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), by_logit);
    order_.resize(k);
  } else {
    std::sort(order_.begin(), order_.end(), by_logit);
  }
  const float mx = logits[order_[0]];
  auto& w = d.weights;
  w.resize(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) w[i] = std::exp(logits[order_[i]] - mx);
  // vLLM v1's order: min-p (relative to the most likely token), then top-k
  // (already applied to order_), then top-p over what is left, renormalized.
  size_t keep = order_.size();
  if (p.min_p > 0.0f) {
    const float threshold = p.min_p * w[0];
    size_t i = 1;
    while (i < keep && w[i] >= threshold) ++i;
    keep = i;
  }
  if (p.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < keep; ++i) mass += w[i];
    double cum = 0.0;
    for (size_t i = 0; i < keep; ++i) {
      cum += w[i] / mass;
      if (cum >= p.top_p) {
        keep = i + 1;
        break;
      }
    }
  }
  d.ids.assign(order_.begin(), order_.begin() + static_cast<std::ptrdiff_t>(keep));
  w.resize(keep);
  d.total = 0.0;
  for (size_t i = 0; i < keep; ++i) d.total += w[i];
  return d;
}

int32_t Sampler::draw(const TokenDist& d, std::mt19937_64& rng) {
  if (d.greedy) return d.ids.front();
  std::uniform_real_distribution<double> uniform(0.0, d.total);
  const double r = uniform(rng);
  double acc = 0.0;
  for (size_t i = 0; i < d.ids.size(); ++i) {
    acc += d.weights[i];
    if (r < acc) return d.ids[i];
  }
  return d.ids.back();
}

}  // namespace halo::engine
