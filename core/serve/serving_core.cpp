#include "serve/serving_core.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>

namespace halo::serve {

namespace {
constexpr size_t kMaxAdminWaiting = 16;
}  // namespace

ServingCore::ServingCore(ServingConfig config)
    : config_(std::move(config)), pump_(std::make_unique<StreamPump>()) {
  // Requests waiting for a preprocessing thread are bounded like those waiting for the engine.
  pool_ = std::make_unique<PreprocessPool>(
      config_.preprocess_threads, static_cast<size_t>(std::max(0, config_.max_queued_requests)));
  admin_pool_ = std::make_unique<PreprocessPool>(1, kMaxAdminWaiting);
}

ServingCore::~ServingCore() {
  admin_pool_.reset();
  pool_.reset();  // its running tasks may still start generations on the pump
  pump_.reset();
}

// ---------------------------------------------------------------- models

void ServingCore::add_model(std::shared_ptr<ServedModel> m) {
  std::lock_guard lk(model_mu_);
  for (const auto& name : m->names)
    for (const auto& other : models_)
      if (other->answers_to(name)) throw Error(fmt::format("two models are named '{}'", name));
  models_.push_back(std::move(m));
}

void ServingCore::refuse_model(const std::string& name, const std::string& reason) {
  std::lock_guard lk(model_mu_);
  refused_.push_back({name, reason});
}

void ServingCore::set_ready() {
  std::lock_guard lk(model_mu_);
  ready_ = true;
}

std::vector<std::shared_ptr<const ServedModel>> ServingCore::served_models() const {
  std::lock_guard lk(model_mu_);
  return models_;
}

std::vector<ServingCore::Refusal> ServingCore::refused_models() const {
  std::lock_guard lk(model_mu_);
  return refused_;
}

std::string ServingCore::not_ready_reason() const {
  std::lock_guard lk(model_mu_);
  if (!ready_) return "the model is still loading";
  if (models_.empty()) return "no model is being served";
  for (const auto& m : models_)
    if (!m->engine->healthy()) return "the engine failed (see the server log)";
  if (stopping_) return "the server is shutting down";
  return {};
}

bool ServingCore::ready() const { return not_ready_reason().empty(); }

std::shared_ptr<const ServedModel> ServingCore::find_model(const std::string* name) const {
  std::lock_guard lk(model_mu_);
  if (!name || name->empty()) {
    if (models_.empty())
      throw ApiError(503, ready_ ? "no model is being served" : "the model is still loading");
    return models_.front();
  }
  for (const auto& m : models_)
    if (m->answers_to(*name)) return m;
  for (const auto& r : refused_)
    if (r.name == *name)
      throw ApiError(
          404,
          fmt::format("The model `{}` does not exist. It was refused at load: {}", *name, r.reason),
          "model", error_code::kModelNotFound);
  if (!ready_) throw ApiError(503, fmt::format("the model `{}` is not loaded yet", *name), "model");
  throw ApiError(404, fmt::format("The model `{}` does not exist.", *name), "model",
                 error_code::kModelNotFound);
}

// ---------------------------------------------------------------- requests

int64_t ServingCore::prompt_byte_limit(const ServedModel& m) const {
  return config_.limits.max_prompt_bytes > 0 ? config_.limits.max_prompt_bytes
                                             : kPromptBytesPerToken * std::max(1, m.max_model_len);
}

void ServingCore::check_prompt_bytes(const ServedModel& m, size_t bytes, const char* param) const {
  const int64_t limit = prompt_byte_limit(m);
  if (static_cast<int64_t>(bytes) <= limit) return;
  throw ApiError(
      400,
      fmt::format(
          "the prompt is {} bytes, over the limit of {} bytes it is tokenized within (the model's "
          "context is {} tokens; --max-prompt-bytes)",
          bytes, limit, m.max_model_len),
      param, error_code::kContextLength);
}

void ServingCore::preprocess(std::function<void()> work, Lane lane) {
  {
    std::lock_guard lk(jobs_mu_);
    preprocessing_++;
  }
  auto done = [this] {
    {
      std::lock_guard lk(jobs_mu_);
      preprocessing_--;
    }
    jobs_cv_.notify_all();
  };
  PreprocessPool& pool = lane == Lane::kAdmin ? *admin_pool_ : *pool_;
  if (!pool.submit([work = std::move(work), done] {
        work();
        done();
      })) {
    done();
    ApiError e(429, lane == Lane::kAdmin
                        ? fmt::format("{} adapter loads and unloads are waiting already; retry after 1 s",
                                      pool.waiting())
                        : fmt::format("the server is at capacity: {} requests are waiting to be "
                                      "tokenized (--max-queued-requests {}); retry after 1 s",
                                      pool.waiting(), config_.max_queued_requests));
    e.headers.push_back({"Retry-After", "1"});
    throw e;
  }
}

void ServingCore::admit(const ServedModel& m, int64_t reqs, int64_t tokens) {
  std::lock_guard lk(jobs_mu_);
  bool over_requests =
      config_.max_queued_requests > 0 && queued_requests_ + reqs > config_.max_queued_requests;
  // A request larger than the token budget is still admitted into an empty queue.
  bool over_tokens = config_.max_queued_tokens > 0 && queued_tokens_ > 0 &&
                     queued_tokens_ + tokens > config_.max_queued_tokens;
  if (!over_requests && !over_tokens) {
    queued_requests_ += reqs;
    queued_tokens_ += tokens;
    return;
  }
  std::string what = over_requests
                         ? fmt::format("{} requests are waiting (--max-queued-requests {})",
                                       queued_requests_, config_.max_queued_requests)
                         : fmt::format("{} prompt tokens are waiting (--max-queued-tokens {})",
                                       queued_tokens_, config_.max_queued_tokens);
  // Retry-After: about the time the queue ahead takes, from the mean request latency.
  double mean = 1.0;
  auto em = m.engine->metrics();
  if (em.e2e_request_latency_seconds.count() > 0)
    mean = em.e2e_request_latency_seconds.sum() / double(em.e2e_request_latency_seconds.count());
  int waves = int((queued_requests_ + m.max_num_seqs - 1) / std::max(1, m.max_num_seqs));
  int retry = std::clamp(static_cast<int>(std::ceil(mean * std::max(1, waves))), 1, 60);
  ApiError e(429, fmt::format("the server is at capacity: {}; retry after {} s", what, retry));
  e.headers.push_back({"Retry-After", std::to_string(retry)});
  throw e;
}

void ServingCore::leave_queue(int64_t prompt_tokens) {
  std::lock_guard lk(jobs_mu_);
  queued_requests_--;
  queued_tokens_ -= prompt_tokens;
}

void ServingCore::done(Generation* g) {
  {
    std::lock_guard lk(jobs_mu_);
    running_.erase(g);
  }
  jobs_cv_.notify_all();
}

void ServingCore::start(const std::shared_ptr<Generation>& g) {
  const ServedModel& m = g->model();
  for (const auto& p : g->prompts())
    m.engine->engine().validate_request(p.ids, g->options().sampling);
  admit(m, static_cast<int64_t>(g->prompts().size()), g->prompt_tokens());
  g->on_started_ = [this](int64_t tokens) { leave_queue(tokens); };
  g->on_done_ = [this, key = g.get()] { done(key); };
  try {
    for (size_t i = 0; i < g->prompts().size(); ++i) {
      std::string eid = g->prompts().size() > 1 ? fmt::format("{}-{}", g->id(), i) : g->id();
      g->streams_.push_back(m.engine->add_request(eid, g->prompts()[i].ids, g->options()));
      g->engine_ids_.push_back(eid);
    }
    g->sink_->on_start(*g);  // before the pump can deliver any output
  } catch (...) {
    g->abort_engine();
    for (const auto& p : g->prompts()) leave_queue(static_cast<int64_t>(p.ids.size()));
    throw;
  }
  {
    std::lock_guard lk(jobs_mu_);
    running_[g.get()] = g;
  }
  for (size_t i = 0; i < g->streams_.size(); ++i) pump_->add(g->streams_[i], g, i);
}

// ---------------------------------------------------------------- shutdown

size_t ServingCore::active_requests() const {
  std::lock_guard lk(jobs_mu_);
  return running_.size() + static_cast<size_t>(preprocessing_);
}

bool ServingCore::wait_idle(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock lk(jobs_mu_);
  return jobs_cv_.wait_until(lk, deadline, [&] { return running_.empty() && preprocessing_ == 0; });
}

void ServingCore::abort_all(const std::string& reason) {
  std::vector<std::shared_ptr<Generation>> live;
  {
    std::lock_guard lk(jobs_mu_);
    for (auto& [p, w] : running_)
      if (auto g = w.lock()) live.push_back(std::move(g));
  }
  if (!live.empty()) spdlog::warn("aborting {} requests: {}", live.size(), reason);
  for (auto& g : live) g->abort_for_shutdown();
}

}  // namespace halo::serve
