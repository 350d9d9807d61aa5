#include "serve/http_message.h"

#include <fmt/format.h>

#include <boost/beast/core/string.hpp>
#include <boost/beast/http/field.hpp>
#include <cctype>

namespace halo::serve::http_detail {

namespace beast = boost::beast;
namespace http = beast::http;

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

}  // namespace

void set_limits(RequestParser& parser, uint64_t max_body_bytes) {
  parser.body_limit(max_body_bytes);
  parser.header_limit(kHeaderLimit);
}

// Beast takes a Transfer-Encoding whose last coding is not chunked as "no
// body" (the body's bytes would then be parsed as the next request), decodes
// only the chunked part of e.g. "gzip, chunked", and lets Content-Length
// follow such a Transfer-Encoding. A proxy in front may frame the same bytes
// differently, so RFC 9112 section 6.1 applies strictly: exactly `chunked`,
// never with Content-Length.
std::string framing_error(const http::request_header<>& head) {
  std::string codings;
  size_t count = 0;
  for (const auto& f : head) {
    if (f.name() != http::field::transfer_encoding) continue;
    codings += (count++ ? ", " : "") + std::string(f.value());
  }
  if (count == 0) return {};
  // RFC 9112 section 6.1: HTTP/1.0 has no transfer codings; such framing is faulty.
  if (head.version() < 11) return "Transfer-Encoding is not allowed in an HTTP/1.0 request";
  if (count > 1 || !beast::iequals(trim(codings), "chunked"))
    return fmt::format("Transfer-Encoding '{}' is not supported: halo decodes only 'chunked'",
                       codings);
  if (head.find(http::field::content_length) != head.end())
    return "a request must not carry both Transfer-Encoding and Content-Length";
  return {};
}

HttpRequest to_http_request(BeastRequest&& msg, std::string remote) {
  HttpRequest req;
  req.method = std::string(msg.method_string());
  req.target = std::string(msg.target());
  req.path = req.target.substr(0, req.target.find('?'));
  for (const auto& f : msg)
    req.headers.emplace_back(lower(f.name_string()), std::string(f.value()));
  req.body = std::move(msg.body());
  req.keep_alive = msg.keep_alive();
  req.remote = std::move(remote);
  return req;
}

}  // namespace halo::serve::http_detail
