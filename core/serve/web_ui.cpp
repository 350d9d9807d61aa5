#include "serve/web_ui.h"

#include <fmt/format.h>

#include <algorithm>
#include <fstream>
#include <iterator>

namespace halo::serve {
namespace {

constexpr std::string_view kPrefix = "/ui/";

std::string content_type(std::string_view name) {
  auto ends = [&](std::string_view ext) { return name.ends_with(ext); };
  if (ends(".html")) return "text/html; charset=utf-8";
  if (ends(".js") || ends(".mjs")) return "text/javascript; charset=utf-8";
  if (ends(".css")) return "text/css; charset=utf-8";
  if (ends(".svg")) return "image/svg+xml";
  if (ends(".png")) return "image/png";
  if (ends(".json")) return "application/json";
  return "application/octet-stream";
}

// One path segment of letters, digits, '.', '-' and '_', not starting with a
// dot: nothing can climb out of ui/ or name a hidden file.
bool plain_name(std::string_view name) {
  return !name.empty() && name.front() != '.' && std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' ||
           c == '-' || c == '_';
  });
}

HttpResponse text_response(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.content_type = "text/plain; charset=utf-8";
  r.body = std::move(body);
  return r;
}

}  // namespace

WebUi::WebUi(std::filesystem::path dir) : dir_(std::move(dir)) {}

bool WebUi::owns(std::string_view path) { return path == "/" || path.starts_with(kPrefix); }

void WebUi::handle(const HttpRequest& req, const std::shared_ptr<Responder>& res) const {
  res->send(answer(req));
}

HttpResponse WebUi::answer(const HttpRequest& req) const {
  if (req.method != "GET") {
    HttpResponse r = text_response(
        405, fmt::format("method {} is not allowed on {}; use GET\n", req.method, req.path));
    r.headers.push_back({"Allow", "GET"});
    return r;
  }
  const std::string_view name = req.path == "/" ? std::string_view("index.html")
                                                : std::string_view(req.path).substr(kPrefix.size());
  std::optional<std::string> body = plain_name(name) ? read(name) : std::nullopt;
  if (!body) return text_response(404, fmt::format("Not Found: {}\n", req.path));
  HttpResponse r;
  r.content_type = content_type(name);
  r.body = std::move(*body);
  // The page may only load its own files and talk to this server: an API key
  // typed into it cannot leave for anywhere else.
  r.headers.push_back(
      {"Content-Security-Policy",
       "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
       "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"});
  r.headers.push_back({"X-Content-Type-Options", "nosniff"});
  r.headers.push_back({"Referrer-Policy", "no-referrer"});
  r.headers.push_back({"Cache-Control", "no-cache"});
  return r;
}

std::optional<std::string> WebUi::read(std::string_view name) const {
  if (dir_.empty()) {
    for (const WebAsset& a : embedded_web_assets())
      if (a.name == name) return std::string(a.bytes);
    return std::nullopt;
  }
  std::ifstream in(dir_ / std::string(name), std::ios::binary);
  if (!in) return std::nullopt;
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

}  // namespace halo::serve
