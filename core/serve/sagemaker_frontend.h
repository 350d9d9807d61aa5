#pragma once
// The SageMaker / DJL LMI container contract, a codec over the ServingCore:
// POST /invocations with {"inputs", "parameters", "stream"};
// `stream: true` answers application/jsonlines, one
// {"token": {"id", "text", "log_prob"}} per line, the last line also
// carrying "generated_text" and "details"; a failure mid-stream is a token
// with id -1 and details.finish_reason "error". GET /ping is the
// OpenAI frontend's health. The model: header X-Amzn-SageMaker-Target-Model or
// the body's "model", else the first one.
#include <memory>
#include <string>

#include "serve/http_server.h"

namespace halo::serve {

class FrontendContext;

class SageMakerFrontend {
 public:
  explicit SageMakerFrontend(const FrontendContext& ctx) : ctx_(ctx) {}
  static bool owns(const std::string& path) { return path == "/invocations"; }
  void handle(HttpRequest&& request, const std::shared_ptr<Responder>& responder);

 private:
  void invocations(const HttpRequest& req, const std::shared_ptr<Responder>& res);
  const FrontendContext& ctx_;
};

}  // namespace halo::serve
