#pragma once
// The OpenAI-compatible API (as vLLM serves it) over an AsyncEngine:
// /v1/models, /v1/completions, /v1/chat/completions (+ /render), vLLM's
// /generate, /tokenize, /detokenize, /health, /ping, /version, /metrics.
//
// Several models may be served at once (a model repository, --model given
// more than once): each is a ServedModel with its own AsyncEngine and KV
// budget, and requests route by their `model` field (none: the first model).
//
// The I/O thread that receives a request only routes it: requests with a
// body are parsed, rendered, tokenized and validated on the PreprocessPool
// (so one expensive request cannot stall other connections or /health), then
// queued on the engine; generation events travel from the engine to the
// responses through one StreamPump thread. Admission control bounds what
// waits for the engine (and for the pool).
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "engine/async_engine.h"
#include "serve/http_server.h"
#include "serve/preprocess_pool.h"
#include "serve/served_model.h"
#include "serve/single_job.h"
#include "serve/stream_pump.h"
#include "text/jinja/chat_template.h"

namespace halo::serve {

struct ApiConfig {
  std::vector<std::string> served_model_names;  // set_engine's model: the first names it in responses and metrics
  std::string model_root;                       // "root" in /v1/models
  std::string api_key;                          // empty: no authentication
  int max_queued_requests = 4096;               // 0: no limit
  int64_t max_queued_tokens = 0;                // prompt tokens; 0: no limit
  std::string version = "0.0.0";
  RequestLimits limits;
  int preprocess_threads = 2;  // PreprocessPool threads
};

class GenerationJob;

class OpenAIServer {
 public:
  explicit OpenAIServer(ApiConfig config);
  ~OpenAIServer();
  OpenAIServer(const OpenAIServer&) = delete;
  OpenAIServer& operator=(const OpenAIServer&) = delete;

  // One model: add_model under ApiConfig's names, then set_ready. `chat_template`
  // may be empty when the model has none (chat requests then need "chat_template").
  void set_engine(std::shared_ptr<engine::AsyncEngine> engine, std::optional<text::ChatTemplate> chat_template);

  // Several models: each is routable as soon as it is added; /health turns
  // 200 after set_ready (every model tried). A refused model is listed with
  // its reason (KServe's repository index, and the 404 that names it).
  void add_model(std::shared_ptr<ServedModel> model);
  void refuse_model(const std::string& name, const std::string& reason);
  void set_ready();
  struct Refusal {
    std::string name, reason;
  };
  std::vector<std::shared_ptr<const ServedModel>> served_models() const;
  std::vector<Refusal> refused_models() const;
  // Loading finished, at least one model served, every engine healthy.
  bool ready() const;

  // ---- shared with the other frontends (KServe v2, SageMaker) ----
  // The model `name` routes to (null or empty: the first one); ApiError 404
  // for an unknown name, 503 while loading.
  std::shared_ptr<const ServedModel> find_model(const std::string* name) const;
  void check_auth(const HttpRequest& req) const;  // ApiError 401
  bool draining() const { return draining_.load(); }
  const RequestLimits& limits() const { return config_.limits; }
  // The body as a JSON object within the limits (ApiError 400).
  json parse_request(const HttpRequest& req) const;
  // 400 when a prompt of `bytes` is over the model's byte limit (before tokenizing).
  void check_prompt_bytes(const ServedModel& m, size_t bytes, const char* param) const;
  // Runs `work` on the preprocessing pool; what it throws is answered in
  // `format`. ApiError 429 when the pool's queue is full. The request counts
  // as in flight (active_requests, wait_idle) until `work` returns.
  void preprocess(const std::shared_ptr<Responder>& res, ErrorFormat format, std::function<void()> work);
  // Validates the prompt on the engine, admits it (ApiError 429), queues it
  // and answers through the job's format (streamed or at the end).
  void start_single(std::shared_ptr<SingleJob> job, const std::shared_ptr<Responder>& res);

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
  using Model = ServedModel;
  struct PromptInput;

  HttpResponse route(HttpRequest& req, const std::shared_ptr<Responder>& responder, bool& deferred);
  void handle_body(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  std::shared_ptr<const Model> request_model(const json& body) const;  // by its "model" field

  HttpResponse models();
  HttpResponse model(const std::string& id);  // GET /v1/models/{id}
  HttpResponse health();
  HttpResponse metrics();
  HttpResponse tokenize(const HttpRequest& req);
  HttpResponse detokenize(const HttpRequest& req);
  HttpResponse chat_render(const HttpRequest& req);
  void completions(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  void chat(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  void generate(const HttpRequest& req, const std::shared_ptr<Responder>& res);

  std::string render_chat(const Model& m, Fields& f, bool& add_special_default, std::string* echo_prefix) const;
  void start_job(std::shared_ptr<GenerationJob> job, const std::shared_ptr<Responder>& res);
  void admit(const Model& model, int64_t requests, int64_t prompt_tokens);
  void job_started_stream(int64_t prompt_tokens);  // first output of a queued prompt
  void track(const std::shared_ptr<TrackedJob>& job);
  void job_done(TrackedJob* job);
  void preprocess_done();
  int64_t prompt_byte_limit(const ServedModel& m) const;

  ApiConfig config_;
  std::vector<std::shared_ptr<const Model>> models_;  // in the order added; the first is the default
  std::vector<Refusal> refused_;
  bool ready_ = false;
  mutable std::mutex model_mu_;
  std::unique_ptr<StreamPump> pump_;
  std::unique_ptr<PreprocessPool> pool_;  // destroyed first: its tasks use everything else
  std::atomic<bool> draining_{false};
  const int64_t created_;

  // Admission and shutdown bookkeeping.
  mutable std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::unordered_map<TrackedJob*, std::weak_ptr<TrackedJob>> jobs_;
  int64_t queued_requests_ = 0;
  int64_t queued_tokens_ = 0;
  int64_t preprocessing_ = 0;  // requests submitted to pool_ and not yet handed on
};

}  // namespace halo::serve
