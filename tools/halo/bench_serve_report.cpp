#include "bench_serve_report.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>

#include "common/error.h"

namespace halo::tools {
namespace {

using ojson = nlohmann::ordered_json;

// numpy.percentile's default (linear between the closest ranks), as vLLM reports.
double percentile(const std::vector<double>& sorted, double p) {
  if (sorted.empty()) return 0;
  double rank = p / 100.0 * static_cast<double>(sorted.size() - 1);
  size_t lo = static_cast<size_t>(std::floor(rank));
  size_t hi = std::min(lo + 1, sorted.size() - 1);
  return sorted[lo] + (sorted[hi] - sorted[lo]) * (rank - static_cast<double>(lo));
}

std::string pkey(double p) { return fmt::format("p{}", p); }

ojson distribution(std::vector<double> v, const std::vector<double>& percentiles) {
  std::sort(v.begin(), v.end());
  double mean =
      v.empty() ? 0 : std::accumulate(v.begin(), v.end(), 0.0) / static_cast<double>(v.size());
  double var = 0;
  for (double x : v) var += (x - mean) * (x - mean);
  ojson d;
  d["mean"] = mean;
  d["median"] = percentile(v, 50);
  d["std"] = v.empty() ? 0 : std::sqrt(var / static_cast<double>(v.size()));
  for (double p : percentiles) d[pkey(p)] = percentile(v, p);
  d["count"] = v.size();
  return d;
}

// A run's rate as given: a number, or "inf".
std::string rate_label(const ojson& r) {
  return r["request_rate"].is_string() ? r["request_rate"].get<std::string>()
                                       : fmt::format("{:g}", r["request_rate"].get<double>());
}

double tpot_ms(const RequestRecord& r) {
  return r.output_tokens > 1 ? (r.e2el_ms - r.ttft_ms) / (r.output_tokens - 1) : 0;
}

bool within(const RequestRecord& r, const std::vector<Slo>& slos) {
  for (const auto& s : slos) {
    double v = s.metric == "ttft" ? r.ttft_ms : s.metric == "tpot" ? tpot_ms(r) : r.e2el_ms;
    if (v > s.ms) return false;
  }
  return true;
}

}  // namespace

Slo parse_slo(const std::string& spec) {
  auto colon = spec.find(':');
  Slo s;
  s.metric = spec.substr(0, colon);
  if (colon == std::string::npos ||
      (s.metric != "ttft" && s.metric != "tpot" && s.metric != "e2el"))
    throw Error(fmt::format(
        "--goodput {}: write METRIC:MILLISECONDS with METRIC ttft, tpot or e2el", spec));
  try {
    size_t used = 0;
    s.ms = std::stod(spec.substr(colon + 1), &used);
    if (used != spec.size() - colon - 1 || !(s.ms > 0)) throw std::invalid_argument("");
  } catch (const std::exception&) {
    throw Error(
        fmt::format("--goodput {}: the limit must be a positive number of milliseconds", spec));
  }
  return s;
}

ojson summarize_run(const std::vector<RequestRecord>& records, double duration_s,
                    const SummaryOptions& o) {
  std::vector<double> ttft, tpot, itl, e2el;
  uint64_t in = 0, out = 0, good = 0;
  int completed = 0;
  ojson errors = ojson::array();
  for (const auto& r : records) {
    if (!r.success) {
      if (errors.size() < 10) errors.push_back(r.error);
      continue;
    }
    ++completed;
    in += r.prompt_len;
    out += r.output_tokens;
    ttft.push_back(r.ttft_ms);
    e2el.push_back(r.e2el_ms);
    if (r.output_tokens > 1) tpot.push_back(tpot_ms(r));
    itl.insert(itl.end(), r.itl_ms.begin(), r.itl_ms.end());
    if (within(r, o.goodput)) ++good;
  }
  const double d = duration_s > 0 ? duration_s : 1e-9;
  ojson run;
  run["duration_s"] = duration_s;
  run["num_requests"] = records.size();
  run["completed"] = completed;
  run["failed"] = records.size() - completed;
  run["errors"] = errors;
  run["total_input_tokens"] = in;
  run["total_output_tokens"] = out;
  run["request_throughput"] = completed / d;
  run["output_throughput"] = out / d;
  run["total_token_throughput"] = (in + out) / d;
  if (!o.goodput.empty()) {
    ojson slos;
    for (const auto& s : o.goodput) slos[s.metric + "_ms"] = s.ms;
    run["goodput"] = {{"slos", slos}, {"good_requests", good}, {"request_throughput", good / d}};
  } else {
    run["goodput"] = nullptr;
  }
  run["ttft_ms"] = distribution(ttft, o.percentiles);
  run["tpot_ms"] = distribution(tpot, o.percentiles);
  run["itl_ms"] = distribution(itl, o.percentiles);
  run["e2el_ms"] = distribution(e2el, o.percentiles);
  ojson reqs = ojson::array();
  for (const auto& r : records) {
    ojson j;
    j["success"] = r.success;
    if (!r.success) j["error"] = r.error;
    j["prompt_len"] = r.prompt_len;
    j["output_tokens"] = r.output_tokens;
    j["scheduled_s"] = r.scheduled_s;
    j["sent_s"] = r.sent_s;
    j["ttft_ms"] = r.ttft_ms;
    j["e2el_ms"] = r.e2el_ms;
    if (o.detailed) {
      j["itl_ms"] = r.itl_ms;
      j["generated_text"] = r.text;
    }
    reqs.push_back(std::move(j));
  }
  run["requests"] = std::move(reqs);
  return run;
}

void print_run(const ojson& run) {
  auto line = [](const std::string& name, const std::string& value) {
    fmt::print("{:<40}{:>12}\n", name, value);
  };
  auto num = [](const ojson& v) { return fmt::format("{:.2f}", v.get<double>()); };
  auto rule = [](const std::string& title) {
    std::string t = title.empty() ? std::string(52, '=') : title;
    if (!title.empty()) {
      size_t pad = 52 > t.size() + 2 ? (52 - t.size() - 2) : 0;
      t = std::string(pad / 2, '-') + " " + t + " " + std::string(pad - pad / 2, '-');
    }
    fmt::print("{}\n", t);
  };
  fmt::print("{:=^52}\n", " Serving Benchmark Result ");
  line("Successful requests:", fmt::format("{}", run["completed"].get<int>()));
  line("Failed requests:", fmt::format("{}", run["failed"].get<int>()));
  if (run.contains("max_concurrency") && !run["max_concurrency"].is_null())
    line("Maximum request concurrency:", fmt::format("{}", run["max_concurrency"].get<int>()));
  if (run.contains("request_rate"))
    line("Request rate (req/s):", run["request_rate"].is_string()
                                      ? run["request_rate"].get<std::string>()
                                      : num(run["request_rate"]));
  line("Benchmark duration (s):", num(run["duration_s"]));
  line("Total input tokens:", fmt::format("{}", run["total_input_tokens"].get<uint64_t>()));
  line("Total generated tokens:", fmt::format("{}", run["total_output_tokens"].get<uint64_t>()));
  line("Request throughput (req/s):", num(run["request_throughput"]));
  if (!run["goodput"].is_null())
    line("Request goodput (req/s):", num(run["goodput"]["request_throughput"]));
  line("Output token throughput (tok/s):", num(run["output_throughput"]));
  line("Total token throughput (tok/s):", num(run["total_token_throughput"]));
  const std::pair<const char*, const char*> metrics[] = {
      {"ttft_ms", "Time to First Token"},
      {"tpot_ms", "Time per Output Token (excl. 1st token)"},
      {"itl_ms", "Inter-token Latency"},
      {"e2el_ms", "End-to-end Latency"}};
  for (auto [key, title] : metrics) {
    rule(title);
    const ojson& d = run[key];
    std::string shortname = std::string(key).substr(0, std::string(key).size() - 3);
    for (auto& c : shortname) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    line(fmt::format("Mean {} (ms):", shortname), num(d["mean"]));
    line(fmt::format("Median {} (ms):", shortname), num(d["median"]));
    for (auto it = d.begin(); it != d.end(); ++it)
      if (it.key().starts_with("p") && it.key() != "p50")
        line(fmt::format("P{} {} (ms):", it.key().substr(1), shortname), num(*it));
  }
  rule("");
  for (const auto& e : run["errors"]) fmt::print("error: {}\n", e.get<std::string>());
}

void print_sweep(const std::vector<ojson>& runs) {
  fmt::print("\n{:>10} {:>8} {:>10} {:>12} {:>12} {:>12} {:>12} {:>12}\n", "rate", "ok", "req/s",
             "out tok/s", "TTFT p50", "TTFT p99", "TPOT p50", "E2E p50");
  for (const auto& r : runs) {
    const std::string rate = rate_label(r);
    fmt::print("{:>10} {:>8} {:>10.2f} {:>12.1f} {:>12.1f} {:>12.1f} {:>12.2f} {:>12.1f}\n", rate,
               r["completed"].get<int>(), r["request_throughput"].get<double>(),
               r["output_throughput"].get<double>(), r["ttft_ms"]["median"].get<double>(),
               r["ttft_ms"]["p99"].get<double>(), r["tpot_ms"]["median"].get<double>(),
               r["e2el_ms"]["median"].get<double>());
  }
}

namespace {

// 0, step, 2*step, ... covering `max` with about five steps of 1, 2 or 5 x 10^k.
double nice_step(double max) {
  if (!(max > 0)) return 1;
  double raw = max / 5, mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (raw <= m * mag) return m * mag;
  return 10 * mag;
}

std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '&')
      out += "&amp;";
    else if (c == '<')
      out += "&lt;";
    else if (c == '>')
      out += "&gt;";
    else if (c == '"')
      out += "&quot;";
    else
      out += c;
  }
  return out;
}

// One panel: `metric` (median solid, p99 dashed) against output tokens/s.
std::string panel(const std::vector<ojson>& runs, const char* metric, const char* title,
                  double x0) {
  const double w = 340, h = 250, left = 56, right = 12, top = 30, bottom = 44;
  double xmax = 0, ymax = 0;
  for (const auto& r : runs) {
    xmax = std::max(xmax, r["output_throughput"].get<double>());
    ymax = std::max(ymax, r[metric]["p99"].get<double>());
  }
  const double xs = nice_step(xmax * 1.05), ys = nice_step(ymax * 1.05);
  const double xtop = xs * std::ceil(xmax * 1.05 / xs), ytop = ys * std::ceil(ymax * 1.05 / ys);
  auto X = [&](double v) { return x0 + left + (w - left - right) * (xtop > 0 ? v / xtop : 0); };
  auto Y = [&](double v) { return top + (h - top - bottom) * (1 - (ytop > 0 ? v / ytop : 0)); };
  std::string s =
      fmt::format("<text x=\"{:.1f}\" y=\"18\" class=\"title\">{}</text>\n", x0 + left, title);
  for (double v = 0; v <= ytop + ys / 2; v += ys)
    s += fmt::format(
        "<line x1=\"{:.1f}\" x2=\"{:.1f}\" y1=\"{:.1f}\" y2=\"{:.1f}\" class=\"grid\"/>"
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"end\">{:g}</text>\n",
        X(0), X(xtop), Y(v), Y(v), X(0) - 4, Y(v) + 4, v);
  for (double v = 0; v <= xtop + xs / 2; v += xs)
    s += fmt::format(
        "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"tick\" text-anchor=\"middle\">{:g}</text>\n", X(v),
        h - bottom + 16, v);
  s += fmt::format(
      "<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"axis\" text-anchor=\"middle\">output "
      "tokens/s</text>\n",
      X(xtop / 2), h - 8);
  for (const char* stat : {"median", "p99"}) {
    std::string pts;
    for (const auto& r : runs)
      pts += fmt::format("{:.1f},{:.1f} ", X(r["output_throughput"].get<double>()),
                         Y(r[metric][stat].get<double>()));
    s += fmt::format("<polyline points=\"{}\" class=\"{}\"/>\n", pts, stat);
    for (const auto& r : runs) {
      double x = X(r["output_throughput"].get<double>()), y = Y(r[metric][stat].get<double>());
      s += fmt::format(
          "<circle cx=\"{:.1f}\" cy=\"{:.1f}\" r=\"3\" class=\"{}\"><title>rate {}: {} {:.2f} ms"
          "</title></circle>\n",
          x, y, stat, escape(rate_label(r)), stat, r[metric][stat].get<double>());
      if (std::string(stat) == "median")
        s += fmt::format("<text x=\"{:.1f}\" y=\"{:.1f}\" class=\"label\">{}</text>\n", x + 4,
                         y - 5, escape(rate_label(r)));
    }
  }
  return s;
}

}  // namespace

std::string sweep_chart_svg(const std::vector<ojson>& runs, const std::string& title) {
  const double panel_w = 340;
  std::string s = fmt::format(
      "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{0}\" height=\"278\" viewBox=\"0 0 {0} "
      "278\" "
      "font-family=\"sans-serif\">\n"
      "<style>.title{{font-size:13px;font-weight:bold}} .tick,.label{{font-size:10px;fill:#444}} "
      ".axis{{font-size:11px;fill:#222}} .grid{{stroke:#ddd;stroke-width:1}} "
      "polyline{{fill:none;stroke-width:2}} polyline.median{{stroke:#1f77b4}} "
      "polyline.p99{{stroke:#d62728;stroke-dasharray:5 3}} circle.median{{fill:#1f77b4}} "
      "circle.p99{{fill:#d62728}} .caption{{font-size:11px;fill:#222}}</style>\n"
      "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n",
      panel_w * 3);
  s += panel(runs, "ttft_ms", "TTFT (ms)", 0);
  s += panel(runs, "tpot_ms", "TPOT (ms)", panel_w);
  s += panel(runs, "e2el_ms", "E2E latency (ms)", 2 * panel_w);
  s += fmt::format(
      "<text x=\"10\" y=\"270\" class=\"caption\">{} - median (solid) and p99 (dashed); point "
      "labels: request "
      "rate (req/s)</text>\n</svg>\n",
      escape(title));
  return s;
}

}  // namespace halo::tools
