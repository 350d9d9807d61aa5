// The HTTP/1.1 request head and body (chunked or Content-Length) as
// core/serve/http_server.cpp reads them, through the same code
// (serve/http_message.h): a Beast request_parser<string_body> with the
// server's limits, fed the bytes in pieces the way async_read_header +
// async_read do; the head's framing check (a refused head ends the
// connection, as the server answers 400 and closes); then the request turned
// into halo's HttpRequest. Several requests may follow each other on one
// connection (keep-alive): the leftover bytes are parsed as the next one.
//
// The first input byte picks the read size (1..256 bytes per read) and
// whether the body limit is small (1 KiB, as serve_unit_test) or the
// server's default (16 MiB).
#include <algorithm>
#include <cstring>
#include <optional>

#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/http.hpp>

#include "fuzz_util.h"
#include "serve/http_message.h"

namespace beast = boost::beast;
namespace http = beast::http;
namespace detail = halo::serve::http_detail;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const size_t step = 1 + (data[0] & 0x7f) * 2;
  const uint64_t body_limit = (data[0] & 0x80) ? (16u << 20) : 1024;
  std::string_view wire(reinterpret_cast<const char*>(data + 1), size - 1);

  beast::flat_buffer buffer;
  size_t pos = 0;
  auto read_more = [&]() -> bool {  // one "socket read" into the buffer
    if (pos >= wire.size()) return false;
    size_t n = std::min(step, wire.size() - pos);
    auto mb = buffer.prepare(n);
    std::memcpy(mb.data(), wire.data() + pos, n);
    buffer.commit(n);
    pos += n;
    return true;
  };

  for (int requests = 0; requests < 16; ++requests) {
    std::optional<detail::RequestParser> parser;
    parser.emplace();
    detail::set_limits(*parser, body_limit);
    beast::error_code ec;
    // async_read_header, then async_read: put() what is buffered, read more
    // when the parser needs it, put_eof() at the end of the stream.
    bool header_phase = true;
    while (!ec) {
      if (header_phase ? parser->is_header_done() : parser->is_done()) {
        if (header_phase) {
          header_phase = false;
          const auto& req = parser->get();
          if (!detail::framing_error(req).empty()) return 0;  // 400, connection closed
          (void)beast::iequals(req[http::field::expect], "100-continue");
          continue;
        }
        break;
      }
      if (buffer.size() > 0) {
        size_t used = parser->put(buffer.data(), ec);
        buffer.consume(used);
        if (ec == http::error::need_more || (!ec && used == 0)) {
          ec = {};
          if (!read_more()) {
            parser->put_eof(ec);
            if (!ec && !parser->is_done()) ec = http::error::partial_message;
          }
        }
        continue;
      }
      if (!read_more()) {
        if (parser->got_some()) {
          parser->put_eof(ec);
          if (!ec && !parser->is_done()) ec = http::error::partial_message;
        } else {
          ec = http::error::end_of_stream;
        }
      }
    }
    if (ec) break;  // the server answers 400/413/431 or closes
    auto msg = parser->release();
    const auto req = detail::to_http_request(std::move(msg), "fuzz");
    if (req.body.size() > body_limit) std::abort();  // the limit must hold
    if (!req.keep_alive) break;
  }
  return 0;
}
