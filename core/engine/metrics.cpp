#include "engine/metrics.h"

#include <algorithm>

#include <fmt/format.h>

namespace halo::engine {

Histogram::Histogram(std::vector<double> upper_bounds)
    : bounds_(std::move(upper_bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = std::lower_bound(bounds_.begin(), bounds_.end(), v) - bounds_.begin();
  counts_[i]++;
  sum_ += v;
  count_++;
}

namespace {
// vLLM's buckets.
std::vector<double> latency_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> e2e_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};
}
std::vector<double> token_buckets() {
  return {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000, 20000, 50000, 100000};
}
}  // namespace

EngineMetrics::EngineMetrics()
    : time_to_first_token_seconds(latency_buckets()),
      inter_token_latency_seconds(latency_buckets()),
      e2e_request_latency_seconds(e2e_buckets()),
      request_queue_time_seconds(e2e_buckets()),
      request_prompt_tokens(token_buckets()),
      request_generation_tokens(token_buckets()),
      iteration_tokens_total(token_buckets()) {}

std::string render_prometheus(const EngineMetrics& m, const std::string& model_name, int block_size,
                              int num_blocks) {
  std::string out;
  const std::string label = fmt::format("model_name=\"{}\"", model_name);
  auto head = [&](const char* name, const char* type, const char* help) {
    out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
  };
  auto sample = [&](const char* name, double v) { out += fmt::format("{}{{{}}} {}\n", name, label, v); };
  head("vllm:num_requests_running", "gauge", "Requests in the running batch.");
  sample("vllm:num_requests_running", double(m.num_running));
  head("vllm:num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
  sample("vllm:num_requests_waiting", double(m.num_waiting));
  head("vllm:kv_cache_usage_perc", "gauge", "Fraction of KV cache blocks in use (0-1).");
  sample("vllm:kv_cache_usage_perc", m.kv_cache_usage);
  head("vllm:cache_config_info", "gauge", "KV cache configuration.");
  out += fmt::format("vllm:cache_config_info{{{},block_size=\"{}\",num_gpu_blocks=\"{}\"}} 1\n", label, block_size,
                     num_blocks);
  head("vllm:prompt_tokens_total", "counter", "Prompt tokens processed.");
  sample("vllm:prompt_tokens_total", double(m.prompt_tokens));
  head("vllm:generation_tokens_total", "counter", "Tokens generated.");
  sample("vllm:generation_tokens_total", double(m.generation_tokens));
  head("vllm:num_preemptions_total", "counter", "Preemptions of running requests.");
  sample("vllm:num_preemptions_total", double(m.num_preemptions));
  head("vllm:prefix_cache_queries", "counter", "Prompt tokens looked up in the prefix cache.");
  sample("vllm:prefix_cache_queries", double(m.prefix_cache_queries));
  head("vllm:prefix_cache_hits", "counter", "Prompt tokens found in the prefix cache.");
  sample("vllm:prefix_cache_hits", double(m.prefix_cache_hits));
  head("vllm:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error"}) {
    auto it = m.request_success.find(reason);
    out += fmt::format("vllm:request_success_total{{{},finished_reason=\"{}\"}} {}\n", label, reason,
                       it == m.request_success.end() ? 0 : it->second);
  }
  if (!m.spec_accepted_per_pos.empty()) {  // vLLM's names, as its Prometheus client writes counters
    head("vllm:spec_decode_num_drafts_total", "counter", "Sequences verified with proposed tokens.");
    sample("vllm:spec_decode_num_drafts_total", double(m.spec_num_drafts));
    head("vllm:spec_decode_num_draft_tokens_total", "counter", "Proposed tokens verified.");
    sample("vllm:spec_decode_num_draft_tokens_total", double(m.spec_num_draft_tokens));
    head("vllm:spec_decode_num_accepted_tokens_total", "counter", "Proposed tokens accepted.");
    sample("vllm:spec_decode_num_accepted_tokens_total", double(m.spec_num_accepted_tokens));
    head("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", "Proposed tokens accepted, by position.");
    for (size_t i = 0; i < m.spec_accepted_per_pos.size(); ++i)
      out += fmt::format("vllm:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", label, i,
                         m.spec_accepted_per_pos[i]);
  }
  auto histogram = [&](const char* name, const char* help, const Histogram& h) {
    head(name, "histogram", help);
    uint64_t cum = 0;
    for (size_t i = 0; i < h.bounds().size(); ++i) {
      cum += h.counts()[i];
      out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, label, h.bounds()[i], cum);
    }
    cum += h.counts().back();
    out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, label, cum);
    out += fmt::format("{}_sum{{{}}} {}\n", name, label, h.sum());
    out += fmt::format("{}_count{{{}}} {}\n", name, label, h.count());
  };
  histogram("vllm:time_to_first_token_seconds", "Time to first token.", m.time_to_first_token_seconds);
  histogram("vllm:inter_token_latency_seconds", "Time between tokens of a request.", m.inter_token_latency_seconds);
  histogram("vllm:e2e_request_latency_seconds", "Request latency, arrival to finish.", m.e2e_request_latency_seconds);
  histogram("vllm:request_queue_time_seconds", "Time waiting before first scheduled.", m.request_queue_time_seconds);
  histogram("vllm:request_prompt_tokens", "Prompt tokens per request.", m.request_prompt_tokens);
  histogram("vllm:request_generation_tokens", "Generated tokens per request.", m.request_generation_tokens);
  histogram("vllm:iteration_tokens_total", "Tokens per engine step.", m.iteration_tokens_total);
  return out;
}

}  // namespace halo::engine
