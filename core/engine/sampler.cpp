#include "engine/sampler.h"

#include <fmt/format.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <numeric>

#include "common/error.h"

namespace halo::engine {

void SamplingParams::validate() const {
  auto fail = [](const std::string& m) { throw Error(m); };
  if (!(temperature >= 0.0f) || !std::isfinite(temperature))
    fail(fmt::format("temperature must be >= 0, got {}", temperature));
  if (!(top_p > 0.0f && top_p <= 1.0f)) fail(fmt::format("top_p must be in (0, 1], got {}", top_p));
  if (top_k < -1) fail(fmt::format("top_k must be -1 (off), 0 (off) or positive, got {}", top_k));
  if (!(min_p >= 0.0f && min_p <= 1.0f))
    fail(fmt::format("min_p must be in [0, 1], got {}", min_p));
  if (!(repetition_penalty > 0.0f))
    fail(fmt::format("repetition_penalty must be > 0, got {}", repetition_penalty));
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    fail(fmt::format("presence_penalty must be in [-2, 2], got {}", presence_penalty));
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    fail(fmt::format("frequency_penalty must be in [-2, 2], got {}", frequency_penalty));
  if (max_tokens < 1) fail(fmt::format("max_tokens must be at least 1, got {}", max_tokens));
  if (logprobs < -1 || logprobs > 20)
    fail(fmt::format("logprobs must be in [0, 20], got {}", logprobs));
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

// A weight's bucket at a level: 11 bits of its bit pattern (>= 0 floats order
// as their bits do). Level 0 takes the exponent and the mantissa's top 3 bits,
// level 1 the next 11, so two passes leave buckets of nearly equal weights.
inline uint32_t weight_bucket(float w, int level) {
  return ((std::bit_cast<uint32_t>(w) & 0x7fffffffu) >> (level == 0 ? 20 : 9)) & 0x7ffu;
}
constexpr size_t kWeightBuckets = size_t{1} << 11;

// Orders `items` just enough to find the fewest most likely ones (`likelier`
// first, which must order as `weight` does) whose weights sum to at least
// `target` (more than it when `strict`), and returns how many that is: all
// of them when the sum never gets there. items[0, m-1) are then likelier than
// items[m-1], which is likelier than the rest. Two passes sum the weights by
// bucket and move the bucket that holds the answer between its likelier and
// less likely neighbours; a quickselect inside it finds the item. (Sorting
// the whole vocabulary every sampled token cost more than a small model's step.)
template <class Item, class Likelier, class Weight>
size_t likeliest_with_mass(std::vector<Item>& items, Likelier likelier, Weight weight,
                           double target, bool strict) {
  auto reaches = [&](double mass) { return strict ? mass > target : mass >= target; };
  // The answer m lies in (lo, hi]; items[0, lo) are likelier than the rest and weigh `before`.
  size_t lo = 0, hi = items.size();
  double before = 0.0;
  auto at = [&](size_t i) { return items.begin() + static_cast<std::ptrdiff_t>(i); };
  thread_local std::vector<double> bucket_mass;
  for (int level = 0; level < 2 && hi - lo > 64; ++level) {
    bucket_mass.assign(kWeightBuckets, 0.0);
    bool found = false;
    for (size_t i = lo; i < hi; ++i)
      bucket_mass[weight_bucket(weight(items[i]), level)] += weight(items[i]);
    for (uint32_t b = kWeightBuckets; b-- > 0;) {
      if (!reaches(before + bucket_mass[b])) {
        before += bucket_mass[b];
        continue;
      }
      auto above = [&](const Item& it) { return weight_bucket(weight(it), level) > b; };
      auto in = [&](const Item& it) { return weight_bucket(weight(it), level) == b; };
      auto mid = std::partition(at(lo), at(hi), above);
      auto end = std::partition(mid, at(hi), in);
      lo = static_cast<size_t>(mid - items.begin());
      hi = static_cast<size_t>(end - items.begin());
      found = true;
      break;
    }
    if (found) continue;
    // Never reached (the sum falls short of the total by rounding): all of
    // them, the least likely last (max_element by `likelier`).
    auto least = std::max_element(at(lo), at(hi), likelier);
    std::iter_swap(least, at(hi - 1));
    return hi;
  }
  while (hi - lo > 1) {
    const size_t mid = lo + (hi - lo) / 2;
    std::nth_element(at(lo), at(mid), at(hi), likelier);
    double upper = 0.0;
    for (size_t i = lo; i < mid; ++i) upper += weight(items[i]);
    if (reaches(before + upper)) {
      hi = mid;
    } else {
      before += upper;
      lo = mid;
    }
  }
  return hi;
}

// (weight, token) pairs side by side, the heavier first, the lower token
// first among equal weights.
bool likelier(const std::pair<float, int32_t>& a, const std::pair<float, int32_t>& b) {
  return a.first > b.first || (a.first == b.first && a.second < b.second);
}
float item_weight(const std::pair<float, int32_t>& item) { return item.first; }
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
  const bool penalized =
      p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f;
  const bool copy = penalized || p.temperature > 0.0f;
  if (copy) raw_.assign(logits.begin(), logits.end());
  const int32_t token = draw(distribution(logits, p, prompt, output), rng);
  std::span<const float> raw = copy ? std::span<const float>(raw_) : std::span<const float>(logits);
  return SampleResult{token_logprob(raw, token, std::max(0, p.logprobs))};
}

void Sampler::penalize(std::span<float> logits, const SamplingParams& p,
                       std::span<const int32_t> prompt, std::span<const int32_t> output) {
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

// Candidates: the tokens a mask or a bias left possible (-inf logits have no
// weight, and a guided step masks most of the vocabulary), top-k applied by a
// partial sort. Otherwise they stay in id order with the most likely swapped to
// the front (the weights' reference point): sorting the whole vocabulary every
// token cost more than the rest of a small model's step.
void Sampler::select_candidates(std::span<const float> logits, const SamplingParams& p) {
  const int vocab = static_cast<int>(logits.size());
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  order_.resize(static_cast<size_t>(vocab));
  if (p.top_k > 0 && p.top_k < vocab) {  // masked tokens sort last: cut them from the top k
    std::iota(order_.begin(), order_.end(), 0);
    std::partial_sort(order_.begin(), order_.begin() + p.top_k, order_.end(), by_logit(logits));
    order_.resize(static_cast<size_t>(p.top_k));
    while (order_.size() > 1 && logits[order_.back()] == kNegInf) order_.pop_back();
    return;
  }
  size_t n_left = 0;
  for (int32_t t = 0; t < vocab; ++t) {  // without a branch: the mask's pattern is unpredictable
    order_[n_left] = t;
    n_left += logits[t] != kNegInf;
  }
  order_.resize(n_left);
  if (order_.empty()) {  // every token masked: keep the old, total distribution
    order_.resize(static_cast<size_t>(vocab));
    std::iota(order_.begin(), order_.end(), 0);
  }
  std::iter_swap(order_.begin(), std::min_element(order_.begin(), order_.end(), by_logit(logits)));
}

// Keeps the fewest most likely candidates whose mass reaches top_p (the cut
// a full sort by logit gives), in no particular order.
void Sampler::cut_top_p(float top_p, std::vector<float>& w) {
  double mass = 0.0;
  for (float x : w) mass += x;
  thread_local std::vector<std::pair<float, int32_t>> items;  // (weight, token)
  items.resize(order_.size());
  for (size_t i = 0; i < items.size(); ++i) items[i] = {w[i], order_[i]};
  const size_t keep = likeliest_with_mass(items, likelier, item_weight, top_p * mass, false);
  order_.resize(keep);
  w.resize(keep);
  for (size_t i = 0; i < keep; ++i) std::tie(w[i], order_[i]) = items[i];
}

const TokenDist& Sampler::distribution(std::span<float> logits, const SamplingParams& p,
                                       std::span<const int32_t> prompt,
                                       std::span<const int32_t> output) {
  if (p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f)
    penalize(logits, p, prompt, output);
  TokenDist& d = dist_;
  d.ids.clear();
  d.weights.clear();
  if (p.temperature == 0.0f) {  // greedy: lowest id wins ties
    d.ids.push_back(
        static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin()));
    d.weights.push_back(1.0f);
    d.total = 1.0;
    d.greedy = true;
    return d;
  }
  d.greedy = false;
  for (auto& v : logits) v /= p.temperature;
  select_candidates(logits, p);
  const float mx = logits[order_[0]];
  auto& w = d.weights;
  w.resize(order_.size());
  for (size_t i = 0; i < order_.size(); ++i) w[i] = std::exp(logits[order_[i]] - mx);
  // vLLM v1's order: min-p (relative to the most likely token, so a filter
  // that keeps order_[0]), then top-k (already applied to order_), then top-p
  // over what is left, renormalized.
  if (p.min_p > 0.0f) {
    size_t kept = 0;
    for (size_t i = 0; i < order_.size(); ++i)
      if (i == 0 || w[i] >= p.min_p) {
        order_[kept] = order_[i];
        w[kept++] = w[i];
      }
    order_.resize(kept);
    w.resize(kept);
  }
  if (p.top_p < 1.0f) cut_top_p(p.top_p, w);
  d.ids.assign(order_.begin(), order_.end());
  d.total = 0.0;
  for (float x : w) d.total += x;
  return d;
}

// The token where the cumulative weight, taken from the most likely down,
// passes a uniform draw: the same token whatever order `d` lists them in, so a
// seed's tokens do not depend on how the distribution was built.
int32_t Sampler::draw(const TokenDist& d, std::mt19937_64& rng) {
  if (d.greedy) return d.ids.front();
  std::uniform_real_distribution<double> uniform(0.0, d.total);
  const double r = uniform(rng);
  // (weight, token) pairs side by side: the selection reads no other array.
  thread_local std::vector<std::pair<float, int32_t>> items;
  items.resize(d.ids.size());
  for (size_t i = 0; i < items.size(); ++i) items[i] = {d.weights[i], d.ids[i]};
  const size_t m = likeliest_with_mass(items, likelier, item_weight, r, true);
  return items[m - 1].second;
}

}  // namespace halo::engine
