// `halo serve`: one or more models over HTTP: the OpenAI-compatible API
// (vLLM's `vllm serve`), KServe v2 / Triton generate and the SageMaker LMI
// contract, on one port.
//
// Models: the positional MODEL_DIR and every `--model [NAME=]DIR`, plus every
// model of `--model-repository DIR` (Triton layout); with none of these, the
// SageMaker environment's HF_MODEL_ID, else the embedded model.
//
// Settings of each model are resolved from explicit layers, later ones
// winning (serve/serving_config.h):
//   model defaults < environment (SageMaker mode: HF_MODEL_ID,
//   TENSOR_PARALLEL_DEGREE, OPTION_*) < the model's file (serving.properties
//   in its directory, or the repository's model.json) < --config YAML
//   < command line.
//
// Signals: SIGINT/SIGTERM are blocked in every thread and taken by the main
// thread with sigwait, which then stops: /health 503 for --shutdown-delay,
// then stop accepting, let in-flight requests finish until
// --shutdown-timeout, abort the rest, exit 0.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <pthread.h>
#include <signal.h>
#include <spdlog/spdlog.h>
#include <sys/resource.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <set>
#include <thread>

#include "commands.h"
#include "common/error.h"
#include "config_file.h"
#include "grpc/grpc_frontend.h"
#include "model_source.h"
#include "serve/http_server.h"
#include "serve/kserve_frontend.h"
#include "serve/kv_event_publisher.h"
#include "serve/model_loading.h"
#include "serve/model_repository.h"
#include "serve/openai_server.h"
#include "serve/sagemaker_frontend.h"
#include "serve/serving_config.h"
#include "serve/web_ui.h"

namespace halo::tools {
namespace fs = std::filesystem;
using serve::ModelSettings;
using serve::Setting;
using serve::SettingLayer;

namespace {

struct ServeOptions {
  std::string model_dir;
  std::vector<std::string> models;  // --model [NAME=]DIR
  std::string model_repository;
  bool sagemaker = false;
  bool check_config = false;
  std::string host = "127.0.0.1";
  int port = 8000;
  int grpc_port = -1;  // -1: 8001 with --model-repository (as Triton), else off
  bool no_grpc = false;
  bool no_ui = false;
  std::string ui_dir;  // the web page from this directory instead of the built-in copy
  std::vector<std::string> served_model_names;
  std::string chat_template;
  bool enable_auto_tool_choice = true;
  std::string tool_call_parser;
  std::string reasoning_parser;
  std::string task = "generate";
  std::string pooler_config;
  std::vector<std::string> lora_modules;  // name=path
  bool allow_runtime_lora_updating = false;
  std::string api_key;
  std::string dtype = "auto";
  std::string tensor_parallel_size = "1";
  int max_queued_requests = 4096;
  int64_t max_queued_tokens = 0;
  uint64_t max_request_body_bytes = 16u << 20;
  std::string kv_events_config;
  double shutdown_delay = 0.0;
  double shutdown_timeout = 30.0;
  int http_threads = 2;
  int keep_alive_timeout = 60;
  serve::RequestLimits limits;
  int preprocess_threads = 2;
  engine::EngineConfig engine;
  ModelSource source;
};

std::string single_quoted(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') out += "'\\''";
    else out += c;
  }
  return out + "'";
}

void raise_fd_limit() {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
  }
}

bool explicitly_set(const CLI::App& cmd, const std::string& flag) {
  const CLI::Option* opt = cmd.get_option_no_throw(flag);
  return opt && opt->count() > 0;
}

std::string source_of(const std::string& flag) {
  std::string where = config_origin(flag);
  return where.empty() ? "command line " + flag : fmt::format("--config {} key '{}'", where, flag.substr(2));
}

// The settings the command line and --config set explicitly, as a layer.
SettingLayer cli_layer(const CLI::App& cmd, const ServeOptions& o) {
  const auto& e = o.engine;
  auto b = [](bool v) { return std::string(v ? "true" : "false"); };
  const std::vector<std::pair<std::string, std::string>> values = {
      {"device", e.device},
      {"device-index", std::to_string(e.device_index)},
      {"dtype", o.dtype},
      {"tensor-parallel-size", o.tensor_parallel_size},
      {"max-num-seqs", std::to_string(e.max_num_seqs)},
      {"max-model-len", std::to_string(e.max_model_len)},
      {"max-num-batched-tokens", std::to_string(e.max_num_batched_tokens)},
      {"block-size", std::to_string(e.block_size)},
      {"kv-cache-memory", std::to_string(e.kv_cache_memory)},
      {"device-memory-utilization", fmt::format("{}", e.device_memory_utilization)},
      {"max-kv-tokens", std::to_string(e.max_kv_tokens)},
      {"enable-chunked-prefill", b(e.enable_chunked_prefill)},
      {"enable-prefix-caching", b(e.enable_prefix_caching)},
      {"seed", std::to_string(e.seed)},
      {"threads", std::to_string(e.threads)},
      {"kv-cache-dtype", e.kv_cache_dtype},
      {"quantization", e.quantization},
      {"quantization-group-size", std::to_string(e.quantization_group_size)},
      {"speculative-config", e.speculative_config},
      {"tokenizer", o.source.tokenizer},
      {"revision", o.source.hub.revision},
      {"download-dir", o.source.hub.cache_dir.string()},
      {"hf-token", o.source.hub.token},
      {"compiled-model-dir", o.source.compiled_model_dir},
      {"enable-auto-tool-choice", b(o.enable_auto_tool_choice)},
      {"tool-call-parser", o.tool_call_parser},
      {"reasoning-parser", o.reasoning_parser},
      {"task", o.task},
      {"pooler-config", o.pooler_config},
      {"enable-lora", b(e.enable_lora)},
      {"max-loras", std::to_string(e.max_loras)},
      {"max-lora-rank", std::to_string(e.max_lora_rank)},
      {"max-cpu-loras", std::to_string(e.max_cpu_loras)},
      {"lora-modules", fmt::format("{}", fmt::join(o.lora_modules, " "))},
  };
  SettingLayer layer;
  for (const auto& [key, value] : values)
    if (explicitly_set(cmd, "--" + key)) layer.push_back({key, value, source_of("--" + key)});
  return layer;
}

bool sagemaker_mode(const ServeOptions& o, const std::map<std::string, std::string>& env) {
  if (o.sagemaker) return true;
  for (const auto& [k, v] : env)
    if (k.starts_with("SAGEMAKER_") && !v.empty()) return true;
  return false;
}

struct Plan {
  std::vector<ModelSettings> models;
  std::vector<serve::ServingCore::Refusal> refused;  // settings errors
};

// Every model to serve with its settings resolved layer by layer.
Plan plan_models(const CLI::App& cmd, const ServeOptions& o, bool sm) {
  Plan plan;
  const auto env = serve::process_environment();
  const SettingLayer env_layer = sm ? serve::sagemaker_env_layer(env) : SettingLayer{};
  const SettingLayer cli = cli_layer(cmd, o);
  SettingLayer env_without_model;
  for (const auto& s : env_layer)
    if (s.key != "model") env_without_model.push_back(s);

  // Model directories named directly (or by the environment, or the default).
  struct Named {
    std::string name, dir, source;
  };
  std::vector<Named> named;
  if (!o.model_dir.empty()) named.push_back({"", o.model_dir, "command line MODEL_DIR"});
  for (const auto& m : o.models) {
    size_t eq = m.find('=');
    if (eq != std::string::npos && eq > 0 && m.find('/') > eq) named.push_back({m.substr(0, eq), m.substr(eq + 1), "command line --model"});
    else named.push_back({"", m, "command line --model"});
  }
  if (named.empty() && o.model_repository.empty()) {
    std::string dir, source = "default (the embedded model)";
    for (const auto& s : env_layer)
      if (s.key == "model") dir = s.value, source = s.source;
    if (dir.empty() && sm && fs::exists("/opt/ml/model/config.json")) dir = "/opt/ml/model", source = "SageMaker /opt/ml/model";
    if (dir.empty()) dir = default_model_dir().string();
    named.push_back({"", dir, source});
  }
  for (size_t i = 0; i < named.size(); ++i) {
    ModelSettings s;
    try {
      s.dir = named[i].dir;
      s.origin["model"] = named[i].source;
      serve::apply_layer(s, env_without_model);
      const fs::path props = fs::path(named[i].dir) / "serving.properties";
      if (fs::exists(props)) serve::apply_layer(s, serve::serving_properties_layer(props));
      serve::apply_layer(s, cli);
      // The name: NAME=, else --served-model-name (first model), else the directory as given.
      if (!named[i].name.empty()) {
        s.name = named[i].name;
      } else if (i == 0 && !o.served_model_names.empty()) {
        s.name = o.served_model_names.front();
        s.extra_names.assign(o.served_model_names.begin() + 1, o.served_model_names.end());
        s.origin["served-model-name"] = source_of("--served-model-name");
      } else if (named[i].source.starts_with("command line")) {
        s.name = named[i].dir;
      } else {
        s.name = s.dir.filename().string();
      }
      plan.models.push_back(std::move(s));
    } catch (const Error& e) {
      plan.refused.push_back({named[i].name.empty() ? named[i].dir : named[i].name, e.what()});
    }
  }
  if (!o.served_model_names.empty() && (o.model_dir.empty() && o.models.empty()) && !o.model_repository.empty())
    throw Error("--served-model-name names a model given by MODEL_DIR or --model; repository models are named by "
                "their directories");

  if (!o.model_repository.empty()) {
    for (auto& rm : serve::scan_model_repository(o.model_repository)) {
      if (!rm.error.empty()) {
        plan.refused.push_back({rm.name, rm.error});
        continue;
      }
      ModelSettings s;
      try {
        s.name = rm.name;
        s.version = rm.version;
        s.max_batch_size = rm.max_batch_size;
        s.extra_names = rm.aliases;
        serve::apply_layer(s, env_without_model);
        serve::apply_layer(s, rm.settings);
        serve::apply_layer(s, cli);
        plan.models.push_back(std::move(s));
      } catch (const Error& e) {
        plan.refused.push_back({rm.name, e.what()});
      }
    }
  }
  std::set<std::string> names;
  for (const auto& m : plan.models) {
    std::vector<std::string> all{m.name};
    all.insert(all.end(), m.extra_names.begin(), m.extra_names.end());
    for (const auto& n : all) {
      if (!names.insert(n).second)
        throw Error(fmt::format("two models are named '{}': name them with --model NAME=DIR", n));
    }
  }
  return plan;
}

void print_plan(const Plan& plan, bool sm) {
  std::string out = fmt::format("halo serve: {} model(s){}\n", plan.models.size(), sm ? " (SageMaker mode)" : "");
  for (const auto& m : plan.models)
    out += fmt::format("model '{}' (version {}):\n{}", m.name, m.version, serve::describe(m));
  for (const auto& r : plan.refused) out += fmt::format("model '{}': INVALID: {}\n", r.name, r.reason);
  std::fputs(out.c_str(), stdout);
  std::fflush(stdout);
}

// SageMaker's address: port 8080 (or SAGEMAKER_BIND_TO_PORT) on all
// interfaces, unless --port/--host say otherwise.
void apply_sagemaker_address(const CLI::App& cmd, const std::map<std::string, std::string>& env,
                             ServeOptions& o) {
  if (!explicitly_set(cmd, "--port")) {
    o.port = 8080;
    if (auto it = env.find("SAGEMAKER_BIND_TO_PORT"); it != env.end()) {
      try {
        o.port = std::stoi(it->second);
      } catch (const std::exception&) {
        throw Error(fmt::format("environment SAGEMAKER_BIND_TO_PORT={}: expected a port number", it->second));
      }
    }
  }
  if (!explicitly_set(cmd, "--host")) o.host = "0.0.0.0";
}

// The "ready" line with an example request to the first served model.
void print_ready(serve::ServingCore& core, const std::string& url, const std::string& api_key, bool ui) {
  std::vector<std::string> names;
  for (const auto& m : core.served_models()) names.push_back(m->name());
  const auto& name = names.front();
  // Double quotes, so the shell expands the variable.
  std::string auth = api_key.empty() ? "" : " -H \"Authorization: Bearer $HALO_API_KEY\"";
  std::string example = fmt::format(
      "halo serve: {} ready at {}/v1 (also KServe v2 at {}/v2/models/NAME/generate and SageMaker "
      "at "
      "{}/invocations)\n"
      "  curl {}/v1/chat/completions -H 'Content-Type: application/json'{} \\\n"
      "    -d {}\n",
      fmt::join(names, ", "), url, url, url, url, auth,
      single_quoted(fmt::format(
          R"({{"model": "{}", "messages": [{{"role": "user", "content": "What is curl?"}}]}})",
          name)));
  if (ui) example += fmt::format("  web page: {}/\n", url);
  std::fputs(example.c_str(), stdout);
  std::fflush(stdout);
}

// Blocks SIGINT and SIGTERM in the calling thread and every thread it starts
// later, so that only wait_and_drain takes them; ignores SIGPIPE.
sigset_t block_stop_signals() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  return signals;
}

serve::HttpServerOptions http_options(const ServeOptions& o) {
  serve::HttpServerOptions h;
  h.host = o.host;
  h.port = o.port;
  h.io_threads = o.http_threads;
  h.max_body_bytes = o.max_request_body_bytes;
  h.idle_timeout = std::chrono::seconds(o.keep_alive_timeout);
  return h;
}

// Waits up to `seconds` (0: only looks) for another SIGINT/SIGTERM; true if one came.
bool another_signal(const sigset_t& signals, double seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  while (true) {
    const int64_t left = std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now()).count());
    timespec ts{static_cast<time_t>(left / 1000000000), static_cast<long>(left % 1000000000)};
    if (sigtimedwait(&signals, nullptr, &ts) > 0) return true;
    if (left == 0 || (errno != EINTR && errno != EAGAIN)) return false;
  }
}

// Waits for SIGINT/SIGTERM, then stops in three steps, as Kubernetes expects:
// /health turns 503 at once while requests are still served for
// shutdown_delay seconds (the load balancers take the server out); then no
// new connections or generations, and the requests in flight get up to
// shutdown_timeout seconds; then what still runs is aborted. A second signal
// cuts the current step short.
void wait_and_drain(const sigset_t& signals, serve::ServingCore& core, serve::HttpServer& http,
                    double shutdown_delay, double shutdown_timeout) {
  int sig = 0;
  sigwait(&signals, &sig);
  const char* name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
  core.set_stopping();
  if (shutdown_delay > 0) {
    spdlog::warn("received {}: not ready; still serving for {:.1f} s (--shutdown-delay)", name, shutdown_delay);
    if (another_signal(signals, shutdown_delay)) spdlog::warn("second signal: draining now");
  }
  spdlog::warn("{}stopping (no new connections; {} requests in flight, waiting up to {:.0f} s)",
               shutdown_delay > 0 ? "" : fmt::format("received {}: ", name), core.active_requests(),
               shutdown_timeout);
  core.set_draining();
  http.stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(shutdown_timeout * 1000));
  bool idle = false;
  while (!idle) {
    auto step =
        std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
    idle = core.wait_idle(step);
    if (idle || std::chrono::steady_clock::now() >= deadline) break;
    if (another_signal(signals, 0)) {
      spdlog::warn("second signal: aborting what is still running");
      break;
    }
  }
  if (!idle) {
    core.abort_all("shutdown deadline reached");
    core.wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
}

// How the models load: the chat template, and the KV events publisher (its
// sockets opened here, so a taken port fails before any model loads).
serve::LoadOptions load_options(const ServeOptions& o, const serve::KvEventsConfig& kv_events,
                                const std::map<std::string, std::string>& env) {
  serve::LoadOptions lopts;
  lopts.chat_template = o.chat_template;
  if (auto it = env.find("PYTHONHASHSEED"); it != env.end()) lopts.prefix_hash_seed = it->second;
  if (kv_events.enable_kv_cache_events && kv_events.publisher == "zmq")
    lopts.kv_events = std::make_shared<serve::KvEventPublisher>(kv_events);
  return lopts;
}

// The gRPC frontend when asked for (--grpc-port), or by default at 8001 with
// a model repository as in Triton (--no-grpc: never); null otherwise.
std::unique_ptr<grpc_frontend::GrpcServer> start_grpc(const ServeOptions& o, const serve::FrontendContext& ctx) {
  const int port = o.no_grpc ? -1 : o.grpc_port >= 0 ? o.grpc_port : !o.model_repository.empty() ? 8001 : -1;
  if (port < 0) return nullptr;
  grpc_frontend::GrpcOptions g;
  g.host = o.host;
  g.port = port;
  g.version = HALO_VERSION;
  g.max_message_bytes = static_cast<int>(std::min<uint64_t>(o.max_request_body_bytes, INT32_MAX));
  auto server = std::make_unique<grpc_frontend::GrpcServer>(ctx, g);
  server->start();
  return server;
}

void run_serve(const CLI::App& cmd, const ServeOptions& in) {
  ServeOptions o = in;
  const auto env = serve::process_environment();
  const bool sm = sagemaker_mode(o, env);
  if (sm) apply_sagemaker_address(cmd, env, o);

  Plan plan = plan_models(cmd, o, sm);
  // Checked before anything starts, so a bad config is a quick error.
  const auto kv_events = o.kv_events_config.empty() ? serve::KvEventsConfig{}
                                                    : serve::parse_kv_events_config(o.kv_events_config);
  if (kv_events.enable_kv_cache_events)
    for (auto& m : plan.models) serve::enable_for_kv_events(m);
  if (o.check_config) {
    std::erase_if(plan.models, [&](const ModelSettings& m) {
      std::string why = serve::check_settings(m);
      if (why.empty()) return false;
      plan.refused.push_back({m.name, why});
      return true;
    });
    print_plan(plan, sm);
    if (!plan.refused.empty()) throw Error(plan.refused.front().reason);
    return;
  }
  for (const auto& r : plan.refused) spdlog::error("model '{}' refused: {}", r.name, r.reason);
  if (plan.models.empty()) throw Error(plan.refused.empty() ? "no model to serve" : plan.refused.front().reason);

  // Before any thread exists: the main thread alone takes SIGINT/SIGTERM.
  const sigset_t signals = block_stop_signals();
  raise_fd_limit();

  serve::ServingConfig core_cfg;
  core_cfg.max_queued_requests = o.max_queued_requests;
  core_cfg.max_queued_tokens = o.max_queued_tokens;
  core_cfg.limits = o.limits;
  core_cfg.preprocess_threads = o.preprocess_threads;
  std::string api_key = o.api_key;
  if (api_key.empty())
    if (const char* k = std::getenv("VLLM_API_KEY")) api_key = k;

  // Listen first, so /health answers (503) while the models load. The
  // frontends are codecs over one serving core.
  auto core = std::make_unique<serve::ServingCore>(core_cfg);
  auto ctx = std::make_unique<serve::FrontendContext>(*core, api_key);
  serve::ApiConfig api_cfg{HALO_VERSION};
  api_cfg.allow_runtime_lora_updating = o.allow_runtime_lora_updating;
  if (const char* v = std::getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING"))
    api_cfg.allow_runtime_lora_updating |= std::string_view(v) == "1" ||
                                           std::string_view(v) == "true" ||
                                           std::string_view(v) == "True";
  auto api = std::make_unique<serve::OpenAIServer>(*ctx, api_cfg);
  auto kserve = std::make_unique<serve::KServeFrontend>(*ctx, HALO_VERSION);
  auto sagemaker = std::make_unique<serve::SageMakerFrontend>(*ctx);
  auto ui = o.no_ui ? nullptr : std::make_unique<serve::WebUi>(o.ui_dir);
  auto http = std::make_unique<serve::HttpServer>(
      http_options(o), [a = api.get(), k = kserve.get(), s = sagemaker.get(), u = ui.get()](
                 serve::HttpRequest&& req, const std::shared_ptr<serve::Responder>& res) {
        if (u && serve::WebUi::owns(req.path)) u->handle(req, res);
        else if (serve::KServeFrontend::owns(req.path)) k->handle(std::move(req), res);
        else if (serve::SageMakerFrontend::owns(req.path)) s->handle(std::move(req), res);
        else a->handle(std::move(req), res);
      });
  auto grpc = start_grpc(o, *ctx);  // first: nothing to undo when its port is taken
  http->start();
  const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  const std::string url = fmt::format("http://{}:{}", host, http->port());
  spdlog::info("listening on {} ({} model(s) loading)", url, plan.models.size());

  for (const auto& r : plan.refused) core->refuse_model(r.name, r.reason);
  serve::LoadOptions lopts = load_options(o, kv_events, env);
  size_t served = serve::load_models(plan.models, *core, lopts);
  if (served == 0) {
    auto refused = core->refused_models();
    if (grpc) grpc->stop(std::chrono::system_clock::now());
    http->stop();
    throw Error(refused.empty() ? "no model could be served" : refused.back().reason);
  }
  core->set_ready();
  // After set_ready: a client that waits for this line (tests/serve/hostile_lib.mjs)
  // is served at once; one that polls /health may see 200 a moment before it.
  print_ready(*core, url, api_key, ui != nullptr);

  wait_and_drain(signals, *core, *http, o.shutdown_delay, o.shutdown_timeout);
  // Let the last bytes of the responses leave before the sockets close.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  if (grpc) grpc->stop(std::chrono::system_clock::now() + std::chrono::seconds(1));
  http->stop();  // no handler runs after this
  // The core first: it joins the preprocessing tasks (which call into the
  // frontends) and stops the pump thread, the only other writer to the
  // connections; it frees the engines. The frontends are not called after.
  core.reset();
  kserve.reset();
  sagemaker.reset();
  api.reset();
  ctx.reset();
  http.reset();
  spdlog::info("stopped");
}

// How each model reads requests and shapes its output: chat template, tool
// and reasoning parsers, embeddings.
void add_model_behaviour_options(CLI::App* cmd, ServeOptions& o) {
  cmd->add_option("--chat-template", o.chat_template,
                  "Jinja chat template file (or inline template) instead of tokenizer_config.json's");
  cmd->add_flag("--enable-auto-tool-choice,!--no-enable-auto-tool-choice", o.enable_auto_tool_choice,
                "Parse tool calls out of the output when a request has tools and tool_choice auto (vLLM's flag; "
                "on by default in halo)");
  cmd->add_option("--tool-call-parser", o.tool_call_parser,
                  "hermes, llama3_json, mistral or pythonic (default: the one the chat template implies)");
  cmd->add_option("--reasoning-parser", o.reasoning_parser,
                  "deepseek_r1 or qwen3: <think> text goes to reasoning_content (default: none)");
  cmd->add_option(
         "--task", o.task,
         "generate, or embed: also serve POST /v1/embeddings, pooling the final hidden states "
         "(docs/embeddings.md)")
      ->capture_default_str();
  cmd->add_option(
      "--pooler-config,--override-pooler-config", o.pooler_config,
      "With --task embed: vLLM's JSON, e.g. '{\"pooling_type\": \"MEAN\", \"normalize\": true}' "
      "(default: the model's sentence-transformers files, else LAST, normalised)");
  add_lora_options(*cmd, o.engine);
  cmd->add_option("--lora-modules", o.lora_modules,
                  "LoRA adapters as name=path (a PEFT directory or a Hugging Face id); a request "
                  "selects one by naming it as its model");
  cmd->add_flag("--allow-runtime-lora-updating", o.allow_runtime_lora_updating,
                "Allow POST /v1/load_lora_adapter and /v1/unload_lora_adapter (behind --api-key; "
                "also VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand(
      "serve", "Serve models over HTTP: OpenAI-compatible (like `vllm serve`), KServe v2 / Triton generate, SageMaker");
  cmd->add_option("model", o->model_dir,
                  "Hugging Face model directory or id (org/name) (default: the embedded pkgchat-5m)");
  cmd->add_option("--model", o->models,
                  "Another model to serve, [NAME=]DIR (repeatable); named NAME, else DIR as given");
  cmd->add_option("--model-repository", o->model_repository,
                  "Serve every model of a Triton-style repository: DIR/<name>/[config.pbtxt], "
                  "DIR/<name>/<version>/model.json (vLLM engine arguments)");
  cmd->add_flag("--sagemaker", o->sagemaker,
                "SageMaker / DJL LMI mode: port 8080 (SAGEMAKER_BIND_TO_PORT), host 0.0.0.0, settings from "
                "HF_MODEL_ID, TENSOR_PARALLEL_DEGREE and OPTION_* (also on when any SAGEMAKER_* variable is set)");
  cmd->add_flag("--check-config,--dry-run", o->check_config,
                "Print every model's resolved settings with their sources and exit (no device, no weights loaded)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--grpc-port", o->grpc_port,
                  "KServe v2 / Triton gRPC port (0: any free port; default 8001 with --model-repository, else off)")
      ->check(CLI::Range(0, 65535));
  cmd->add_flag("--no-grpc", o->no_grpc, "No gRPC server, also with --model-repository");
  cmd->add_flag("--no-ui", o->no_ui, "No web page at / (the chat page built into halo)");
  cmd->add_option("--ui-dir", o->ui_dir,
                  "Serve the web page from this directory (index.html, ...) instead of the built-in copy; read per "
                  "request, for working on the page")
      ->check(CLI::ExistingDirectory);
  cmd->add_option("--served-model-name", o->served_model_names,
                  "Name(s) the API answers to for the first MODEL_DIR/--model model; the first is used in responses "
                  "and metrics (default: the model argument)");
  add_model_behaviour_options(cmd, *o);
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' (env HALO_API_KEY or VLLM_API_KEY); /health and /metrics stay open")
      ->envname("HALO_API_KEY");
  cmd->add_option("--dtype", o->dtype,
                  "auto, or the checkpoint's own dtype; on the cpu plugin also bfloat16 (fp32 weights converted at "
                  "load, bf16 GEMM) or float32 (matmuls in fp32)")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size", o->tensor_parallel_size,
                  "Devices per model (or max); >1 is passed to the device plugin as option tensor_parallel_size (not "
                  "the cpu plugin)")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", o->max_queued_requests,
                  "Requests waiting for their first token before new ones get 429 + Retry-After (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--max-queued-tokens", o->max_queued_tokens,
                  "Prompt tokens waiting for their first token before new requests get 429 (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--max-request-body-bytes", o->max_request_body_bytes, "Larger request bodies get 413")
      ->capture_default_str();
  cmd->add_option("--kv-events-config", o->kv_events_config,
                  "vLLM's KV cache events, as JSON: {\"enable_kv_cache_events\": true, \"endpoint\": "
                  "\"tcp://*:5557\", \"replay_endpoint\": \"tcp://*:5558\", \"topic\": \"kv@POD@{model}\"}; "
                  "BlockStored/BlockRemoved over ZeroMQ for prefix-aware routers (llm-d); turns prefix caching on");
  cmd->add_option("--shutdown-delay", o->shutdown_delay,
                  "Seconds after SIGTERM/SIGINT during which /health answers 503 but requests are still served, so "
                  "load balancers and Kubernetes take the server out before it stops accepting")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout,
                  "Seconds in-flight requests may take to finish after SIGTERM/SIGINT before they are aborted")
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads, "I/O threads of the HTTP server")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", o->keep_alive_timeout, "Seconds an idle keep-alive connection stays open")
      ->capture_default_str();
  cmd->add_option("--max-request-json-depth", o->limits.max_json_depth,
                  "Request JSON nested deeper than this (objects and arrays) gets 400 (at most 1000: rendering "
                  "recurses through the JSON)")
      ->check(CLI::Range(1, 1000))
      ->capture_default_str();
  cmd->add_option("--max-prompt-bytes", o->limits.max_prompt_bytes,
                  "Longer text prompts (and rendered chats) get 400 before they are tokenized (0: 64 bytes per token "
                  "of the model's max-model-len)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  cmd->add_flag("--trust-request-chat-template", o->limits.trust_request_chat_template,
                "Accept a 'chat_template' sent in a request (vLLM's flag; without it such requests get 400)");
  cmd->add_option("--preprocess-threads", o->preprocess_threads,
                  "Threads that parse, render and tokenize requests, off the HTTP I/O threads")
      ->check(CLI::Range(1, 256))
      ->capture_default_str();
  add_engine_options(*cmd, o->engine);
  add_model_source_options(*cmd, o->source);
  add_vllm_compat_options(*cmd);
  cmd->callback([o, cmd] { run_serve(*cmd, *o); });
}

}  // namespace halo::tools
