#include "grpc/grpc_frontend.h"

#include <fmt/format.h>
#include <grpcpp/grpcpp.h>
#include <spdlog/spdlog.h>

#include <deque>
#include <mutex>
#include <vector>

#include "common/error.h"
#include "grpc/infer_tensors.h"
#include "grpc_service.grpc.pb.h"
#include "serve/triton_request.h"

namespace halo::grpc_frontend {

using serve::ApiError;
using serve::Generation;
using serve::TritonRequest;
using StreamResponse = inference::ModelStreamInferResponse;

namespace {

// The one map from the serving core's statuses to gRPC codes.
grpc::StatusCode grpc_code(int status) {
  switch (status) {
    case 400:
    case 413:
      return grpc::StatusCode::INVALID_ARGUMENT;
    case 401:
      return grpc::StatusCode::UNAUTHENTICATED;
    case 403:
      return grpc::StatusCode::PERMISSION_DENIED;
    case 404:
      return grpc::StatusCode::NOT_FOUND;
    case 429:
      return grpc::StatusCode::RESOURCE_EXHAUSTED;
    case 503:
      return grpc::StatusCode::UNAVAILABLE;
    default:
      return status >= 400 && status < 500 ? grpc::StatusCode::INVALID_ARGUMENT
                                           : grpc::StatusCode::INTERNAL;
  }
}

// The message travels in a trailer (grpc-message), which a client refuses
// past its metadata limit (8 KiB by default): one quoting a 100 KB model name
// left the call unanswered. It is cut to 1 KiB, on a UTF-8 boundary.
grpc::Status status_of(int status, std::string message) {
  constexpr size_t kMaxMessage = 1024;
  if (message.size() > kMaxMessage) {
    size_t n = kMaxMessage;
    while (n > 0 && (static_cast<unsigned char>(message[n]) & 0xC0) == 0x80) --n;
    message.resize(n);
    message += "...";
  }
  return grpc::Status(grpc_code(status), message);
}

grpc::Status current_status() {
  ApiError e = serve::to_api_error(std::current_exception());
  return status_of(e.status(), e.what());
}

// The tensors of both model styles, for ModelMetadata and ModelConfig.
struct TensorSpec {
  const char* name;
  const char* datatype;
  inference::DataType type;
  int64_t dim;
};
constexpr TensorSpec kInputs[] = {
    {"text_input", "BYTES", inference::TYPE_STRING, 1},
    {"stream", "BOOL", inference::TYPE_BOOL, 1},
    {"sampling_parameters", "BYTES", inference::TYPE_STRING, 1},
    {"exclude_input_in_output", "BOOL", inference::TYPE_BOOL, 1},
    {"return_finish_reason", "BOOL", inference::TYPE_BOOL, 1},
    {"return_num_input_tokens", "BOOL", inference::TYPE_BOOL, 1},
    {"return_num_output_tokens", "BOOL", inference::TYPE_BOOL, 1},
    {"return_cumulative_logprob", "BOOL", inference::TYPE_BOOL, 1},
    {"max_tokens", "INT32", inference::TYPE_INT32, 1},
    {"bad_words", "BYTES", inference::TYPE_STRING, -1},
    {"stop_words", "BYTES", inference::TYPE_STRING, -1},
    {"end_id", "INT32", inference::TYPE_INT32, 1},
    {"pad_id", "INT32", inference::TYPE_INT32, 1},
    {"temperature", "FP32", inference::TYPE_FP32, 1},
    {"top_k", "INT32", inference::TYPE_INT32, 1},
    {"top_p", "FP32", inference::TYPE_FP32, 1},
    {"random_seed", "UINT64", inference::TYPE_UINT64, 1},
    {"beam_width", "INT32", inference::TYPE_INT32, 1},
    {"return_log_probs", "BOOL", inference::TYPE_BOOL, 1},
};
constexpr TensorSpec kOutputs[] = {
    {"text_output", "BYTES", inference::TYPE_STRING, -1},
    {"finish_reason", "BYTES", inference::TYPE_STRING, 1},
    {"num_input_tokens", "UINT32", inference::TYPE_UINT32, 1},
    {"num_output_tokens", "UINT32", inference::TYPE_UINT32, 1},
    {"cumulative_logprob", "FP32", inference::TYPE_FP32, 1},
    {"cum_log_probs", "FP32", inference::TYPE_FP32, 1},
    {"output_log_probs", "FP32", inference::TYPE_FP32, -1},
};

// Where a request's answers go: one unary call, or one request of a stream.
class Replier {
 public:
  virtual ~Replier() = default;
  // A response (unary: the answer; stream: queued for writing).
  virtual void reply(StreamResponse r) = 0;
  // The request is over: OK, or its failure.
  virtual void end(const grpc::Status& s, const std::string& request_id) = 0;
  // The generation to cancel when the client goes; false when it has gone already.
  virtual bool attach(const std::shared_ptr<Generation>& g) = 0;
};

// One Triton generate request's generation, answered as ModelInferResponses.
class InferJob final : public serve::GenerationSink {
 public:
  InferJob(TritonRequest req, std::string version, std::string id, bool raw, bool decoupled,
           std::shared_ptr<Replier> out)
      : req_(std::move(req)),
        version_(std::move(version)),
        id_(std::move(id)),
        raw_(raw),
        decoupled_(decoupled),
        out_(std::move(out)) {}

  void on_start(Generation& g) override { g_ = &g; }

  void on_output(Generation&, size_t, const engine::StreamEvent& ev, size_t first_token) override {
    if (!req_.stream) return;
    // Tokens whose text is held back (an incomplete character, a possible
    // stop string) are counted with the response that carries their text.
    if (pending_tokens_ == 0) pending_first_ = first_token;
    pending_tokens_ += ev.token_ids.size();
    const std::string text = req_.event_text(output(), ev);
    if (text.empty() && !ev.finished) return;
    StreamResponse r;
    fill(*r.mutable_infer_response(), text, pending_first_, pending_tokens_, ev.finished);
    pending_tokens_ = 0;
    out_->reply(std::move(r));
    final_sent_ = ev.finished;
  }

  void on_error(Generation&) override {}  // answered by on_finish

  void on_finish(Generation& g) override {
    if (g.cancelled()) return out_->end(grpc::Status::CANCELLED, id_);
    if (g.failed()) return out_->end(status_of(g.error_status(), g.error()), id_);
    if (!req_.stream || !final_sent_) {
      const std::string text = req_.stream          ? ""
                               : req_.exclude_input ? req_.output_text(output())
                                                    : req_.prompt + req_.output_text(output());
      StreamResponse r;
      fill(*r.mutable_infer_response(), text, req_.stream ? pending_first_ : 0,
           req_.stream ? pending_tokens_ : output().tokens.size(), true);
      out_->reply(std::move(r));
    }
    out_->end(grpc::Status::OK, id_);
  }

 private:
  const serve::ChoiceOutput& output() const { return g_->choices().front(); }

  // One response: text_output and the outputs asked for; `tokens`: how many
  // tokens this response carries (the vLLM backend's num_output_tokens).
  void fill(inference::ModelInferResponse& r, const std::string& text, size_t first_token,
            size_t tokens, bool last) const {
    r.set_model_name(req_.model->name());
    r.set_model_version(version_);
    r.set_id(id_);
    if (decoupled_) (*r.mutable_parameters())["triton_final_response"].set_bool_param(last);
    OutputWriter w(r, raw_);
    w.bytes("text_output", {text});
    if (req_.want_finish_reason) {
      const char* reason = last ? serve::finish_name(output().finish_reason) : nullptr;
      w.bytes("finish_reason", {reason ? reason : "None"});  // the vLLM backend's str(None)
    }
    if (req_.want_input_tokens)
      w.uint32("num_input_tokens", static_cast<uint32_t>(req_.prompt_ids.size()));
    if (req_.want_output_tokens) w.uint32("num_output_tokens", static_cast<uint32_t>(tokens));
    if (req_.want_log_probs || req_.want_cumulative_logprob) {
      double cum = 0;
      const std::vector<double> lp = req_.log_probs(output(), first_token, cum);
      if (req_.want_cumulative_logprob) w.fp32("cumulative_logprob", {static_cast<float>(cum)});
      if (req_.want_log_probs) {
        w.fp32("cum_log_probs", {static_cast<float>(cum)});
        w.fp32("output_log_probs", std::vector<float>(lp.begin(), lp.end()));
      }
    }
  }

  TritonRequest req_;
  std::string version_, id_;
  bool raw_, decoupled_;
  std::shared_ptr<Replier> out_;
  const Generation* g_ = nullptr;
  bool final_sent_ = false;
  size_t pending_tokens_ = 0, pending_first_ = 0;  // streamed tokens not yet answered
};

class Service;

// Decodes, tokenizes (on the core's pool) and starts one request; what
// fails is answered through `out`. Called on a gRPC thread.
void start_request(Service& svc, const inference::ModelInferRequest& msg, bool stream_call,
                   const std::shared_ptr<Replier>& out);

// ------------------------------------------------------------ unary

class UnaryCall final : public grpc::ServerUnaryReactor {
 public:
  // The answer goes into `resp` (gRPC's, valid until OnDone).
  class State final : public Replier {
   public:
    State(UnaryCall* call, inference::ModelInferResponse* resp) : call_(call), resp_(resp) {}
    void reply(StreamResponse r) override {
      std::lock_guard lock(mu_);
      if (!finished_) *resp_ = std::move(*r.mutable_infer_response());
    }
    void end(const grpc::Status& s, const std::string&) override {
      UnaryCall* call = nullptr;
      {
        std::lock_guard lock(mu_);
        if (finished_) return;
        finished_ = true;
        call = call_;
      }
      call->Finish(s);  // OnDone (and the call's end) follows
    }
    bool attach(const std::shared_ptr<Generation>& g) override {
      std::lock_guard lock(mu_);
      gen_ = g;
      return !cancelled_;
    }
    void cancel() {
      std::shared_ptr<Generation> g;
      {
        std::lock_guard lock(mu_);
        cancelled_ = true;
        g = gen_.lock();
      }
      if (g) g->cancel();
    }

   private:
    std::mutex mu_;
    UnaryCall* call_;
    inference::ModelInferResponse* resp_;
    std::weak_ptr<Generation> gen_;
    bool finished_ = false, cancelled_ = false;
  };

  UnaryCall(inference::ModelInferResponse* resp) : state_(std::make_shared<State>(this, resp)) {}
  const std::shared_ptr<State>& state() const { return state_; }
  void OnCancel() override { state_->cancel(); }
  void OnDone() override { delete this; }  // gRPC's reactor lifetime: it ends itself

 private:
  std::shared_ptr<State> state_;
};

// ------------------------------------------------------------ streaming

using BidiReactor = grpc::ServerBidiReactor<inference::ModelInferRequest, StreamResponse>;

// One ModelStreamInfer call: requests read one after the other, answers
// written one at a time from a queue, the call finished once the client has
// half-closed and every request has ended.
class StreamCall final : public BidiReactor {
 public:
  class State final : public Replier, public std::enable_shared_from_this<State> {
   public:
    explicit State(StreamCall* call) : call_(call) {}

    void reply(StreamResponse r) override {
      const StreamResponse* next = nullptr;
      {
        std::lock_guard lock(mu_);
        if (cancelled_ || finished_) return;
        queue_.push_back(std::move(r));
        if (writing_) return;
        writing_ = true;
        next = &queue_.front();
      }
      call_->StartWrite(next);
    }
    void end(const grpc::Status& s, const std::string& request_id) override {
      if (!s.ok() && s.error_code() != grpc::StatusCode::CANCELLED) {
        StreamResponse r;
        r.set_error_message(s.error_message());
        r.mutable_infer_response()->set_id(request_id);
        reply(std::move(r));
      }
      {
        std::lock_guard lock(mu_);
        --in_flight_;
      }
      maybe_finish();
    }
    bool attach(const std::shared_ptr<Generation>& g) override {
      std::lock_guard lock(mu_);
      std::erase_if(gens_, [](const auto& w) { return w.expired(); });
      gens_.push_back(g);
      return !cancelled_;
    }
    void begin_request() {
      std::lock_guard lock(mu_);
      ++in_flight_;
    }
    void reads_done() {
      {
        std::lock_guard lock(mu_);
        reads_done_ = true;
      }
      maybe_finish();
    }
    void write_done(bool ok) {
      const StreamResponse* next = nullptr;
      {
        std::lock_guard lock(mu_);
        queue_.pop_front();
        if (!ok) cancelled_ = true;
        if (cancelled_) queue_.clear();
        if (!queue_.empty())
          next = &queue_.front();
        else
          writing_ = false;
      }
      if (!ok) cancel();
      if (next)
        call_->StartWrite(next);
      else
        maybe_finish();
    }
    // The client went away: every generation of the call stops.
    void cancel() {
      std::vector<std::weak_ptr<Generation>> gens;
      {
        std::lock_guard lock(mu_);
        cancelled_ = true;
        gens.swap(gens_);
      }
      for (auto& w : gens)
        if (auto g = w.lock()) g->cancel();
    }

   private:
    void maybe_finish() {
      grpc::Status s;
      {
        std::lock_guard lock(mu_);
        if (finished_ || !reads_done_ || in_flight_ > 0 || writing_) return;
        finished_ = true;
        s = cancelled_ ? grpc::Status::CANCELLED : grpc::Status::OK;
      }
      call_->Finish(s);
    }

    std::mutex mu_;
    StreamCall* call_;                  // valid until its OnDone, which follows Finish
    std::deque<StreamResponse> queue_;  // front: being written
    std::vector<std::weak_ptr<Generation>> gens_;
    int in_flight_ = 0;
    bool writing_ = false, reads_done_ = false, cancelled_ = false, finished_ = false;
  };

  StreamCall(Service& svc, grpc::CallbackServerContext* ctx);
  void OnReadDone(bool ok) override;
  void OnWriteDone(bool ok) override { state_->write_done(ok); }
  void OnCancel() override { state_->cancel(); }
  void OnDone() override { delete this; }  // gRPC's reactor lifetime: it ends itself

 private:
  Service& svc_;
  std::shared_ptr<State> state_;
  inference::ModelInferRequest request_;
};

// ------------------------------------------------------------ the service

class Service final : public inference::GRPCInferenceService::CallbackService {
 public:
  Service(const serve::FrontendContext& ctx, std::string version)
      : ctx_(ctx), version_(std::move(version)) {}
  const serve::FrontendContext& ctx() const { return ctx_; }

  void check_auth(grpc::CallbackServerContext* c) const {
    const auto& md = c->client_metadata();
    auto it = md.find("authorization");
    ctx_.check_bearer(it == md.end() ? std::string()
                                     : std::string(it->second.data(), it->second.size()));
  }

  std::shared_ptr<const serve::ServedModel> model(const std::string& name,
                                                  const std::string& version) const {
    auto m = ctx_.core().find_model(&name);
    if (!version.empty() && version != m->version)
      throw ApiError(404, fmt::format("model '{}' has no version {} (it serves version {})", name,
                                      version, m->version));
    return m;
  }

  grpc::ServerUnaryReactor* ServerLive(grpc::CallbackServerContext* c,
                                       const inference::ServerLiveRequest*,
                                       inference::ServerLiveResponse* r) override {
    r->set_live(true);
    return done(c, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* ServerReady(grpc::CallbackServerContext* c,
                                        const inference::ServerReadyRequest*,
                                        inference::ServerReadyResponse* r) override {
    r->set_ready(ctx_.core().ready());
    return done(c, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* ServerMetadata(grpc::CallbackServerContext* c,
                                           const inference::ServerMetadataRequest*,
                                           inference::ServerMetadataResponse* r) override {
    r->set_name("halo");
    r->set_version(version_);
    r->add_extensions("generate");
    r->add_extensions("statistics");
    return done(c, grpc::Status::OK);
  }
  grpc::ServerUnaryReactor* ModelReady(grpc::CallbackServerContext* c,
                                       const inference::ModelReadyRequest* q,
                                       inference::ModelReadyResponse* r) override {
    return guarded(c, [&] {
      check_auth(c);
      r->set_ready(model(q->name(), q->version())->engine->healthy());
    });
  }
  grpc::ServerUnaryReactor* ModelMetadata(grpc::CallbackServerContext* c,
                                          const inference::ModelMetadataRequest* q,
                                          inference::ModelMetadataResponse* r) override {
    return guarded(c, [&] {
      check_auth(c);
      auto m = model(q->name(), q->version());
      r->set_name(m->name());
      r->add_versions(m->version);
      r->set_platform("halo");
      for (const auto& t : kInputs) add_tensor(r->add_inputs(), t);
      for (const auto& t : kOutputs) add_tensor(r->add_outputs(), t);
    });
  }
  grpc::ServerUnaryReactor* ModelConfig(grpc::CallbackServerContext* c,
                                        const inference::ModelConfigRequest* q,
                                        inference::ModelConfigResponse* r) override {
    return guarded(c, [&] {
      check_auth(c);
      auto m = model(q->name(), q->version());
      auto* cfg = r->mutable_config();
      cfg->set_name(m->name());
      cfg->set_backend("halo");
      cfg->set_max_batch_size(m->max_batch_size);
      for (const auto& t : kInputs) {
        auto* in = cfg->add_input();
        in->set_name(t.name);
        in->set_data_type(t.type);
        in->add_dims(t.dim);
        in->set_optional(std::string_view(t.name) != "text_input");
      }
      for (const auto& t : kOutputs) {
        auto* out = cfg->add_output();
        out->set_name(t.name);
        out->set_data_type(t.type);
        out->add_dims(t.dim);
      }
      auto& params = *cfg->mutable_parameters();
      params["max_model_len"].set_string_value(std::to_string(m->max_model_len));
      params["max_num_seqs"].set_string_value(std::to_string(m->max_num_seqs));
      params["block_size"].set_string_value(std::to_string(m->block_size));
      params["num_kv_blocks"].set_string_value(std::to_string(m->num_blocks));
      cfg->mutable_model_transaction_policy()->set_decoupled(true);
    });
  }
  grpc::ServerUnaryReactor* ModelStatistics(grpc::CallbackServerContext* c,
                                            const inference::ModelStatisticsRequest* q,
                                            inference::ModelStatisticsResponse* r) override {
    return guarded(c, [&] {
      check_auth(c);
      std::vector<std::shared_ptr<const serve::ServedModel>> models;
      if (q->name().empty())
        models = ctx_.core().served_models();
      else
        models.push_back(model(q->name(), q->version()));
      for (const auto& m : models) add_statistics(*m, r->add_model_stats());
    });
  }
  grpc::ServerUnaryReactor* RepositoryIndex(grpc::CallbackServerContext* c,
                                            const inference::RepositoryIndexRequest* q,
                                            inference::RepositoryIndexResponse* r) override {
    return guarded(c, [&] {
      check_auth(c);
      for (const auto& m : ctx_.core().served_models()) {
        auto* e = r->add_models();
        e->set_name(m->name());
        e->set_version(m->version);
        e->set_state("READY");
      }
      if (q->ready()) return;
      for (const auto& refused : ctx_.core().refused_models()) {
        auto* e = r->add_models();
        e->set_name(refused.name);
        e->set_state("UNAVAILABLE");
        e->set_reason(refused.reason);
      }
    });
  }

  grpc::ServerUnaryReactor* ModelInfer(grpc::CallbackServerContext* c,
                                       const inference::ModelInferRequest* q,
                                       inference::ModelInferResponse* r) override {
    auto* call = new UnaryCall(r);  // gRPC's reactor pattern: it deletes itself in OnDone
    std::shared_ptr<Replier> state = call->state();
    try {
      check_auth(c);
      start_request(*this, *q, false, state);
    } catch (...) {
      state->end(current_status(), q->id());
    }
    return call;
  }

  BidiReactor* ModelStreamInfer(grpc::CallbackServerContext* c) override {
    return new StreamCall(*this, c);  // gRPC's reactor pattern: it deletes itself in OnDone
  }

 private:
  static grpc::ServerUnaryReactor* done(grpc::CallbackServerContext* c, const grpc::Status& s) {
    auto* reactor = c->DefaultReactor();
    reactor->Finish(s);
    return reactor;
  }
  template <typename F>
  static grpc::ServerUnaryReactor* guarded(grpc::CallbackServerContext* c, F&& body) {
    try {
      body();
      return done(c, grpc::Status::OK);
    } catch (...) {
      return done(c, current_status());
    }
  }
  static void add_tensor(inference::ModelMetadataResponse::TensorMetadata* out,
                         const TensorSpec& t) {
    out->set_name(t.name);
    out->set_datatype(t.datatype);
    out->add_shape(t.dim);
  }
  // Triton's statistics from the engine's counters (every frontend's requests).
  static void add_statistics(const serve::ServedModel& m, inference::ModelStatistics* s) {
    const engine::EngineMetrics em = m.engine->metrics();
    uint64_t ok = 0, failed = 0;
    for (const auto& [reason, n] : em.request_success)
      (reason == "stop" || reason == "length" ? ok : failed) += n;
    s->set_name(m.name());
    s->set_version(m.version);
    s->set_inference_count(ok);
    s->set_execution_count(em.iteration_tokens_total.count());
    auto* st = s->mutable_inference_stats();
    st->mutable_success()->set_count(ok);
    st->mutable_success()->set_ns(
        static_cast<uint64_t>(em.e2e_request_latency_seconds.sum() * 1e9));
    st->mutable_fail()->set_count(failed);
    st->mutable_queue()->set_count(em.request_queue_time_seconds.count());
    st->mutable_queue()->set_ns(static_cast<uint64_t>(em.request_queue_time_seconds.sum() * 1e9));
  }

  const serve::FrontendContext& ctx_;
  std::string version_;
};

StreamCall::StreamCall(Service& svc, grpc::CallbackServerContext* ctx)
    : svc_(svc), state_(std::make_shared<State>(this)) {
  try {
    svc_.check_auth(ctx);
  } catch (...) {
    Finish(current_status());
    return;
  }
  StartRead(&request_);
}

void StreamCall::OnReadDone(bool ok) {
  if (!ok) return state_->reads_done();
  state_->begin_request();
  try {
    start_request(svc_, request_, true, state_);
  } catch (...) {
    state_->end(current_status(), request_.id());
  }
  StartRead(&request_);
}

void start_request(Service& svc, const inference::ModelInferRequest& msg, bool stream_call,
                   const std::shared_ptr<Replier>& out) {
  const serve::FrontendContext& ctx = svc.ctx();
  if (ctx.core().draining()) throw ApiError(503, "the server is shutting down");
  auto model = svc.model(msg.model_name(), msg.model_version());  // 404 before any work
  InferInputs in = read_inputs(msg);
  // Tokenizing and the engine's checks run on the core's pool.
  ctx.core().preprocess([&ctx, out, in = std::move(in), name = msg.model_name(),
                         version = model->version, id = msg.id(), stream_call] {
    try {
      TritonRequest req =
          parse_triton_request(ctx, name, in.body, false, stream_call, "ModelStreamInfer");
      std::vector<serve::Prompt> prompts{{req.prompt, true, req.prompt_ids}};
      auto options = req.options;
      auto model = req.model;
      auto job = std::make_shared<InferJob>(std::move(req), version, id, in.raw, stream_call, out);
      // The answers echo the client's id (empty too); the engine's own is unique.
      auto g = std::make_shared<Generation>(model, serve::random_id("grpc-"), std::move(prompts),
                                            std::move(options), job);
      if (!out->attach(g)) return out->end(grpc::Status::CANCELLED, id);
      ctx.core().start(g);
    } catch (...) {
      out->end(current_status(), id);
    }
  });
}

}  // namespace

// ------------------------------------------------------------ GrpcServer

struct GrpcServer::Impl {
  Impl(const serve::FrontendContext& ctx, GrpcOptions o)
      : options(std::move(o)), service(ctx, options.version) {}
  GrpcOptions options;
  Service service;
  std::unique_ptr<grpc::Server> server;
  int port = 0;
};

GrpcServer::GrpcServer(const serve::FrontendContext& ctx, GrpcOptions options)
    : impl_(std::make_unique<Impl>(ctx, std::move(options))) {}

GrpcServer::~GrpcServer() {
  if (impl_->server) stop(std::chrono::system_clock::now());
}

void GrpcServer::start() {
  const auto& o = impl_->options;
  const std::string host = o.host.find(':') != std::string::npos ? "[" + o.host + "]" : o.host;
  const std::string address = fmt::format("{}:{}", host, o.port);
  grpc::ServerBuilder builder;
  builder.AddListeningPort(address, grpc::InsecureServerCredentials(), &impl_->port);
  builder.RegisterService(&impl_->service);
  builder.SetMaxReceiveMessageSize(o.max_message_bytes);
  builder.SetMaxSendMessageSize(o.max_message_bytes);
  impl_->server = builder.BuildAndStart();
  if (!impl_->server || impl_->port == 0)
    throw Error(fmt::format("gRPC: cannot listen on {} (--grpc-port; in use?)", address));
  spdlog::info("gRPC (KServe v2 / Triton) listening on {}:{}", host, impl_->port);
}

int GrpcServer::port() const { return impl_->port; }

void GrpcServer::stop(std::chrono::system_clock::time_point deadline) {
  if (!impl_->server) return;
  impl_->server->Shutdown(deadline);
  impl_->server->Wait();
  impl_->server.reset();
}

}  // namespace halo::grpc_frontend
