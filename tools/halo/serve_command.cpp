// `halo serve`: the OpenAI-compatible HTTP server (vLLM's `vllm serve`).
//
// Signals: SIGINT/SIGTERM are blocked in every thread and taken by the main
// thread with sigwait, which then drains: stop accepting, let in-flight
// requests finish until --shutdown-timeout, abort the rest, exit 0.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "commands.h"
#include "common/error.h"
#include "engine/async_engine.h"
#include "serve/http_server.h"
#include "serve/openai_server.h"
#include "text/jinja/chat_template.h"
#include "text/tokenizer/tokenizer.h"

namespace halo::tools {
namespace fs = std::filesystem;
namespace {

struct ServeOptions {
  std::string model_dir;
  std::string host = "127.0.0.1";
  int port = 8000;
  std::vector<std::string> served_model_names;
  std::string chat_template;
  std::string api_key;
  std::string dtype = "auto";
  int tensor_parallel_size = 1;
  int max_queued_requests = 4096;
  int64_t max_queued_tokens = 0;
  uint64_t max_request_body_bytes = 16u << 20;
  double shutdown_timeout = 30.0;
  int http_threads = 2;
  int keep_alive_timeout = 60;
  engine::EngineConfig engine;
};

std::string canonical_dtype(const std::string& d) {
  if (d == "half" || d == "float16" || d == "fp16") return "float16";
  if (d == "bfloat16" || d == "bf16") return "bfloat16";
  if (d == "float" || d == "float32" || d == "fp32") return "float32";
  return d;
}

// --dtype: halo runs the weights as the checkpoint stores them. `auto` and the
// checkpoint's own dtype are accepted everywhere; the CPU plugin computes in
// float32 whatever the storage, so `float32` is honoured there too.
void check_dtype(const std::string& requested, const model::ModelConfig& cfg, const std::string& device) {
  std::string want = canonical_dtype(requested);
  if (want == "auto") return;
  if (want != "float16" && want != "bfloat16" && want != "float32")
    throw Error(fmt::format("--dtype {}: expected auto, float16 (half), bfloat16 or float32 (float)", requested));
  std::string stored = cfg.torch_dtype.empty() ? "float32" : canonical_dtype(cfg.torch_dtype);
  if (want == stored) return;
  if (device == "cpu" && want == "float32") {
    spdlog::info("--dtype float32: the cpu plugin computes in float32 from the {} weights as stored", stored);
    return;
  }
  throw Error(fmt::format(
      "--dtype {}: the checkpoint stores {} weights and halo does not convert them at load time; the {} plugin {}. "
      "Use --dtype auto (or {})",
      requested, stored, device,
      device == "cpu" ? "computes in float32 from the weights as stored" : "runs the weights in their stored dtype",
      stored));
}

std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) throw Error(fmt::format("--chat-template {}: cannot open the file", p.string()));
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

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

void run_serve(const ServeOptions& o) {
  // Before any thread exists: the main thread alone takes SIGINT/SIGTERM.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  ::signal(SIGPIPE, SIG_IGN);
  raise_fd_limit();

  if (o.tensor_parallel_size < 1) throw Error("--tensor-parallel-size must be at least 1");
  engine::EngineConfig ec = o.engine;
  if (o.tensor_parallel_size > 1) {
    if (ec.device == "cpu")
      throw Error(fmt::format(
          "--tensor-parallel-size {}: the cpu plugin runs on one device. Tensor parallelism is the device plugin's "
          "business (the rbln and cuda plugins take it as their plugin option tensor_parallel_size)",
          o.tensor_parallel_size));
    ec.plugin_options.emplace_back("tensor_parallel_size", std::to_string(o.tensor_parallel_size));
  }

  fs::path dir = o.model_dir.empty() ? default_model_dir() : fs::path(o.model_dir);
  serve::ApiConfig api_cfg;
  api_cfg.served_model_names = o.served_model_names;
  if (api_cfg.served_model_names.empty())
    api_cfg.served_model_names.push_back(o.model_dir.empty() ? dir.filename().string() : o.model_dir);
  api_cfg.model_root = dir.string();
  api_cfg.api_key = o.api_key;
  if (api_cfg.api_key.empty())
    if (const char* k = std::getenv("VLLM_API_KEY")) api_cfg.api_key = k;
  api_cfg.max_queued_requests = o.max_queued_requests;
  api_cfg.max_queued_tokens = o.max_queued_tokens;
  api_cfg.version = HALO_VERSION;

  // Listen first, so /health answers (503) while the model loads.
  auto api = std::make_unique<serve::OpenAIServer>(api_cfg);
  serve::HttpServerOptions hopts;
  hopts.host = o.host;
  hopts.port = o.port;
  hopts.io_threads = o.http_threads;
  hopts.max_body_bytes = o.max_request_body_bytes;
  hopts.idle_timeout = std::chrono::seconds(o.keep_alive_timeout);
  auto http = std::make_unique<serve::HttpServer>(
      hopts, [a = api.get()](serve::HttpRequest&& req, const std::shared_ptr<serve::Responder>& res) {
        a->handle(std::move(req), res);
      });
  http->start();
  const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  const std::string url = fmt::format("http://{}:{}", host, http->port());
  spdlog::info("listening on {} (model loading)", url);

  auto t0 = std::chrono::steady_clock::now();
  auto config = model::load_model_config(dir);
  check_dtype(o.dtype, config, ec.device);
  auto model = std::make_shared<model::LoadedModel>(model::LoadedModel::load(dir));
  auto tokenizer = text::Tokenizer::from_model_dir(dir);
  std::optional<text::ChatTemplate> tpl;
  if (!o.chat_template.empty()) {
    std::string src = fs::exists(o.chat_template) ? read_text(o.chat_template) : o.chat_template;
    if (!fs::exists(o.chat_template) && src.find("{%") == std::string::npos && src.find("{{") == std::string::npos)
      throw Error(fmt::format("--chat-template {}: no such file (and not an inline Jinja template)", o.chat_template));
    tpl.emplace(src);
  } else {
    try {
      tpl.emplace(text::ChatTemplate::from_tokenizer_config(dir / "tokenizer_config.json"));
    } catch (const Error& e) {
      spdlog::warn("no chat template ({}): /v1/chat/completions needs --chat-template or a per-request "
                   "'chat_template'", e.what());
    }
  }
  auto eng = std::make_shared<engine::AsyncEngine>(ec, model, std::move(tokenizer));
  api->set_engine(eng, std::move(tpl));
  const auto& name = api_cfg.served_model_names.front();
  spdlog::info("model {} loaded in {:.2f} s; serving '{}' (max_model_len {}, {} KV blocks of {} tokens)", dir.string(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), name,
               eng->engine().max_model_len(), eng->engine().num_kv_blocks(), eng->engine().limits().block_size);

  std::string auth = api_cfg.api_key.empty() ? "" : " -H 'Authorization: Bearer $HALO_API_KEY'";
  std::string example = fmt::format(
      "halo serve: {} is ready at {}/v1\n"
      "  curl {}/v1/chat/completions -H 'Content-Type: application/json'{} \\\n"
      "    -d {}\n",
      name, url, url, auth,
      single_quoted(fmt::format(R"({{"model": "{}", "messages": [{{"role": "user", "content": "What is curl?"}}]}})",
                                name)));
  std::fputs(example.c_str(), stdout);
  std::fflush(stdout);

  int sig = 0;
  sigwait(&signals, &sig);
  spdlog::warn("received {}: stopping (no new connections; {} requests in flight, waiting up to {:.0f} s)",
               sig == SIGTERM ? "SIGTERM" : "SIGINT", api->active_requests(), o.shutdown_timeout);
  api->set_draining();
  http->stop_accepting();
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::milliseconds(static_cast<int64_t>(o.shutdown_timeout * 1000));
  bool idle = false;
  while (!idle) {
    auto step = std::min(deadline, std::chrono::steady_clock::now() + std::chrono::milliseconds(100));
    idle = api->wait_idle(step);
    if (idle || std::chrono::steady_clock::now() >= deadline) break;
    timespec zero{0, 0};
    if (sigtimedwait(&signals, nullptr, &zero) > 0) {
      spdlog::warn("second signal: aborting what is still running");
      break;
    }
  }
  if (!idle) {
    api->abort_all("shutdown deadline reached");
    api->wait_idle(std::chrono::steady_clock::now() + std::chrono::seconds(5));
  }
  // Let the last bytes of the responses leave before the sockets close.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  http->stop();  // no handler runs after this
  api.reset();   // stops the pump thread, the only other writer to the connections
  http.reset();
  eng.reset();
  spdlog::info("stopped");
}

}  // namespace

void add_serve_command(CLI::App& app) {
  auto o = std::make_shared<ServeOptions>();
  auto* cmd = app.add_subcommand("serve", "Serve a model over an OpenAI-compatible HTTP API (like `vllm serve`)");
  cmd->add_option("model", o->model_dir, "Hugging Face model directory (default: the embedded pkgchat-5m)");
  cmd->add_option("--host", o->host, "Address to listen on")->capture_default_str();
  cmd->add_option("--port", o->port, "TCP port (0: any free port)")->check(CLI::Range(0, 65535))->capture_default_str();
  cmd->add_option("--served-model-name", o->served_model_names,
                  "Model name(s) the API answers to; the first is used in responses and metrics (default: the "
                  "model argument)");
  cmd->add_option("--chat-template", o->chat_template,
                  "Jinja chat template file (or inline template) instead of tokenizer_config.json's");
  cmd->add_option("--api-key", o->api_key,
                  "Require 'Authorization: Bearer KEY' (env HALO_API_KEY or VLLM_API_KEY); /health and /metrics stay open")
      ->envname("HALO_API_KEY");
  cmd->add_option("--dtype", o->dtype,
                  "auto, or the checkpoint's own dtype; the cpu plugin computes in float32 from the stored weights "
                  "(float32 accepted there)")
      ->capture_default_str();
  cmd->add_option("--tensor-parallel-size", o->tensor_parallel_size,
                  "Devices per model; >1 is passed to the device plugin as option tensor_parallel_size (not the cpu "
                  "plugin)")
      ->capture_default_str();
  cmd->add_option("--max-queued-requests", o->max_queued_requests,
                  "Requests waiting for their first token before new ones get 429 + Retry-After (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--max-queued-tokens", o->max_queued_tokens,
                  "Prompt tokens waiting for their first token before new requests get 429 (0: no limit)")
      ->capture_default_str();
  cmd->add_option("--max-request-body-bytes", o->max_request_body_bytes, "Larger request bodies get 413")
      ->capture_default_str();
  cmd->add_option("--shutdown-timeout", o->shutdown_timeout,
                  "Seconds in-flight requests may take to finish after SIGTERM/SIGINT before they are aborted")
      ->capture_default_str();
  cmd->add_option("--http-threads", o->http_threads, "I/O threads of the HTTP server")
      ->check(CLI::Range(1, 64))
      ->capture_default_str();
  cmd->add_option("--keep-alive-timeout", o->keep_alive_timeout, "Seconds an idle keep-alive connection stays open")
      ->capture_default_str();
  add_engine_options(*cmd, o->engine);
  cmd->callback([o] { run_serve(*o); });
}

}  // namespace halo::tools
