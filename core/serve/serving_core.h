#pragma once
// The serving core every frontend shares, with no wire format in it: the
// models served (routing by name), admission control, the preprocessing
// pool, the stream pump, and starting and tracking generations until they
// end (graceful shutdown waits for them). The HTTP frontends (OpenAI/vLLM,
// KServe v2, SageMaker) are codecs over it; an in-process caller or a gRPC
// frontend uses it the same way: build a Generation with a sink, start() it.
//
// Threads: every method may be called from any thread. Errors are ApiError
// (serve/api_error.h): the status says what went wrong, whatever the wire.
// Lifetime: destroy the core after the frontends that use it; destroying it
// stops the pool (its running tasks finish) and then the pump.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "serve/api_error.h"
#include "serve/generation.h"
#include "serve/preprocess_pool.h"
#include "serve/served_model.h"
#include "serve/stream_pump.h"

namespace halo::serve {

struct ServingConfig {
  int max_queued_requests = 4096;  // waiting for the engine or the pool; 0: no limit
  int64_t max_queued_tokens = 0;   // prompt tokens waiting; 0: no limit
  RequestLimits limits;
  int preprocess_threads = 2;  // PreprocessPool threads
};

class ServingCore {
 public:
  explicit ServingCore(ServingConfig config);
  ~ServingCore();
  ServingCore(const ServingCore&) = delete;
  ServingCore& operator=(const ServingCore&) = delete;

  const ServingConfig& config() const { return config_; }
  const RequestLimits& limits() const { return config_.limits; }

  // ---- models ----
  // Routable as soon as added; ready() needs set_ready (every model tried).
  // A refused model is listed with its reason (the 404 that names it).
  void add_model(std::shared_ptr<ServedModel> model);
  void refuse_model(const std::string& name, const std::string& reason);
  void set_ready();
  struct Refusal {
    std::string name, reason;
  };
  std::vector<std::shared_ptr<const ServedModel>> served_models() const;
  std::vector<Refusal> refused_models() const;
  // Loading finished, at least one model served, every engine healthy, and
  // no shutdown begun: what /health, KServe's ready and gRPC's ServerReady say.
  bool ready() const;
  // Why the core is not ready ("" when it is): loading, no model, engine
  // failed, shutting down.
  std::string not_ready_reason() const;
  // The model `name` routes to (null or empty: the first one); 404 for an
  // unknown name, 503 while loading.
  std::shared_ptr<const ServedModel> find_model(const std::string* name) const;

  // ---- requests ----
  // 400 when a prompt of `bytes` is over the model's byte limit (checked
  // before tokenizing; `param` names the field).
  void check_prompt_bytes(const ServedModel& m, size_t bytes, const char* param) const;
  int64_t prompt_byte_limit(const ServedModel& m) const;
  // Where preprocessing runs: requests on the pool of preprocess_threads;
  // admin work (adapter loads, which read files and may wait on the Hub) on
  // its own thread, in the order it came, so that it never holds a thread
  // that requests wait for.
  enum class Lane { kRequest, kAdmin };
  // Runs `work` on `lane`; it counts as in flight (active_requests,
  // wait_idle) until it returns. 429 when the lane's queue is full. `work`
  // must not throw.
  void preprocess(std::function<void()> work, Lane lane = Lane::kRequest);
  // Validates every prompt on the engine, admits the generation (429 when
  // the queue is full), calls the sink's on_start, and queues it. Throws
  // before anything is queued.
  void start(const std::shared_ptr<Generation>& generation);

  // ---- shutdown ----
  // Two steps, so a load balancer can take the server out before it refuses
  // work: set_stopping() makes ready() false but requests are still served;
  // set_draining() then refuses new generations with 503.
  void set_stopping() { stopping_ = true; }
  bool draining() const { return draining_.load(); }
  void set_draining() { stopping_ = true, draining_ = true; }
  // Generations running plus requests being preprocessed.
  size_t active_requests() const;
  // Waits until nothing is active or the deadline passes; true if nothing is left.
  bool wait_idle(std::chrono::steady_clock::time_point deadline);
  // Ends every running generation now (their callers get a 503).
  void abort_all(const std::string& reason);

 private:
  void admit(const ServedModel& model, int64_t requests, int64_t prompt_tokens);
  void leave_queue(int64_t prompt_tokens);  // a prompt's first output
  void done(Generation* generation);

  ServingConfig config_;
  mutable std::mutex model_mu_;
  std::vector<std::shared_ptr<const ServedModel>>
      models_;  // in the order added; the first is the default
  std::vector<Refusal> refused_;
  bool ready_ = false;

  std::unique_ptr<StreamPump> pump_;
  std::unique_ptr<PreprocessPool> pool_;  // destroyed first: its tasks use everything else
  std::unique_ptr<PreprocessPool> admin_pool_;  // one thread, kMaxAdminWaiting queued
  std::atomic<bool> stopping_{false};
  std::atomic<bool> draining_{false};

  mutable std::mutex jobs_mu_;
  std::condition_variable jobs_cv_;
  std::unordered_map<Generation*, std::weak_ptr<Generation>> running_;
  int64_t queued_requests_ = 0;
  int64_t queued_tokens_ = 0;
  int64_t preprocessing_ = 0;
};

}  // namespace halo::serve
