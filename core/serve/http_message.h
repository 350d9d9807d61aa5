// The Beast-facing half of the HTTP server, shared with the HTTP fuzzer
// (fuzz/http_request_fuzzer.cpp) so that it checks the code that ships: the
// parser's limits, the framing check every request head passes before its
// body is read, and the conversion of a parsed Beast request into halo's
// HttpRequest. Internal to halo_serve (include it from http_server.cpp and
// the fuzzer only). Pure functions, safe on any thread.
#pragma once

#include <boost/beast/http/message.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>
#include <cstdint>
#include <string>

#include "serve/http_server.h"

namespace halo::serve::http_detail {

using BeastRequest = boost::beast::http::request<boost::beast::http::string_body>;
using RequestParser = boost::beast::http::request_parser<boost::beast::http::string_body>;

// Largest request head (request line and headers) the server reads.
inline constexpr uint32_t kHeaderLimit = 64 * 1024;

// Puts the server's limits on a fresh parser for one request.
void set_limits(RequestParser& parser, uint64_t max_body_bytes);

// Why the head's body framing is refused (RFC 9112 section 6.1), or "".
std::string framing_error(const boost::beast::http::request_header<>& head);

// The parsed request as the handlers see it (header names lower-cased).
HttpRequest to_http_request(BeastRequest&& msg, std::string remote);

}  // namespace halo::serve::http_detail
