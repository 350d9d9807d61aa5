#pragma once
// The OpenAI-compatible API (as vLLM serves it) over an AsyncEngine:
// /v1/models, /v1/completions, /v1/chat/completions (+ /render), vLLM's
// /generate, /tokenize, /detokenize, /health, /ping, /version, /metrics.
//
// Requests are validated and tokenized on the I/O thread that received them;
// generation events travel from the engine to the responses through one
// StreamPump thread. Admission control bounds what waits for the engine.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/async_engine.h"
#include "serve/http_server.h"
#include "serve/stream_pump.h"
#include "text/jinja/chat_template.h"

namespace halo::serve {

struct ApiConfig {
  std::vector<std::string> served_model_names;  // first one names the model in responses and metrics
  std::string model_root;                       // "root" in /v1/models
  std::string api_key;                          // empty: no authentication
  int max_queued_requests = 4096;               // 0: no limit
  int64_t max_queued_tokens = 0;                // prompt tokens; 0: no limit
  std::string version = "0.0.0";
};

class GenerationJob;
class Fields;

class OpenAIServer {
 public:
  explicit OpenAIServer(ApiConfig config);
  ~OpenAIServer();
  OpenAIServer(const OpenAIServer&) = delete;
  OpenAIServer& operator=(const OpenAIServer&) = delete;

  // Makes the model endpoints live (/health turns 200). `chat_template` may be
  // empty when the model has none (chat requests then need "chat_template").
  void set_engine(std::shared_ptr<engine::AsyncEngine> engine, std::optional<text::ChatTemplate> chat_template);

  // The HTTP handler.
  void handle(HttpRequest&& request, const std::shared_ptr<Responder>& responder);

  // Shutdown: requests still generating.
  size_t active_requests() const;
  // Waits until no request is generating or the deadline passes; true if none is left.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Ends every generating request now (their clients get an error).
  void abort_all(const std::string& reason);
  void set_draining() { draining_ = true; }

 private:
  friend class GenerationJob;
  struct Model;
  struct PromptInput;

  HttpResponse route(HttpRequest& req, const std::shared_ptr<Responder>& responder, bool& deferred);
  void check_auth(const HttpRequest& req) const;
  void check_model(const std::string* model) const;
  const Model& model() const;

  HttpResponse models();
  HttpResponse health();
  HttpResponse metrics();
  HttpResponse tokenize(const HttpRequest& req);
  HttpResponse detokenize(const HttpRequest& req);
  HttpResponse chat_render(const HttpRequest& req);
  void completions(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  void chat(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  void generate(const HttpRequest& req, const std::shared_ptr<Responder>& res);

  std::string render_chat(Fields& f, bool& add_special_default, std::string* echo_prefix) const;
  void start_job(std::shared_ptr<GenerationJob> job, const std::shared_ptr<Responder>& res);
  void admit(const Model& model, const std::vector<PromptInput>& prompts);
  void job_started_stream(int64_t prompt_tokens);  // first output of a queued prompt
  void job_done(GenerationJob* job);

  ApiConfig config_;
  std::shared_ptr<const Model> model_;  // null until loaded
  mutable std::mutex model_mu_;
  std::unique_ptr<StreamPump> pump_;
  std::atomic<bool> draining_{false};
  const int64_t created_;

  // Admission and shutdown bookkeeping.
  mutable std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::unordered_map<GenerationJob*, std::weak_ptr<GenerationJob>> jobs_;
  int64_t queued_requests_ = 0;
  int64_t queued_tokens_ = 0;
};

}  // namespace halo::serve
