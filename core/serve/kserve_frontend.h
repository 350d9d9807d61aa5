#pragma once
// KServe v2 / Triton HTTP with the generate extension, a codec over the
// ServingCore (same models, admission and stream pump as the other frontends):
//   GET  /v2, /v2/health/live, /v2/health/ready
//   GET  /v2/models/{name}[/versions/{v}], .../ready, .../config
//   POST /v2/models/{name}[/versions/{v}]/generate, .../generate_stream (SSE)
//   POST /v2/repository/index
// Errors are Triton's {"error": "message"}.
#include <memory>
#include <string>

#include "serve/http_server.h"

namespace halo::serve {

class FrontendContext;

class KServeFrontend {
 public:
  explicit KServeFrontend(const FrontendContext& ctx, std::string version = "0.0.0")
      : ctx_(ctx), version_(std::move(version)) {}
  static bool owns(const std::string& path) { return path == "/v2" || path.starts_with("/v2/"); }
  void handle(HttpRequest&& request, const std::shared_ptr<Responder>& responder);

 private:
  HttpResponse route(HttpRequest& req, const std::shared_ptr<Responder>& res, bool& deferred);
  void generate(const HttpRequest& req, const std::string& model, const std::string& version, bool stream_route,
                const std::shared_ptr<Responder>& res);

  const FrontendContext& ctx_;
  std::string version_;
};

}  // namespace halo::serve
