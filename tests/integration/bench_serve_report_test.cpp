// halo bench serve's figures (tools/halo/bench_serve_report.h) on records
// made by hand: percentiles as numpy computes them (the expected values
// below are numpy.percentile / mean / std of the same list), TPOT, goodput,
// failed requests left out, and the sweep chart.
#include "bench_serve_report.h"

#include <gtest/gtest.h>

#include "common/error.h"

using halo::tools::RequestRecord;
using halo::tools::SummaryOptions;

namespace {

RequestRecord ok(double ttft, double e2el, int tokens, int prompt = 10) {
  RequestRecord r;
  r.success = true;
  r.ttft_ms = ttft;
  r.e2el_ms = e2el;
  r.output_tokens = tokens;
  r.prompt_len = prompt;
  return r;
}

}  // namespace

TEST(BenchServeReport, PercentilesAreNumpys) {
  std::vector<RequestRecord> recs;
  for (double t : {12.5, 3.0, 7.25, 40.0, 1.5, 9.0, 22.0}) recs.push_back(ok(t, 100, 11));
  SummaryOptions o;
  o.percentiles = {37.5, 90, 99};
  auto run = halo::tools::summarize_run(recs, 2.0, o);
  const auto& d = run["ttft_ms"];
  EXPECT_DOUBLE_EQ(d["median"].get<double>(), 9.0);
  EXPECT_NEAR(d["p37.5"].get<double>(), 7.6875, 1e-12);
  EXPECT_NEAR(d["p90"].get<double>(), 29.2, 1e-12);
  EXPECT_NEAR(d["p99"].get<double>(), 38.92, 1e-12);
  EXPECT_NEAR(d["mean"].get<double>(), 13.607142857142858, 1e-12);
  EXPECT_NEAR(d["std"].get<double>(), 12.472725345770282, 1e-12);
  EXPECT_EQ(d["count"].get<int>(), 7);
}

TEST(BenchServeReport, ThroughputTpotGoodputAndFailures) {
  std::vector<RequestRecord> recs = {ok(10, 100, 10, 7), ok(25, 60, 1, 5), ok(20, 220, 21, 3)};
  RequestRecord failed;
  failed.error = "HTTP 500: boom";
  failed.prompt_len = 1000;
  recs.push_back(failed);
  SummaryOptions o;
  o.goodput = {halo::tools::parse_slo("ttft:30"), halo::tools::parse_slo("tpot:9.5")};
  auto run = halo::tools::summarize_run(recs, 4.0, o);
  EXPECT_EQ(run["completed"].get<int>(), 3);
  EXPECT_EQ(run["failed"].get<int>(), 1);
  EXPECT_EQ(run["errors"][0].get<std::string>(), "HTTP 500: boom");
  EXPECT_EQ(run["total_input_tokens"].get<int>(),
            15);  // the failed request's prompt is not counted
  EXPECT_EQ(run["total_output_tokens"].get<int>(), 32);
  EXPECT_DOUBLE_EQ(run["output_throughput"].get<double>(), 8.0);
  EXPECT_DOUBLE_EQ(run["request_throughput"].get<double>(), 0.75);
  // TPOT: (100-10)/9 = 10 and (220-20)/20 = 10; the one-token request has none.
  EXPECT_EQ(run["tpot_ms"]["count"].get<int>(), 2);
  EXPECT_DOUBLE_EQ(run["tpot_ms"]["mean"].get<double>(), 10.0);
  // Good: TTFT <= 30 and TPOT <= 9.5: only the one-token request (TPOT 0).
  EXPECT_EQ(run["goodput"]["good_requests"].get<int>(), 1);
  EXPECT_DOUBLE_EQ(run["goodput"]["request_throughput"].get<double>(), 0.25);
  EXPECT_FALSE(run["requests"][3]["success"].get<bool>());
}

TEST(BenchServeReport, SloSpecs) {
  auto s = halo::tools::parse_slo("e2el:1500.5");
  EXPECT_EQ(s.metric, "e2el");
  EXPECT_DOUBLE_EQ(s.ms, 1500.5);
  for (const char* bad : {"ttft", "ttft:", "ttft:-1", "ttft:0", "ttft:5ms", "latency:5", ":5"})
    EXPECT_THROW(halo::tools::parse_slo(bad), halo::Error) << bad;
}

TEST(BenchServeReport, SweepChartHasEveryRunAndEscapesText) {
  std::vector<nlohmann::ordered_json> runs;
  SummaryOptions o;
  for (double rate : {1.0, 4.0}) {
    auto run = halo::tools::summarize_run({ok(10 * rate, 100 * rate, 10)}, 1.0, o);
    run["request_rate"] = rate;
    runs.push_back(run);
  }
  auto inf = halo::tools::summarize_run({ok(90, 900, 10)}, 1.0, o);
  inf["request_rate"] = "inf";
  runs.push_back(inf);
  std::string svg = halo::tools::sweep_chart_svg(runs, "model <a&b>");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u);
  size_t polylines = 0, circles = 0;
  for (size_t i = 0; (i = svg.find("<polyline ", i)) != std::string::npos; ++i) ++polylines;
  for (size_t i = 0; (i = svg.find("<circle ", i)) != std::string::npos; ++i) ++circles;
  EXPECT_EQ(polylines, 6u);    // median and p99 of TTFT, TPOT, E2E
  EXPECT_EQ(circles, 3u * 6);  // a point per run on each
  EXPECT_NE(svg.find("model &lt;a&amp;b&gt;"), std::string::npos);
  EXPECT_EQ(svg.find("<a&b>"), std::string::npos);
  EXPECT_NE(svg.find(">inf</text>"), std::string::npos);
}
