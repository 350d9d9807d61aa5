// `halo bench throughput`: offline throughput of the engine on a workload of N
// prompts, run once with everything submitted at once (continuous batching)
// and once one request at a time, so the gain of batching is a ratio measured
// in the same run on the same machine. With --num-lora-adapters the engine
// has LoRA enabled and the batched run is measured again with every request
// on one of N random adapters, against the base-only batched run.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>

#include "bench_stats.h"
#include "commands.h"
#include "common/error.h"
#include "device/plugin.h"
#include "engine/lora.h"
#include "model/lora_adapter.h"
#include "model/weight_map.h"
#include "model_source.h"
#include "serve/tokenizer_files.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::tools {
namespace fs = std::filesystem;
namespace {

struct BenchOptions {
  std::string model_dir;
  int num_prompts = 64;
  int input_len = 128;
  int output_len = 128;
  double range_ratio = 0.0;
  std::string dataset;
  std::string output_json;
  int baseline_prompts = -1;  // -1: all; 0: skip the one-at-a-time run
  uint64_t workload_seed = 0;
  double spec_replay = -1;  // >= 0: proposals are the plain run's output, this fraction corrupted
  int num_speculative_tokens = 4;
  std::string task = "generate";  // embed: every request is a pooling request
  std::string pooling_type = "LAST";
  int num_lora_adapters = 0;  // > 0: a second batched run, request i on adapter i % N
  int lora_rank = 16;
  engine::EngineConfig engine;
  ModelSource source;
};

struct WorkItem {
  std::vector<int32_t> prompt;
  int output_len;
  engine::PoolingParams pooling;  // active: an embedding request (output_len unused)
};

struct RunResult {
  double seconds = 0;
  uint64_t input_tokens = 0, output_tokens = 0;
  std::vector<double> step_ms;
  double peak_kv = 0;
  uint64_t preemptions = 0;
  size_t max_batch = 0;
  std::optional<device::DeviceStats> device;  // device counters over the run (ABI v1.1 device_get_stats)
  uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted = 0;
  uint64_t embeddings = 0;
  std::vector<std::vector<int32_t>> outputs;  // per item
};

// Dataset: JSON lines ({"prompt": text | "prompt_token_ids": [...], "output_len": N})
// or a ShareGPT-style JSON list (first human turn = prompt, the reply's length = output).
std::vector<WorkItem> load_dataset(const std::string& path, const text::Tokenizer& tok, const BenchOptions& o) {
  std::ifstream in(path);
  if (!in) throw Error(fmt::format("--dataset {}: cannot open", path));
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<WorkItem> items;
  auto add_json = [&](const nlohmann::json& j, const std::string& where) {
    WorkItem w;
    w.output_len = o.output_len;
    if (j.contains("conversations")) {
      const auto& c = j["conversations"];
      if (!c.is_array() || c.size() < 2) return;
      w.prompt = tok.encode(c[0].value("value", ""), true);
      w.output_len = std::max<int>(1, static_cast<int>(tok.encode(c[1].value("value", ""), false).size()));
    } else if (j.contains("prompt_token_ids")) {
      w.prompt = j["prompt_token_ids"].get<std::vector<int32_t>>();
    } else if (j.contains("prompt") && j["prompt"].is_string()) {
      w.prompt = tok.encode(j["prompt"].get<std::string>(), true);
    } else {
      throw Error(fmt::format("{}: needs \"prompt\", \"prompt_token_ids\" or \"conversations\"", where));
    }
    if (j.contains("output_len")) w.output_len = j["output_len"].get<int>();
    if (!w.prompt.empty()) items.push_back(std::move(w));
  };
  auto doc = nlohmann::json::parse(all, nullptr, false);
  if (!doc.is_discarded() && doc.is_array()) {
    for (size_t i = 0; i < doc.size(); ++i) add_json(doc[i], fmt::format("{}[{}]", path, i));
  } else {
    std::istringstream lines(all);
    std::string line;
    int n = 0;
    while (std::getline(lines, line)) {
      ++n;
      if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
      auto j = nlohmann::json::parse(line, nullptr, false);
      if (j.is_discarded()) throw Error(fmt::format("{}:{}: not valid JSON", path, n));
      add_json(j, fmt::format("{}:{}", path, n));
    }
  }
  if (items.empty()) throw Error(fmt::format("--dataset {}: no usable prompts", path));
  if (static_cast<int>(items.size()) > o.num_prompts) items.resize(o.num_prompts);
  return items;
}

std::vector<WorkItem> random_workload(const BenchOptions& o, int vocab) {
  std::mt19937_64 rng(o.workload_seed);
  auto len = [&](int base) {
    int lo = std::max(1, static_cast<int>(base * (1.0 - o.range_ratio)));
    int hi = std::max(lo, static_cast<int>(base * (1.0 + o.range_ratio)));
    return std::uniform_int_distribution<int>(lo, hi)(rng);
  };
  std::uniform_int_distribution<int32_t> id(std::min(vocab - 1, 10), vocab - 1);
  std::vector<WorkItem> items(o.num_prompts);
  for (auto& w : items) {
    w.prompt.resize(len(o.input_len));
    for (auto& t : w.prompt) t = id(rng);
    w.output_len = len(o.output_len);
  }
  return items;
}

using LoraList = std::vector<std::shared_ptr<const engine::LoraRequest>>;

// Runs items[begin, end) submitted together and drains the engine; with
// `loras`, item i runs on loras[i % loras.size()].
void run_batch(engine::LLMEngine& eng, const std::vector<WorkItem>& items, size_t begin, size_t end,
               RunResult& r, uint64_t& next_id, const LoraList& loras = {}) {
  const uint64_t first_id = next_id;
  r.outputs.resize(items.size());
  const auto st0 = eng.stats();
  for (size_t i = begin; i < end; ++i) {
    engine::SamplingParams p;
    p.temperature = 0;  // identical work in both runs
    p.ignore_eos = true;
    p.max_tokens = items[i].output_len;
    if (items[i].pooling.active()) {
      p.pooling = items[i].pooling;
      p.max_tokens = 1;
    }
    if (!loras.empty()) p.lora = loras[i % loras.size()];
    eng.add_request(std::to_string(next_id++), items[i].prompt, p);
    r.input_tokens += items[i].prompt.size();
  }
  while (eng.has_unfinished()) {
    auto t0 = std::chrono::steady_clock::now();
    auto outs = eng.step();
    r.step_ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    auto st = eng.stats();
    r.peak_kv = std::max<double>(r.peak_kv, st.kv_cache_usage);
    r.max_batch = std::max(r.max_batch, st.num_running);
    for (const auto& o : outs) {
      r.output_tokens += o.new_token_ids.size();
      r.embeddings += o.finished && !o.seq->embedding.empty();
      auto& v = r.outputs[begin + (std::stoull(o.request_id) - first_id)];
      v.insert(v.end(), o.new_token_ids.begin(), o.new_token_ids.end());
    }
  }
  const auto st1 = eng.stats();
  r.spec_drafts += st1.spec_num_drafts - st0.spec_num_drafts;
  r.spec_draft_tokens += st1.spec_num_draft_tokens - st0.spec_num_draft_tokens;
  r.spec_accepted += st1.spec_num_accepted_tokens - st0.spec_num_accepted_tokens;
}

nlohmann::ordered_json report(const char* name, const RunResult& r, size_t requests) {
  nlohmann::ordered_json j;
  j["mode"] = name;
  j["requests"] = requests;
  j["duration_s"] = r.seconds;
  j["requests_per_s"] = requests / r.seconds;
  j["input_tokens"] = r.input_tokens;
  j["output_tokens"] = r.output_tokens;
  j["input_tokens_per_s"] = r.input_tokens / r.seconds;
  j["output_tokens_per_s"] = r.output_tokens / r.seconds;
  if (r.embeddings > 0) {
    j["embeddings"] = r.embeddings;
    j["embeddings_per_s"] = r.embeddings / r.seconds;
  }
  j["total_tokens_per_s"] = (r.input_tokens + r.output_tokens) / r.seconds;
  j["steps"] = r.step_ms.size();
  j["step_ms_p50"] = percentile(r.step_ms, 50);
  j["step_ms_p90"] = percentile(r.step_ms, 90);
  j["step_ms_p99"] = percentile(r.step_ms, 99);
  j["peak_kv_cache_usage"] = r.peak_kv;
  j["max_running"] = r.max_batch;
  j["preemptions"] = r.preemptions;
  if (r.spec_draft_tokens > 0) {  // as vLLM reports them
    j["spec_acceptance_rate"] = double(r.spec_accepted) / double(r.spec_draft_tokens);
    j["spec_mean_accepted_length"] = 1.0 + double(r.spec_accepted) / double(r.spec_drafts);
  }
  if (r.device && r.device->device_seconds > 0) {  // e.g. the rbln simulator's clock
    const auto& d = *r.device;
    nlohmann::ordered_json dj;
    dj["steps"] = d.steps;
    dj["seconds"] = d.device_seconds;
    dj["output_tokens_per_s"] = r.output_tokens / d.device_seconds;
    dj["total_tokens_per_s"] = (r.input_tokens + r.output_tokens) / d.device_seconds;
    dj["compute_share"] = d.compute_seconds / d.device_seconds;
    dj["memory_share"] = d.memory_seconds / d.device_seconds;
    dj["link_share"] = d.link_seconds / d.device_seconds;
    dj["chip_memory_used_bytes"] = d.chip_memory_used;
    dj["chip_memory_capacity_bytes"] = d.chip_memory_capacity;
    j["device"] = dj;
  }
  return j;
}

void print_report(const nlohmann::ordered_json& j) {
  fmt::print("{:<26} {}\n", "mode", j["mode"].get<std::string>());
  fmt::print("{:<26} {}\n", "requests", j["requests"].get<size_t>());
  fmt::print("{:<26} {:.2f}\n", "duration (s)", j["duration_s"].get<double>());
  fmt::print("{:<26} {:.2f}\n", "requests/s", j["requests_per_s"].get<double>());
  fmt::print("{:<26} {:.1f}\n", "input tokens/s", j["input_tokens_per_s"].get<double>());
  fmt::print("{:<26} {:.1f}\n", "output tokens/s", j["output_tokens_per_s"].get<double>());
  if (j.contains("embeddings_per_s"))
    fmt::print("{:<26} {:.2f}\n", "embeddings/s", j["embeddings_per_s"].get<double>());
  fmt::print("{:<26} {:.2f} / {:.2f} / {:.2f}\n", "step ms p50/p90/p99", j["step_ms_p50"].get<double>(),
             j["step_ms_p90"].get<double>(), j["step_ms_p99"].get<double>());
  fmt::print("{:<26} {:.1f}%\n", "peak KV cache usage", 100 * j["peak_kv_cache_usage"].get<double>());
  fmt::print("{:<26} {}\n", "max running", j["max_running"].get<size_t>());
  fmt::print("{:<26} {}\n", "preemptions", j["preemptions"].get<uint64_t>());
  if (j.contains("spec_acceptance_rate"))
    fmt::print("{:<26} {:.1f}% / {:.2f}\n", "acceptance / mean length", 100 * j["spec_acceptance_rate"].get<double>(),
               j["spec_mean_accepted_length"].get<double>());
  if (j.contains("device")) {
    const auto& d = j["device"];
    fmt::print("{:<26} {:.4f} s ({} programs)\n", "device time (simulated)", d["seconds"].get<double>(),
               d["steps"].get<uint64_t>());
    fmt::print("{:<26} {:.1f}\n", "device output tokens/s", d["output_tokens_per_s"].get<double>());
    fmt::print("{:<26} {:.1f}\n", "device total tokens/s", d["total_tokens_per_s"].get<double>());
    fmt::print("{:<26} {:.1f}% / {:.1f}% / {:.1f}%\n", "compute / memory / link", 100 * d["compute_share"].get<double>(),
               100 * d["memory_share"].get<double>(), 100 * d["link_share"].get<double>());
    const auto used = d["chip_memory_used_bytes"].get<std::vector<uint64_t>>();
    const auto cap = d["chip_memory_capacity_bytes"].get<std::vector<uint64_t>>();
    for (size_t c = 0; c < used.size(); ++c)
      fmt::print("{:<26} {:.1f} MiB of {:.1f} MiB\n", fmt::format("chip {} memory", c), used[c] / 1048576.0,
                 cap[c] / 1048576.0);
  }
  fmt::print("\n");
}

// The same items with speculative decoding: proposals from --speculative-config,
// or replayed from the plain run's outputs (--spec-replay); the speed-up over
// the plain run and whether every output stayed the same.
template <class Timed>
void run_speculative(const BenchOptions& o, std::shared_ptr<model::LoadedModel> model,
                     const std::vector<WorkItem>& items, const RunResult& plain, uint64_t& next_id, Timed&& timed,
                     nlohmann::ordered_json& out) {
  engine::LLMEngine spec_eng(o.engine, model);
  if (o.spec_replay >= 0) {
    auto replay = std::make_unique<engine::spec::ReplayProposer>(model->config().spec.vocab_size, o.spec_replay,
                                                                 o.workload_seed);
    for (size_t i = 0; i < items.size(); ++i) replay->set_script(std::to_string(next_id + i), plain.outputs[i]);
    spec_eng.set_proposer(std::move(replay), o.num_speculative_tokens);
  }
  RunResult sr = timed([&](RunResult& r) { run_batch(spec_eng, items, 0, items.size(), r, next_id); }, &spec_eng);
  out["speculative"] = report("speculative decoding", sr, items.size());
  out["speculative"]["config"] = spec_eng.speculative_config()->to_json();
  print_report(out["speculative"]);
  size_t same = 0;
  for (size_t i = 0; i < items.size(); ++i) same += sr.outputs[i] == plain.outputs[i];
  out["speculative"]["outputs_equal_to_plain"] = same;
  const double speedup =
      out["speculative"]["output_tokens_per_s"].get<double>() / out["batched"]["output_tokens_per_s"].get<double>();
  out["speculative_speedup_output_tokens_per_s"] = speedup;
  fmt::print("speculative decoding speed-up (output tokens/s): {:.2f}x; {} of {} outputs equal to plain\n", speedup,
             same, items.size());
}

// N random adapters over every projection of every layer, rank R, scale 1,
// from a fixed seed: A normal with std 1/sqrt(in), B with std 0.1/sqrt(R), so
// the delta is about a tenth of the projection's input in size whatever the
// shape (about 0.02 each on a 2048-wide model at rank 16): small, yet enough
// to change greedy outputs of a small trained model.
LoraList random_adapters(const model::ModelConfig& config, int n, int rank, uint64_t seed) {
  LoraList out;
  for (int k = 0; k < n; ++k) {
    auto ad = std::make_shared<model::LoraAdapter>();
    ad->dir = fmt::format("bench-lora-{}", k);
    ad->config.r = rank;
    ad->config.lora_alpha = rank;
    ad->config.target_modules = {"q_proj",    "k_proj",  "v_proj",   "o_proj",
                                 "gate_proj", "up_proj", "down_proj"};
    std::mt19937_64 rng(seed * 1000003 + static_cast<uint64_t>(k) + 1);
    for (const auto& ws : model::expected_weights(config)) {
      // The layers' projections (not lm_head: adapters never target it).
      if (ws.canonical.rfind("layers.", 0) != 0 || !model::is_projection_weight(ws.canonical))
        continue;
      model::LoraWeight w;
      w.canonical = ws.canonical;
      w.rank = rank;
      w.scale = 1.0f;
      w.out = ws.shape[0];
      w.in = ws.shape[1];
      w.a.resize(static_cast<size_t>(rank * w.in));
      w.b.resize(static_cast<size_t>(w.out * rank));
      std::normal_distribution<float> a_value(0.0f,
                                              static_cast<float>(1.0 / std::sqrt(double(w.in))));
      std::normal_distribution<float> b_value(0.0f,
                                              static_cast<float>(0.1 / std::sqrt(double(rank))));
      for (auto& v : w.a) v = a_value(rng);
      for (auto& v : w.b) v = b_value(rng);
      ad->weights.push_back(std::move(w));
    }
    auto req = std::make_shared<engine::LoraRequest>();
    req->name = ad->dir.string();
    req->id = k + 1;
    req->cache_name = req->name;
    req->adapter = std::move(ad);
    out.push_back(std::move(req));
  }
  return out;
}

// The same items on the same engine with request i on adapter i % N: LoRA's
// throughput against the base-only batched run, and whether the adapters
// changed any output (they must have run).
template <class Timed>
void run_lora(const BenchOptions& o, const model::ModelConfig& config, engine::LLMEngine& eng,
              const std::vector<WorkItem>& items, const RunResult& base, uint64_t& next_id,
              Timed&& timed, nlohmann::ordered_json& out) {
  const LoraList loras = random_adapters(config, o.num_lora_adapters, o.lora_rank, o.workload_seed);
  RunResult lr =
      timed([&](RunResult& r) { run_batch(eng, items, 0, items.size(), r, next_id, loras); });
  out["lora"] = report("LoRA adapters", lr, items.size());
  out["lora"]["num_adapters"] = o.num_lora_adapters;
  out["lora"]["rank"] = o.lora_rank;
  print_report(out["lora"]);
  size_t same = 0;
  for (size_t i = 0; i < items.size(); ++i) same += lr.outputs[i] == base.outputs[i];
  out["lora"]["outputs_equal_to_base"] = same;
  out["lora"]["outputs_differ_from_base"] = same < items.size();
  const double ratio = out["lora"]["output_tokens_per_s"].get<double>() /
                       out["batched"]["output_tokens_per_s"].get<double>();
  out["lora_vs_base_output_tokens_per_s"] = ratio;
  fmt::print(
      "LoRA ({} adapters, rank {}) vs base only (output tokens/s): {:.2f}x; {} of {} outputs equal "
      "to base\n",
      o.num_lora_adapters, o.lora_rank, ratio, same, items.size());
}

// The requests: a dataset's, or random ones; pooled for --task embed.
std::vector<WorkItem> throughput_items(const BenchOptions& o, const fs::path& dir, int vocab_size) {
  std::vector<WorkItem> items;
  if (!o.dataset.empty()) {
    items = load_dataset(o.dataset, serve::load_tokenizer(resolve_tokenizer_dir(dir, o.source)), o);
  } else {
    items = random_workload(o, vocab_size);
  }
  if (o.task == "embed") {
    engine::PoolingParams pool;
    pool.type = engine::parse_pooling_type(o.pooling_type);
    for (auto& w : items) w.pooling = pool;
  }
  return items;
}

uint64_t parameter_count(const model::LoadedModel& model) {
  uint64_t params = 0;
  for (const auto& w : model.weights()) {
    uint64_t n = 1;
    for (int d = 0; d < w.tensor->ndim; ++d) n *= w.tensor->shape[d];
    params += n;
  }
  return params;
}

void run_throughput(const BenchOptions& o) {
  const bool lora_mode = o.num_lora_adapters > 0;
  if (lora_mode && o.task == "embed") throw Error("--num-lora-adapters: not with --task embed");
  if (lora_mode && (o.spec_replay >= 0 || !o.engine.speculative_config.empty()))
    throw Error("--num-lora-adapters: not with speculative decoding");
  const fs::path dir = resolve_model_dir(o.model_dir, o.source);
  auto model = std::make_shared<model::LoadedModel>(
      model::LoadedModel::load(dir, engine::load_options(o.engine)));
  std::vector<WorkItem> items = throughput_items(o, dir, model->config().spec.vocab_size);
  // Speculative decoding is measured against plain decoding of the same items.
  const bool spec_mode = o.spec_replay >= 0 || !o.engine.speculative_config.empty();
  engine::EngineConfig plain_cfg = o.engine;
  plain_cfg.speculative_config.clear();
  if (lora_mode) {  // one engine for the base-only and the LoRA runs
    plain_cfg.enable_lora = true;
    plain_cfg.max_loras = o.num_lora_adapters;
    plain_cfg.max_lora_rank = o.lora_rank;
  }
  engine::LLMEngine eng(plain_cfg, model);
  for (auto& w : items) {  // keep every request inside the context
    int room = eng.max_model_len() - 1;
    if (static_cast<int>(w.prompt.size()) > room - 1) w.prompt.resize(room - 1);
    w.output_len = std::max(1, std::min<int>(w.output_len, room - static_cast<int>(w.prompt.size())));
  }
  const uint64_t params = parameter_count(*model);
  spdlog::info("bench throughput: {} requests on {} ({:.1f}M parameters), device {}", items.size(),
               dir.filename().string(), params / 1e6, o.engine.device);

  uint64_t next_id = 0;
  // The same library the engine loaded (dlopen returns it again): its device counters.
  auto plugin = device::Plugin::load(o.engine.device);
  auto timed = [&](auto&& body, engine::LLMEngine* e = nullptr) {
    engine::LLMEngine& eng_run = e ? *e : eng;
    RunResult r;
    uint64_t pre0 = eng_run.stats().num_preemptions;
    auto dev0 = plugin->device_stats(o.engine.device_index);
    auto t0 = std::chrono::steady_clock::now();
    body(r);
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    r.preemptions = eng_run.stats().num_preemptions - pre0;
    if (auto dev1 = plugin->device_stats(o.engine.device_index); dev0 && dev1) {
      r.device = *dev1;
      r.device->steps -= dev0->steps;
      r.device->tokens -= dev0->tokens;
      r.device->device_seconds -= dev0->device_seconds;
      r.device->compute_seconds -= dev0->compute_seconds;
      r.device->memory_seconds -= dev0->memory_seconds;
      r.device->link_seconds -= dev0->link_seconds;
    }
    return r;
  };
  RunResult batched = timed([&](RunResult& r) { run_batch(eng, items, 0, items.size(), r, next_id); });
  nlohmann::ordered_json out;
  out["model"] = dir.string();
  out["parameters"] = params;
  out["device"] = o.engine.device;
  out["max_num_seqs"] = eng.limits().max_num_seqs;
  out["kv_blocks"] = eng.num_kv_blocks();
  out["block_size"] = eng.limits().block_size;
  out["batched"] = report("continuous batching", batched, items.size());
  print_report(out["batched"]);

  if (spec_mode) run_speculative(o, model, items, batched, next_id, timed, out);
  if (lora_mode) run_lora(o, model->config(), eng, items, batched, next_id, timed, out);
  size_t nb = o.baseline_prompts < 0 ? items.size() : std::min<size_t>(o.baseline_prompts, items.size());
  if (spec_mode || lora_mode) nb = 0;  // the baseline is the plain (base-only) batched run above
  if (nb > 0) {
    RunResult serial = timed([&](RunResult& r) {
      for (size_t i = 0; i < nb; ++i) run_batch(eng, items, i, i + 1, r, next_id);
    });
    out["one_at_a_time"] = report("one request at a time", serial, nb);
    print_report(out["one_at_a_time"]);
    const char* rate = o.task == "embed" ? "embeddings_per_s" : "output_tokens_per_s";
    double gain = out["batched"][rate].get<double>() / out["one_at_a_time"][rate].get<double>();
    out[o.task == "embed" ? "batching_gain_embeddings_per_s"
                          : "batching_gain_output_tokens_per_s"] = gain;
    fmt::print("continuous batching gain ({}): {:.2f}x\n",
               o.task == "embed" ? "embeddings/s" : "output tokens/s", gain);
  }
  if (!o.output_json.empty()) {
    std::ofstream f(o.output_json);
    if (!f) throw Error(fmt::format("--output-json {}: cannot write", o.output_json));
    f << out.dump(2) << "\n";
  }
}

}  // namespace

void add_bench_command(CLI::App& app) {
  auto* bench = app.add_subcommand("bench", "Benchmarks of the whole system");
  bench->require_subcommand(1);
  auto o = std::make_shared<BenchOptions>();
  auto* cmd = bench->add_subcommand("throughput", "Offline throughput: batched vs one request at a time");
  cmd->add_option("model", o->model_dir, "Hugging Face model directory or id (default: the embedded pkgchat-5m); "
                                         "make one of any size with tools/make_test_model.py");
  cmd->add_option("--num-prompts", o->num_prompts, "Requests in the workload")->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "Prompt tokens per random request")->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "Generated tokens per request")->capture_default_str();
  cmd->add_option("--range-ratio", o->range_ratio, "Random lengths vary by +/- this fraction")
      ->check(CLI::Range(0.0, 1.0))->capture_default_str();
  cmd->add_option("--dataset", o->dataset, "JSON lines or ShareGPT JSON instead of random prompts");
  cmd->add_option("--workload-seed", o->workload_seed, "Seed of the random workload")->capture_default_str();
  cmd->add_option("--baseline-prompts", o->baseline_prompts,
                  "Requests to run one at a time for the baseline (-1: all, 0: skip)")->capture_default_str();
  cmd->add_option("--output-json", o->output_json, "Write the results as JSON to this file");
  cmd->add_option("--spec-replay", o->spec_replay,
                  "Speculative decoding against plain decoding, with proposals replayed from the plain run's "
                  "output and this fraction of them corrupted (1 - about the acceptance rate)")
      ->check(CLI::Range(0.0, 1.0));
  cmd->add_option("--task", o->task,
                  "generate, or embed: every request is an embedding (pooling) request")
      ->check(CLI::IsMember({"generate", "embed"}))
      ->capture_default_str();
  cmd->add_option("--pooling-type", o->pooling_type, "With --task embed: LAST, MEAN or CLS")
      ->check(CLI::IsMember({"LAST", "MEAN", "CLS"}, CLI::ignore_case))
      ->capture_default_str();
  cmd->add_option("--num-speculative-tokens", o->num_speculative_tokens, "Proposals per verify for --spec-replay")
      ->check(CLI::Range(1, 16))->capture_default_str();
  cmd->add_option(
         "--num-lora-adapters", o->num_lora_adapters,
         "LoRA against base only: N random adapters (every projection), the batched run again with "
         "request i on adapter i % N, on the same engine (--enable-lora, --max-loras N); 0: off")
      ->check(CLI::Range(0, 256))
      ->capture_default_str();
  cmd->add_option("--lora-rank", o->lora_rank,
                  "Rank of the --num-lora-adapters adapters (--max-lora-rank)")
      ->check(CLI::Range(1, 512))
      ->capture_default_str();
  add_engine_options(*cmd, o->engine);
  add_model_source_options(*cmd, o->source);
  cmd->callback([o] { run_throughput(*o); });
  add_bench_latency_command(*bench);
  add_bench_serve_command(*bench);
}

}  // namespace halo::tools
