#pragma once
// What the engine measures, once, for every consumer: Prometheus text at
// /metrics, the periodic log line and benchmark JSON. Names follow vLLM's
// (see docs/metrics.md) so existing dashboards and routers read them.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace halo::engine {

class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  const std::vector<uint64_t>& counts() const { return counts_; }  // per bucket, +Inf last
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct EngineMetrics {
  EngineMetrics();
  // Gauges (set from the last step).
  size_t num_running = 0;
  size_t num_waiting = 0;
  double kv_cache_usage = 0;  // 0..1
  // Counters.
  uint64_t prompt_tokens = 0;
  uint64_t generation_tokens = 0;
  uint64_t num_preemptions = 0;
  uint64_t prefix_cache_queries = 0;
  uint64_t prefix_cache_hits = 0;
  std::map<std::string, uint64_t> request_success;  // by finished_reason: stop, length, abort, error
  // Speculative decoding (rendered only when it is configured: per_pos sized k).
  uint64_t spec_num_drafts = 0;
  uint64_t spec_num_draft_tokens = 0;
  uint64_t spec_num_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  // Histograms.
  Histogram time_to_first_token_seconds;
  Histogram inter_token_latency_seconds;
  Histogram e2e_request_latency_seconds;
  Histogram request_queue_time_seconds;
  Histogram request_prompt_tokens;
  Histogram request_generation_tokens;
  Histogram iteration_tokens_total;
};

// Prometheus text exposition of `m` with a model_name label on every sample.
std::string render_prometheus(const EngineMetrics& m, const std::string& model_name, int block_size,
                              int num_blocks);

}  // namespace halo::engine
