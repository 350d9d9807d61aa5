// `halo bench serve`: a serving benchmark against any OpenAI-compatible
// server (halo, vLLM, llama.cpp's server), as vLLM's benchmark_serving runs
// one: requests arrive at a chosen rate (Poisson, or gamma with a burstiness),
// stream their answers, and the run reports throughput, TTFT, TPOT, ITL and
// end-to-end latency, goodput under SLOs, and, over a list of rates, a chart
// of latency against throughput. docs/bench-serve.md has the options and the
// schema of --save-result.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "bench_serve_client.h"
#include "bench_serve_data.h"
#include "bench_serve_report.h"
#include "commands.h"
#include "common/error.h"
#include "model_source.h"
#include "serve/tokenizer_files.h"

namespace halo::tools {
namespace {

using ojson = nlohmann::ordered_json;
namespace fs = std::filesystem;
constexpr double kInf = std::numeric_limits<double>::infinity();

struct ServeBenchOptions {
  std::string base_url = "http://127.0.0.1:8000";
  std::string endpoint = "/v1/completions";
  std::string model;
  std::string api_key;
  DatasetOptions data;
  std::string request_rates = "inf";
  double burstiness = 1.0;
  int max_concurrency = 0;  // 0: no limit
  bool ignore_eos = false;
  double temperature = 0.0;
  std::vector<std::string> goodput;
  std::string percentiles = "50,90,99";
  std::string save_result;
  bool save_detailed = false;
  std::string chart;
  bool no_progress = false;
  ModelSource source;  // --tokenizer and the hub options (no compiled model)
};

std::vector<double> parse_rates(const std::string& spec) {
  std::vector<double> rates;
  std::stringstream in(spec);
  for (std::string item; std::getline(in, item, ',');) {
    if (item == "inf") {
      rates.push_back(kInf);
      continue;
    }
    try {
      size_t used = 0;
      double r = std::stod(item, &used);
      if (used != item.size() || !(r > 0) || !std::isfinite(r)) throw std::invalid_argument("");
      rates.push_back(r);
    } catch (const std::exception&) {
      throw Error(
          fmt::format("--request-rate {}: '{}' is neither a positive number nor inf", spec, item));
    }
  }
  if (rates.empty()) throw Error("--request-rate: give a rate, or rates separated by commas");
  return rates;
}

std::vector<double> parse_percentiles(const std::string& spec) {
  std::vector<double> ps;
  std::stringstream in(spec);
  bool has99 = false;
  for (std::string item; std::getline(in, item, ',');) {
    double p = 0;
    try {
      p = std::stod(item);
    } catch (const std::exception&) {
      p = -1;
    }
    if (!(p > 0 && p < 100))
      throw Error(fmt::format("--metric-percentiles {}: '{}' is not in (0, 100)", spec, item));
    has99 = has99 || p == 99;
    ps.push_back(p);
  }
  if (!has99) ps.push_back(99);  // the sweep chart draws p99
  return ps;
}

// Start times (seconds from the run's start) of a gamma arrival process of
// mean rate `rate`: shape `burstiness` (1 = Poisson), scale 1/(rate*burstiness).
std::vector<double> arrival_times(size_t n, double rate, double burstiness, uint64_t seed) {
  std::vector<double> t(n, 0.0);
  if (!std::isfinite(rate)) return t;
  std::mt19937_64 rng(seed);
  std::gamma_distribution<double> gap(burstiness, 1.0 / (rate * burstiness));
  double now = 0;
  for (size_t i = 0; i < n; ++i) {
    t[i] = now;
    now += gap(rng);
  }
  return t;
}

std::string request_body(const ServeBenchOptions& o, const std::string& model,
                         const BenchPrompt& p) {
  ojson b;
  b["model"] = model;
  if (o.endpoint == "/v1/chat/completions")
    b["messages"] = ojson::array({{{"role", "user"}, {"content", p.text}}});
  else
    b["prompt"] = p.text;
  b["max_tokens"] = p.output_len;
  b["temperature"] = o.temperature;
  b["stream"] = true;
  b["stream_options"] = {{"include_usage", true}};
  if (o.ignore_eos) b["ignore_eos"] = true;
  return b.dump();
}

// Redrawn in place on a terminal; on a pipe, a line every tenth of the run.
class Progress {
 public:
  Progress(size_t total, bool on) : total_(total), on_(on), tty_(on && isatty(STDERR_FILENO)) {}
  void update(size_t done, double seconds) {
    if (!on_) return;
    if (tty_) {
      auto now = BenchClock::now();
      if (done != total_ && now - last_ < std::chrono::milliseconds(100)) return;
      last_ = now;
      const int width = 30, filled = static_cast<int>(width * done / std::max<size_t>(total_, 1));
      std::fprintf(stderr, "\r[%s%s] %zu/%zu requests, %.1f s", std::string(filled, '#').c_str(),
                   std::string(width - filled, '.').c_str(), done, total_, seconds);
      if (done == total_) std::fputc('\n', stderr);
    } else if (done * 10 / std::max<size_t>(total_, 1) > shown_ || done == total_) {
      shown_ = done * 10 / std::max<size_t>(total_, 1);
      std::fprintf(stderr, "bench serve: %zu/%zu requests done, %.1f s\n", done, total_, seconds);
    }
  }

 private:
  size_t total_;
  bool on_, tty_;
  size_t shown_ = 0;
  BenchClock::time_point last_{};
};

double ms(BenchClock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Fills what the answer tells of `rec` (its schedule was set when it was sent).
void record_answer(RequestRecord& rec, StreamResult&& r, const text::Tokenizer& tok,
                   bool& used_tokenizer) {
  rec.success = r.success;
  rec.error = std::move(r.error);
  if (!rec.success) return;
  rec.ttft_ms = ms(r.chunks.front() - r.sent);
  rec.e2el_ms = ms(r.done - r.sent);
  for (size_t i = 1; i < r.chunks.size(); ++i)
    rec.itl_ms.push_back(ms(r.chunks[i] - r.chunks[i - 1]));
  // The server's own count when it sent usage, else the model's tokenizer on the text.
  if (r.usage_completion_tokens >= 0) {
    rec.output_tokens = static_cast<int>(r.usage_completion_tokens);
  } else {
    rec.output_tokens = static_cast<int>(tok.encode(r.text, false).size());
    used_tokenizer = true;
  }
  rec.text = std::move(r.text);
}

std::vector<std::string> auth_headers(const ServeBenchOptions& o) {
  if (o.api_key.empty()) return {};
  return {"Authorization: Bearer " + o.api_key};
}

// One run at one request rate; the run's object of the result (summarize_run).
ojson run_at_rate(const ServeBenchOptions& o, const std::string& model,
                  const std::vector<BenchPrompt>& prompts, double rate, const text::Tokenizer& tok,
                  const SummaryOptions& summary) {
  const std::string url = o.base_url + o.endpoint;
  const auto headers = auth_headers(o);
  const auto arrivals = arrival_times(prompts.size(), rate, o.burstiness, o.data.seed);
  std::vector<RequestRecord> records(prompts.size());
  StreamClient client;
  Progress progress(prompts.size(), !o.no_progress);
  size_t next = 0, done = 0;
  bool used_tokenizer = false;
  const auto t0 = BenchClock::now();
  BenchClock::time_point first_sent{}, last_done = t0;
  while (done < prompts.size()) {
    auto now = BenchClock::now();
    auto slot = [&] {
      return o.max_concurrency <= 0 || client.active() < static_cast<size_t>(o.max_concurrency);
    };
    while (next < prompts.size() && slot() && ms(now - t0) >= arrivals[next] * 1000) {
      const size_t i = next++;
      records[i].prompt_len = prompts[i].prompt_len;
      records[i].scheduled_s = arrivals[i];
      records[i].sent_s = ms(now - t0) / 1000;
      if (i == 0) first_sent = now;
      client.start(url, request_body(o, model, prompts[i]), headers, [&, i](StreamResult&& r) {
        last_done = r.done;
        record_answer(records[i], std::move(r), tok, used_tokenizer);
        ++done;
      });
      now = BenchClock::now();
    }
    auto wait = std::chrono::milliseconds(100);
    if (next < prompts.size() && slot()) {
      double until = arrivals[next] * 1000 - ms(BenchClock::now() - t0);
      wait = std::min(
          wait, std::chrono::milliseconds(static_cast<int64_t>(std::max(0.0, std::ceil(until)))));
    }
    client.poll(wait);
    progress.update(done, ms(BenchClock::now() - t0) / 1000);
  }
  ojson run;
  run["request_rate"] = std::isfinite(rate) ? ojson(rate) : ojson("inf");
  run["output_tokens_source"] = used_tokenizer ? "tokenizer" : "usage";
  run.update(summarize_run(records, ms(last_done - first_sent) / 1000, summary));
  return run;
}

// The first model the server lists, and where its tokenizer can be read:
// --tokenizer, else the listing's `root` when it is a directory here (halo
// and vLLM list the model's path), else the model name as a directory or Hub id.
std::pair<std::string, fs::path> find_model(const ServeBenchOptions& o) {
  auto list =
      nlohmann::json::parse(http_get(o.base_url + "/v1/models", auth_headers(o)), nullptr, false);
  std::string model = o.model, root;
  if (!list.is_discarded() && list.is_object() && list.contains("data") &&
      list["data"].is_array()) {
    for (const auto& m : list["data"]) {
      if (!m.is_object() || !m.contains("id") || !m["id"].is_string()) continue;
      if (model.empty()) model = m["id"].get<std::string>();
      if (m["id"] == model && m.contains("root") && m["root"].is_string())
        root = m["root"].get<std::string>();
    }
  }
  if (model.empty())
    throw Error(fmt::format("{}/v1/models lists no model: pass --model", o.base_url));
  ModelSource hub_only;
  hub_only.hub = o.source.hub;
  fs::path tok_dir;
  if (!o.source.tokenizer.empty())
    tok_dir = resolve_model_dir(o.source.tokenizer, hub_only);
  else if (!root.empty() && fs::is_directory(root))
    tok_dir = root;
  else
    tok_dir = resolve_model_dir(model, hub_only);
  return {model, tok_dir};
}

std::string utc_now() {
  std::time_t t = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return buf;
}

void write_file(const std::string& path, const std::string& text, const char* flag) {
  std::ofstream f(path);
  if (!f || !(f << text)) throw Error(fmt::format("{} {}: cannot write", flag, path));
}

void run_bench_serve(ServeBenchOptions o) {
  while (!o.base_url.empty() && o.base_url.back() == '/') o.base_url.pop_back();
  if (o.endpoint != "/v1/completions" && o.endpoint != "/v1/chat/completions")
    throw Error(
        fmt::format("--endpoint {}: choose /v1/completions or /v1/chat/completions", o.endpoint));
  if (!(o.burstiness > 0)) throw Error("--burstiness must be above 0");
  if (o.api_key.empty())
    if (const char* k = std::getenv("OPENAI_API_KEY")) o.api_key = k;
  const auto rates = parse_rates(o.request_rates);
  SummaryOptions summary;
  summary.percentiles = parse_percentiles(o.percentiles);
  for (const auto& g : o.goodput) summary.goodput.push_back(parse_slo(g));
  summary.detailed = o.save_detailed;

  auto [model, tok_dir] = find_model(o);
  text::Tokenizer tok = serve::load_tokenizer(tok_dir);
  auto prompts = make_bench_prompts(o.data, tok);
  spdlog::info("bench serve: {} requests ({} dataset) to {}{} for model {}, tokenizer {}",
               prompts.size(), o.data.name, o.base_url, o.endpoint, model, tok_dir.string());

  ojson result;
  result["schema_version"] = 1;
  result["tool"] = "halo bench serve";
  result["halo_version"] = HALO_VERSION;
  result["date"] = utc_now();
  result["base_url"] = o.base_url;
  result["endpoint"] = o.endpoint;
  result["model"] = model;
  result["tokenizer"] = tok_dir.string();
  result["dataset"] = {{"name", o.data.name},
                       {"path", o.data.path},
                       {"num_prompts", o.data.num_prompts},
                       {"random_input_len", o.data.random_input_len},
                       {"random_output_len", o.data.random_output_len},
                       {"random_range_ratio", o.data.random_range_ratio},
                       {"output_len", o.data.output_len},
                       {"seed", o.data.seed}};
  result["burstiness"] = o.burstiness;
  result["max_concurrency"] = o.max_concurrency > 0 ? ojson(o.max_concurrency) : ojson(nullptr);
  result["ignore_eos"] = o.ignore_eos;
  result["temperature"] = o.temperature;
  result["percentiles"] = summary.percentiles;
  result["runs"] = ojson::array();
  std::vector<ojson> runs;
  for (double rate : rates) {
    spdlog::info(
        "bench serve: request rate {}{}", std::isfinite(rate) ? fmt::format("{:g}/s", rate) : "inf",
        o.max_concurrency > 0 ? fmt::format(", at most {} in flight", o.max_concurrency) : "");
    ojson run = run_at_rate(o, model, prompts, rate, tok, summary);
    run["max_concurrency"] = result["max_concurrency"];
    print_run(run);
    runs.push_back(run);
    result["runs"].push_back(std::move(run));
  }
  if (runs.size() > 1) {
    print_sweep(runs);
    std::string chart = o.chart;
    if (chart.empty())
      chart = o.save_result.empty() ? "bench-serve-sweep.svg"
                                    : fs::path(o.save_result).replace_extension(".svg").string();
    write_file(chart,
               sweep_chart_svg(runs, fmt::format("{} at {}{}", model, o.base_url, o.endpoint)),
               "--chart");
    result["chart"] = chart;
    fmt::print("chart of latency against throughput: {}\n", chart);
  }
  if (!o.save_result.empty()) {
    write_file(o.save_result, result.dump(2) + "\n", "--save-result");
    fmt::print("results: {}\n", o.save_result);
  }
}

}  // namespace

void add_bench_serve_command(CLI::App& bench) {
  auto o = std::make_shared<ServeBenchOptions>();
  auto* cmd = bench.add_subcommand("serve",
                                   "Serving benchmark of a running OpenAI-compatible server (halo, "
                                   "vLLM, llama.cpp): TTFT, TPOT, ITL, "
                                   "throughput at a request rate");
  cmd->add_option("--base-url", o->base_url, "The server")->capture_default_str();
  cmd->add_option("--endpoint", o->endpoint, "/v1/completions or /v1/chat/completions")
      ->capture_default_str();
  cmd->add_option("--model", o->model, "Model name to request (default: the first of /v1/models)");
  cmd->add_option("--api-key", o->api_key,
                  "Sent as 'Authorization: Bearer KEY' (default: env OPENAI_API_KEY)");
  cmd->add_option("--dataset-name", o->data.name, "random, sharegpt or prompts")
      ->capture_default_str();
  cmd->add_option(
      "--dataset-path", o->data.path,
      "ShareGPT JSON file, or a prompts file (a prompt per line, or JSON lines with \"prompt\")");
  cmd->add_option("--num-prompts", o->data.num_prompts, "Requests to send")->capture_default_str();
  cmd->add_option("--random-input-len", o->data.random_input_len, "random: prompt tokens")
      ->capture_default_str();
  cmd->add_option("--random-output-len", o->data.random_output_len, "random: tokens to generate")
      ->capture_default_str();
  cmd->add_option("--random-range-ratio", o->data.random_range_ratio,
                  "random: lengths drawn uniformly within +/- this fraction")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  cmd->add_option(
      "--output-len,--sharegpt-output-len", o->data.output_len,
      "sharegpt: tokens to generate instead of each reply's length; prompts: tokens to generate "
      "(default 128)");
  cmd->add_option("--request-rate", o->request_rates,
                  "Requests per second (inf: all at once); a list such as 1,2,4,8,inf runs each "
                  "and charts them")
      ->capture_default_str();
  cmd->add_option(
         "--burstiness", o->burstiness,
         "Shape of the gamma arrival process: 1 is Poisson, below 1 burstier, above 1 steadier")
      ->capture_default_str();
  cmd->add_option("--max-concurrency", o->max_concurrency,
                  "At most this many requests in flight (0: no limit)")
      ->check(CLI::NonNegativeNumber);
  cmd->add_option("--seed", o->data.seed, "Seed of the dataset and of the arrival times")
      ->capture_default_str();
  cmd->add_flag("--ignore-eos", o->ignore_eos,
                "Ask the server to generate every requested token (ignore_eos)");
  cmd->add_option("--temperature", o->temperature, "Sampling temperature of every request")
      ->capture_default_str();
  cmd->add_option(
      "--goodput", o->goodput,
      "Service-level objectives a request must meet to count as good: ttft:MS tpot:MS e2el:MS");
  cmd->add_option("--metric-percentiles", o->percentiles, "Percentiles to report, e.g. 50,90,99")
      ->capture_default_str();
  cmd->add_option("--save-result", o->save_result,
                  "Write the results as JSON (docs/bench-serve.md) to this file");
  cmd->add_flag("--save-detailed", o->save_detailed,
                "Also each request's inter-token latencies and text");
  cmd->add_option("--chart", o->chart,
                  "A sweep's chart of latency against throughput (SVG; default: --save-result's "
                  "name with .svg, "
                  "else bench-serve-sweep.svg)");
  cmd->add_flag("--no-progress,--disable-tqdm", o->no_progress, "No progress bar");
  cmd->add_option("--tokenizer", o->source.tokenizer,
                  "Tokenizer directory or Hugging Face id that counts the tokens (default: the "
                  "model's directory as "
                  "/v1/models lists it, else --model)");
  add_hub_options(*cmd, o->source.hub);
  cmd->callback([o] { run_bench_serve(*o); });
}

}  // namespace halo::tools
