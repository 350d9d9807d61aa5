#pragma once
// A small asynchronous HTTP/1.1 server on Boost.Beast + Asio: a fixed pool of
// I/O threads, one strand per connection, keep-alive, a request body limit
// (413), `Expect: 100-continue`, framing checked against request smuggling
// (Transfer-Encoding other than `chunked`, or with Content-Length: 400 and
// close, RFC 9112 section 6.1), and responses that are either complete or
// streamed (chunked transfer encoding, e.g. server-sent events).
//
// The handler sees plain structs (no Beast types): it answers at once through
// the Responder, or keeps the Responder and answers later from any thread.
// While a deferred response is pending the connection is watched, so a
// client that goes away is noticed at once (Responder::on_disconnect).
//
// Only http_server.cpp instantiates Beast/Asio templates.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

namespace halo::serve {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string target;  // path and query as sent
  std::string path;    // target without the query
  std::vector<std::pair<std::string, std::string>> headers;  // names lower-cased
  std::string body;
  bool keep_alive = true;
  std::string remote;  // peer address, for logs

  // First header of that (lower-case) name, or "".
  const std::string& header(const std::string& lower_name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;  // extra headers
};

class Session;

// How a handler answers one request. Thread-safe; every call after the
// connection closed is a no-op. Exactly one of send() or
// begin_stream()..end_stream() per request.
class Responder {
 public:
  explicit Responder(std::weak_ptr<Session> session, uint64_t request_seq);
  void send(HttpResponse response);
  void begin_stream(int status, std::string content_type,
                    std::vector<std::pair<std::string, std::string>> headers = {});
  void write(std::string data);  // one chunk of a stream
  void end_stream();
  // Called once when the client goes away before the response finished: on
  // the connection's strand, or at once on the caller's thread when it has
  // already gone. May be set from any thread (e.g. after preprocessing).
  void on_disconnect(std::function<void()> callback);
  bool disconnected() const { return disconnected_.load(); }

 private:
  friend class Session;
  void mark_disconnected();  // runs the callback, if any, once
  std::weak_ptr<Session> session_;
  uint64_t seq_;
  std::atomic<bool> disconnected_{false};
  std::mutex mu_;  // guards on_disconnect_ against the strand's mark_disconnected
  std::function<void()> on_disconnect_;
};

using Handler = std::function<void(HttpRequest&& request, const std::shared_ptr<Responder>& responder)>;

struct HttpServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0: any free port (see HttpServer::port())
  int io_threads = 2;
  uint64_t max_body_bytes = 16u << 20;
  std::chrono::seconds idle_timeout{60};    // keep-alive connection with no request
  std::chrono::seconds write_timeout{60};   // one write that makes no progress
};

class HttpServer {
 public:
  HttpServer(HttpServerOptions options, Handler handler);
  ~HttpServer();  // stop()
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds and listens; throws halo::Error naming the address on failure.
  void start();
  int port() const;  // the bound port
  // Closes the listening socket; connections stay open, and the responses
  // they send from now on say `Connection: close`.
  void stop_accepting();
  bool draining() const;
  // Stops the I/O threads and closes every connection.
  void stop();
  size_t open_connections() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace halo::serve
