#include "serve/http_server.h"

#include <optional>
#include <thread>

#include <boost/asio/dispatch.hpp>
#include <boost/asio/executor_work_guard.hpp>
#include <boost/asio/io_context.hpp>
#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/core/bind_handler.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/status.hpp>
#include <boost/beast/http/string_body.hpp>
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "common/error.h"
#include "serve/http_message.h"

namespace halo::serve {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

const std::string& HttpRequest::header(const std::string& lower_name) const {
  static const std::string empty;
  for (const auto& [k, v] : headers)
    if (k == lower_name) return v;
  return empty;
}

namespace {

// What every connection shares with the server.
struct ServerState {
  HttpServerOptions opts;
  Handler handler;
  std::atomic<bool> draining{false};
  std::atomic<size_t> connections{0};
};

std::string status_line(int status) {
  auto reason = http::obsolete_reason(http::int_to_status(static_cast<unsigned>(status)));
  return fmt::format("HTTP/1.1 {} {}\r\n", status, std::string_view(reason.data(), reason.size()));
}

std::string error_json(const std::string& type, const std::string& message) {
  // Same shape as the API layer's errors (OpenAI's: `code` a string or null);
  // written here for failures before a handler runs.
  std::string escaped;
  for (char c : message) {
    if (static_cast<unsigned char>(c) < 0x20) {  // the message may quote a header the client sent
      escaped += fmt::format("\\u{:04x}", static_cast<int>(c));
      continue;
    }
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  return fmt::format(R"({{"error":{{"message":"{}","type":"{}","param":null,"code":null}}}})", escaped, type);
}

}  // namespace

// One TCP connection. Everything runs on the connection's strand.
class Session : public std::enable_shared_from_this<Session> {
 public:
  Session(tcp::socket&& socket, std::shared_ptr<ServerState> server)
      : stream_(std::move(socket)), server_(std::move(server)) {
    server_->connections++;
    beast::error_code ec;
    auto ep = stream_.socket().remote_endpoint(ec);
    if (!ec) remote_ = fmt::format("{}:{}", ep.address().to_string(), ep.port());
    stream_.socket().set_option(tcp::no_delay(true), ec);
  }
  ~Session() { server_->connections--; }

  void run() {
    asio::dispatch(stream_.get_executor(), beast::bind_front_handler(&Session::read_header, shared_from_this()));
  }

  // ---- called through Responder (any thread) ----
  template <class F>
  void on_strand(F&& f) {
    asio::dispatch(stream_.get_executor(), [self = shared_from_this(), f = std::forward<F>(f)]() mutable { f(*self); });
  }

  void deliver_send(uint64_t seq, HttpResponse r) {
    if (closed_ || seq != seq_ || started_) return;
    started_ = true;
    response_done_ = true;
    keep_alive_ = keep_alive_ && !server_->draining;
    std::string out = status_line(r.status);
    out += fmt::format("Content-Type: {}\r\nContent-Length: {}\r\nConnection: {}\r\n", r.content_type, r.body.size(),
                       keep_alive_ ? "keep-alive" : "close");
    for (const auto& [k, v] : r.headers) out += fmt::format("{}: {}\r\n", k, v);
    out += "\r\n";
    out += r.body;
    pending_out_ += out;
    flush();
  }

  void deliver_begin(uint64_t seq, int status, const std::string& content_type,
                     const std::vector<std::pair<std::string, std::string>>& headers) {
    if (closed_ || seq != seq_ || started_) return;
    started_ = true;
    streaming_ = true;
    chunked_ = http11_;
    if (!chunked_) keep_alive_ = false;  // HTTP/1.0: the end of the body is the end of the connection
    keep_alive_ = keep_alive_ && !server_->draining;
    std::string out = status_line(status);
    out += fmt::format("Content-Type: {}\r\nCache-Control: no-cache\r\nConnection: {}\r\n", content_type,
                       keep_alive_ ? "keep-alive" : "close");
    if (chunked_) out += "Transfer-Encoding: chunked\r\n";
    for (const auto& [k, v] : headers) out += fmt::format("{}: {}\r\n", k, v);
    out += "\r\n";
    pending_out_ += out;
    flush();
  }

  void deliver_write(uint64_t seq, const std::string& data) {
    if (closed_ || seq != seq_ || !streaming_ || response_done_ || data.empty()) return;
    if (chunked_) {
      pending_out_ += fmt::format("{:x}\r\n", data.size());
      pending_out_ += data;
      pending_out_ += "\r\n";
    } else {
      pending_out_ += data;
    }
    flush();
  }

  void deliver_end(uint64_t seq) {
    if (closed_ || seq != seq_ || !streaming_ || response_done_) return;
    response_done_ = true;
    if (chunked_) pending_out_ += "0\r\n\r\n";
    flush();
  }

 private:
  enum class Phase { kReading, kHandling };

  void read_header() {
    if (closed_) return;
    phase_ = Phase::kReading;
    parser_.emplace();
    http_detail::set_limits(*parser_, server_->opts.max_body_bytes);
    stream_.expires_after(server_->opts.idle_timeout);
    http::async_read_header(stream_, buffer_, *parser_,
                            beast::bind_front_handler(&Session::on_header, shared_from_this()));
  }

  void on_header(beast::error_code ec, std::size_t) {
    if (ec) return on_read_error(ec);
    const auto& req = parser_->get();
    if (std::string why = http_detail::framing_error(req); !why.empty()) {
      spdlog::debug("{}: {}: 400", remote_, why);
      return send_and_close(400, "BadRequestError", why);
    }
    auto expect = req[http::field::expect];
    if (beast::iequals(expect, "100-continue")) {
      pending_out_ += "HTTP/1.1 100 Continue\r\n\r\n";
      flush();
    }
    http::async_read(stream_, buffer_, *parser_, beast::bind_front_handler(&Session::on_body, shared_from_this()));
  }

  void on_body(beast::error_code ec, std::size_t) {
    if (ec) return on_read_error(ec);
    auto msg = parser_->release();
    parser_.reset();
    http11_ = msg.version() >= 11;
    handle(http_detail::to_http_request(std::move(msg), remote_));
  }

  void on_read_error(beast::error_code ec) {
    if (ec == http::error::body_limit) {
      spdlog::debug("{}: request body over {} bytes: 413", remote_, server_->opts.max_body_bytes);
      return send_and_close(413, "RequestEntityTooLargeError",
                            fmt::format("the request body is larger than the limit of {} bytes (--max-request-body-bytes)",
                                        server_->opts.max_body_bytes));
    }
    if (ec == http::error::header_limit)
      return send_and_close(431, "BadRequestError", "the request headers are too large");
    if (ec == http::error::end_of_stream || ec == asio::error::eof || ec == asio::error::operation_aborted ||
        ec == beast::error::timeout || ec == asio::error::connection_reset || ec == http::error::partial_message) {
      return close();
    }
    spdlog::debug("{}: malformed HTTP request: {}", remote_, ec.message());
    send_and_close(400, "BadRequestError", "malformed HTTP request: " + ec.message());
  }

  void send_and_close(int status, const std::string& type, const std::string& message) {
    seq_++;
    started_ = false;
    response_done_ = false;
    streaming_ = false;
    keep_alive_ = false;
    phase_ = Phase::kHandling;
    HttpResponse r;
    r.status = status;
    r.body = error_json(type, message);
    deliver_send(seq_, std::move(r));
  }

  void handle(HttpRequest&& req) {
    phase_ = Phase::kHandling;
    seq_++;
    started_ = false;
    response_done_ = false;
    streaming_ = false;
    keep_alive_ = req.keep_alive;
    stream_.expires_never();
    responder_ = std::make_shared<Responder>(weak_from_this(), seq_);
    try {
      server_->handler(std::move(req), responder_);
    } catch (const std::exception& e) {
      spdlog::error("{}: handler failed: {}", remote_, e.what());
      if (!started_) {
        HttpResponse r;
        r.status = 500;
        r.body = error_json("InternalServerError", e.what());
        deliver_send(seq_, std::move(r));
      }
    }
    if (!response_done_ && !closed_) watch();
  }

  // While a response is pending, read from the socket so that a client that
  // goes away is noticed at once. Bytes that arrive (a pipelined request) are
  // kept for the next parse.
  void watch() {
    if (watching_ || closed_ || buffer_.size() >= 64 * 1024) return;
    watching_ = true;
    stream_.socket().async_read_some(buffer_.prepare(4096),
                                     beast::bind_front_handler(&Session::on_watch, shared_from_this()));
  }

  void on_watch(beast::error_code ec, std::size_t n) {
    watching_ = false;
    if (!ec) {
      buffer_.commit(n);
      if (phase_ == Phase::kHandling) return watch();
    }
    if (resume_after_watch_) {
      resume_after_watch_ = false;
      if (!ec || ec == asio::error::operation_aborted) return read_header();
      return close();
    }
    if (ec == asio::error::operation_aborted) return;
    if (phase_ == Phase::kHandling) {
      spdlog::debug("{}: client went away before the response finished ({})", remote_, ec.message());
      close();
    }
  }

  void flush() {
    if (writing_ || closed_) return;
    if (pending_out_.empty()) return;
    writing_buf_ = std::move(pending_out_);
    pending_out_.clear();
    writing_ = true;
    stream_.expires_after(server_->opts.write_timeout);
    asio::async_write(stream_, asio::buffer(writing_buf_),
                      beast::bind_front_handler(&Session::on_write, shared_from_this()));
  }

  void on_write(beast::error_code ec, std::size_t) {
    writing_ = false;
    if (ec) {
      spdlog::debug("{}: write failed: {}", remote_, ec.message());
      return close();
    }
    if (!pending_out_.empty()) return flush();
    if (phase_ != Phase::kHandling) return;  // e.g. "100 Continue" while the body is read
    stream_.expires_never();
    if (response_done_) after_response();
  }

  void after_response() {
    responder_.reset();
    if (!keep_alive_) return linger_close();
    phase_ = Phase::kReading;
    if (watching_) {
      resume_after_watch_ = true;
      beast::error_code ec;
      stream_.socket().cancel(ec);
      return;
    }
    read_header();
  }

  // Closing a socket with unread input makes the kernel send RST, which can
  // destroy the response before the client reads it (e.g. a 413 sent before
  // the body was read). So: half-close, discard what still comes (bounded in
  // bytes and time), then close.
  void linger_close() {
    if (closed_) return;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
    if (ec) return close();
    linger_left_ = 8u << 20;
    stream_.expires_after(std::chrono::seconds(2));
    linger_read();
  }

  void linger_read() {
    discard_.resize(16384);
    stream_.async_read_some(asio::buffer(discard_), [self = shared_from_this()](beast::error_code ec, std::size_t n) {
      if (ec || n >= self->linger_left_) return self->close();
      self->linger_left_ -= n;
      self->linger_read();
    });
  }

  void close() {
    if (closed_) return;
    closed_ = true;
    beast::error_code ec;
    stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
    stream_.socket().close(ec);
    if (responder_ && !response_done_) responder_->mark_disconnected();
    responder_.reset();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http_detail::RequestParser> parser_;
  std::shared_ptr<ServerState> server_;
  std::string remote_ = "?";
  Phase phase_ = Phase::kReading;
  uint64_t seq_ = 0;
  std::shared_ptr<Responder> responder_;
  bool started_ = false, response_done_ = false, streaming_ = false, chunked_ = false;
  bool keep_alive_ = true, http11_ = true;
  std::string pending_out_, writing_buf_;
  bool writing_ = false, watching_ = false, resume_after_watch_ = false, closed_ = false;
  std::string discard_;
  size_t linger_left_ = 0;
};

// ------------------------------------------------------------ Responder

Responder::Responder(std::weak_ptr<Session> session, uint64_t request_seq)
    : session_(std::move(session)), seq_(request_seq) {}

void Responder::send(HttpResponse response) {
  if (auto s = session_.lock())
    s->on_strand([seq = seq_, r = std::move(response)](Session& ss) mutable { ss.deliver_send(seq, std::move(r)); });
}

void Responder::begin_stream(int status, std::string content_type,
                             std::vector<std::pair<std::string, std::string>> headers) {
  if (auto s = session_.lock())
    s->on_strand([seq = seq_, status, ct = std::move(content_type), h = std::move(headers)](Session& ss) {
      ss.deliver_begin(seq, status, ct, h);
    });
}

void Responder::write(std::string data) {
  if (disconnected_) return;
  if (auto s = session_.lock())
    s->on_strand([seq = seq_, d = std::move(data)](Session& ss) { ss.deliver_write(seq, d); });
}

void Responder::end_stream() {
  if (auto s = session_.lock()) s->on_strand([seq = seq_](Session& ss) { ss.deliver_end(seq); });
}

void Responder::on_disconnect(std::function<void()> callback) {
  {
    std::lock_guard lk(mu_);
    if (!disconnected_) {
      on_disconnect_ = std::move(callback);
      return;
    }
  }
  callback();  // gone while the request was being prepared
}

void Responder::mark_disconnected() {
  std::function<void()> cb;
  {
    std::lock_guard lk(mu_);
    disconnected_ = true;
    cb = std::move(on_disconnect_);
    on_disconnect_ = nullptr;
  }
  if (!cb) return;
  try {
    cb();
  } catch (const std::exception& e) {
    spdlog::error("disconnect callback failed: {}", e.what());
  }
}

// ------------------------------------------------------------ HttpServer

struct HttpServer::Impl {
  std::shared_ptr<ServerState> state = std::make_shared<ServerState>();
  asio::io_context ioc;
  std::optional<asio::executor_work_guard<asio::io_context::executor_type>> work;
  tcp::acceptor acceptor{asio::make_strand(ioc)};
  asio::steady_timer retry{acceptor.get_executor()};
  std::vector<std::thread> threads;
  std::atomic<bool> stopped{false};
  int port = 0;

  void do_accept() {
    acceptor.async_accept(asio::make_strand(ioc), [this](beast::error_code ec, tcp::socket socket) {
      if (ec == asio::error::operation_aborted || !acceptor.is_open()) return;
      if (ec) {
        // Out of descriptors and the like: wait a little instead of spinning.
        spdlog::warn("accept failed: {}", ec.message());
        retry.expires_after(std::chrono::milliseconds(50));
        retry.async_wait([this](beast::error_code e) {
          if (!e && acceptor.is_open()) do_accept();
        });
        return;
      }
      std::make_shared<Session>(std::move(socket), state)->run();
      do_accept();
    });
  }
};

HttpServer::HttpServer(HttpServerOptions options, Handler handler) : impl_(std::make_unique<Impl>()) {
  impl_->state->opts = std::move(options);
  impl_->state->handler = std::move(handler);
}

HttpServer::~HttpServer() { stop(); }

void HttpServer::start() {
  auto& im = *impl_;
  const auto& o = im.state->opts;
  beast::error_code ec;
  tcp::resolver resolver(im.ioc);
  auto results = resolver.resolve(o.host, std::to_string(o.port), tcp::resolver::passive, ec);
  if (ec || results.empty())
    throw Error(fmt::format("cannot listen on {}:{}: cannot resolve the host: {}", o.host, o.port, ec.message()));
  tcp::endpoint ep = results.begin()->endpoint();
  auto fail = [&](const char* what) {
    throw Error(fmt::format("cannot listen on {}:{}: {} failed: {}", o.host, o.port, what, ec.message()));
  };
  im.acceptor.open(ep.protocol(), ec);
  if (ec) fail("open");
  im.acceptor.set_option(asio::socket_base::reuse_address(true), ec);
  im.acceptor.bind(ep, ec);
  if (ec) fail("bind");
  im.acceptor.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) fail("listen");
  im.port = im.acceptor.local_endpoint().port();
  im.do_accept();
  im.work.emplace(im.ioc.get_executor());
  int n = std::max(1, o.io_threads);
  for (int i = 0; i < n; ++i) im.threads.emplace_back([&im] { im.ioc.run(); });
}

int HttpServer::port() const { return impl_->port; }

void HttpServer::stop_accepting() {
  impl_->state->draining = true;
  asio::dispatch(impl_->acceptor.get_executor(), [im = impl_.get()] {
    beast::error_code ec;
    im->acceptor.close(ec);
    im->retry.cancel();
  });
}

bool HttpServer::draining() const { return impl_->state->draining; }

void HttpServer::stop() {
  if (!impl_ || impl_->stopped.exchange(true)) return;
  impl_->work.reset();
  impl_->ioc.stop();
  for (auto& t : impl_->threads)
    if (t.joinable()) t.join();
  impl_->threads.clear();
}

size_t HttpServer::open_connections() const { return impl_->state->connections; }

}  // namespace halo::serve
