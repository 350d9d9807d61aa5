#pragma once
// What the HTTP frontends (OpenAI/vLLM, KServe v2, SageMaker) share over one
// ServingCore: bearer authentication, request JSON within the limits,
// preprocessing on the pool with failures answered in the frontend's error
// shape, and generations whose client may disconnect (HttpSink).
//
// Threads: FrontendContext's methods may be called from any thread. An
// HttpSink's calls come from the Generation (serving/generation.h rules).
#include <functional>
#include <memory>
#include <string>

#include "serve/api_common.h"
#include "serve/generation.h"
#include "serve/http_server.h"
#include "serve/serving_core.h"

namespace halo::serve {

// A generation answered over HTTP: as one response at the end, or streamed
// (`stream`; on_start writes the head). A cancelled generation (the client
// left) answers nothing.
class HttpSink : public GenerationSink {
 public:
  std::shared_ptr<Responder> res;
  bool stream = false;

  void on_batch_end(Generation&) override;  // writes what on_output/on_error buffered in `out`
  void on_finish(Generation& g) final;

 protected:
  // The end of a generation that was not cancelled: the stream's last bytes
  // (into `out`), or the whole response, or (g.failed()) the failure.
  virtual void finish(Generation& g) = 0;
  // The frontend's error shape, for a failure and for finish() throwing.
  virtual HttpResponse error_response(int status, const std::string& message) = 0;

  std::string out;  // streamed bytes not yet written
};

class FrontendContext {
 public:
  FrontendContext(ServingCore& core, std::string api_key)
      : core_(core), api_key_(std::move(api_key)) {}
  ServingCore& core() const { return core_; }
  bool has_api_key() const { return !api_key_.empty(); }

  // 401 unless `Authorization: Bearer <api key>` (or, `x_api_key`, Anthropic's
  // `x-api-key: <api key>`); no key: every request passes.
  void check_auth(const HttpRequest& req, bool x_api_key = false) const;
  // The same for an `authorization` header value given alone (gRPC metadata).
  void check_bearer(const std::string& authorization) const;
  // The body as a JSON object within the request limits (400 otherwise).
  json parse_request(const HttpRequest& req) const;
  // Runs `work` on the core's pool unless the client has gone by then; what
  // it throws is answered in `format`. 429 (thrown here) when the pool is full.
  void preprocess(const std::shared_ptr<Responder>& res, ErrorFormat format, std::function<void()> work,
                  ServingCore::Lane lane = ServingCore::Lane::kRequest) const;
  // core().start(g) for a generation whose sink is an HttpSink on `res`;
  // the client leaving cancels it.
  void start(const std::shared_ptr<Generation>& g, const std::shared_ptr<Responder>& res) const;

 private:
  ServingCore& core_;
  std::string api_key_;
};

}  // namespace halo::serve
