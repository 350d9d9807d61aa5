#pragma once
// The figures of `halo bench serve`, named and computed as vLLM's
// benchmark_serving computes them (docs/bench-serve.md has the JSON schema):
//   TTFT  time to first token: request sent -> first generated text
//   TPOT  time per output token after the first: (E2E - TTFT) / (tokens - 1)
//   ITL   inter-token latency: the gap between consecutive text events
//   E2E   request sent -> last byte
// Throughputs divide by the run's duration (first request sent -> last one
// done); goodput counts only requests within every given SLO.
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace halo::tools {

struct RequestRecord {
  bool success = false;
  std::string error;
  int prompt_len = 0;
  int output_tokens = 0;
  double scheduled_s = 0;  // when the arrival process said it should start (from the run's start)
  double sent_s = 0;       // when it was sent (later under --max-concurrency)
  double ttft_ms = 0, e2el_ms = 0;
  std::vector<double> itl_ms;
  std::string text;  // generated, kept for --save-detailed
};

struct Slo {
  std::string metric;  // ttft, tpot, e2el
  double ms = 0;
};

struct SummaryOptions {
  std::vector<double> percentiles{50, 90, 99};
  std::vector<Slo> goodput;
  bool detailed = false;  // per-request ITLs and texts in the JSON
};

// One run's figures as the JSON object of docs/bench-serve.md ("runs" items).
nlohmann::ordered_json summarize_run(const std::vector<RequestRecord>& records, double duration_s,
                                     const SummaryOptions& o);
// The table vLLM prints, from summarize_run's object.
void print_run(const nlohmann::ordered_json& run);
// One line per run of a sweep: rate, throughput, latencies.
void print_sweep(const std::vector<nlohmann::ordered_json>& runs);
// Latency (TTFT, TPOT, E2E: median and p99) against output throughput, one
// point per run of a sweep, as a standalone SVG document.
std::string sweep_chart_svg(const std::vector<nlohmann::ordered_json>& runs,
                            const std::string& title);

// Parses "ttft:500" (milliseconds); throws halo::Error.
Slo parse_slo(const std::string& spec);

}  // namespace halo::tools
