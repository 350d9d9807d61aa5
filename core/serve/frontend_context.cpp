#include "serve/frontend_context.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <utility>

namespace halo::serve {

namespace {

// Compares without an early exit, so the time taken does not reveal how much matched.
bool constant_time_equal(const std::string& a, const std::string& b) {
  size_t n = std::max(a.size(), b.size());
  unsigned diff = static_cast<unsigned>(a.size() ^ b.size());
  for (size_t i = 0; i < n; ++i) {
    unsigned char x = i < a.size() ? static_cast<unsigned char>(a[i]) : 0;
    unsigned char y = i < b.size() ? static_cast<unsigned char>(b[i]) : 0;
    diff |= static_cast<unsigned>(x ^ y);
  }
  return diff == 0;
}

}  // namespace

void HttpSink::on_batch_end(Generation&) {
  if (!out.empty()) res->write(std::exchange(out, {}));
}

void HttpSink::on_finish(Generation& g) {
  if (g.cancelled()) return;
  try {
    finish(g);
    if (stream) {
      if (!out.empty()) res->write(std::exchange(out, {}));
      res->end_stream();
    }
  } catch (const std::exception& e) {
    spdlog::error("{}: building the response failed: {}", g.id(), e.what());
    if (stream)
      res->end_stream();
    else
      res->send(error_response(500, std::string("building the response failed: ") + e.what()));
  }
}

void FrontendContext::check_bearer(const std::string& authorization) const {
  HttpRequest req;
  if (!authorization.empty()) req.headers.push_back({"authorization", authorization});
  check_auth(req);
}

void FrontendContext::check_auth(const HttpRequest& req, bool x_api_key) const {
  if (api_key_.empty()) return;
  const std::string& h = req.header("authorization");
  std::string token;
  if (h.size() > 7 && (h.compare(0, 7, "Bearer ") == 0 || h.compare(0, 7, "bearer ") == 0))
    token = h.substr(7);
  if (constant_time_equal(token, api_key_)) return;
  const std::string& x = x_api_key ? req.header("x-api-key") : h;
  if (x_api_key && !x.empty() && constant_time_equal(x, api_key_)) return;
  ApiError e(401, h.empty() && x.empty()
                      ? (x_api_key ? "missing API key: send 'x-api-key: <key>' or 'Authorization: Bearer <key>'"
                                   : "missing API key: send 'Authorization: Bearer <key>'")
                      : "invalid API key");
  e.headers.push_back({"WWW-Authenticate", "Bearer"});
  throw e;
}

json FrontendContext::parse_request(const HttpRequest& req) const {
  return parse_json_object(req.body, core_.limits().max_json_depth);
}

void FrontendContext::preprocess(const std::shared_ptr<Responder>& res, ErrorFormat format,
                                 std::function<void()> work, ServingCore::Lane lane) const {
  core_.preprocess([res, format, work = std::move(work)] {
    if (res->disconnected()) return;  // the client left while the request waited: nothing to do
    try {
      work();
    } catch (...) {
      HttpResponse r = error_http_response(std::current_exception(), format);
      spdlog::debug("preprocessing -> {} {}", r.status, r.body);
      res->send(std::move(r));
    }
  }, lane);
}

void FrontendContext::start(const std::shared_ptr<Generation>& g,
                            const std::shared_ptr<Responder>& res) const {
  core_.start(g);
  std::weak_ptr<Generation> weak = g;
  res->on_disconnect([weak] {
    if (auto live = weak.lock()) live->cancel();
  });
}

}  // namespace halo::serve
