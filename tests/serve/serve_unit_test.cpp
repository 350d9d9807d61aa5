// Unit tests of halo_serve without a model: the HTTP layer (keep-alive, body
// limit, chunked streaming from another thread, disconnect notice) over
// loopback with plain POSIX sockets, and the mapping of request fields onto
// the engine's RequestOptions.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "serve/api_common.h"
#include "serve/http_server.h"

namespace halo::serve {
namespace {

using namespace std::chrono_literals;

// A blocking loopback client with a receive timeout (tests stay bounded).
class Client {
 public:
  explicit Client(int port) {
    fd_ = ::socket(AF_INET, SOCK_STREAM, 0);
    timeval tv{5, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    connected_ = ::connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0;
  }
  ~Client() { close(); }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }
  bool connected() const { return connected_; }
  void send(const std::string& s) { ASSERT_EQ(::send(fd_, s.data(), s.size(), MSG_NOSIGNAL), ssize_t(s.size())); }
  // Reads until `needle` was seen, EOF or timeout; returns all read so far.
  std::string read_until(const std::string& needle) {
    char buf[4096];
    while (got_.find(needle) == std::string::npos) {
      ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n <= 0) {
        eof_ = n == 0;
        break;
      }
      got_.append(buf, size_t(n));
    }
    return got_;
  }
  bool eof() const { return eof_; }

 private:
  int fd_ = -1;
  bool connected_ = false;
  bool eof_ = false;
  std::string got_;
};

struct Fixture {
  std::atomic<int> disconnects{0};
  std::promise<std::shared_ptr<Responder>> deferred;
  std::unique_ptr<HttpServer> server;

  Fixture() {
    HttpServerOptions o;
    o.port = 0;
    o.max_body_bytes = 1024;
    server = std::make_unique<HttpServer>(o, [this](HttpRequest&& req, const std::shared_ptr<Responder>& res) {
      if (req.path == "/echo") {
        HttpResponse r;
        r.content_type = "text/plain";
        r.body = req.method + " " + req.body;
        res->send(std::move(r));
      } else if (req.path == "/defer") {
        res->on_disconnect([this] { disconnects++; });
        deferred.set_value(res);  // answered later from another thread
      } else if (req.path == "/throw") {
        throw std::runtime_error("boom");
      } else {
        HttpResponse r;
        r.status = 404;
        res->send(std::move(r));
      }
    });
    server->start();
  }
};

TEST(HttpServer, KeepAliveServesSeveralRequestsOnOneConnection) {
  Fixture f;
  Client c(f.server->port());
  ASSERT_TRUE(c.connected());
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\n\r\nabc");
  std::string a = c.read_until("POST abc");
  EXPECT_NE(a.find("HTTP/1.1 200 OK"), std::string::npos) << a;
  EXPECT_NE(a.find("Connection: keep-alive"), std::string::npos) << a;
  c.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string b = c.read_until("GET ");
  EXPECT_NE(b.find("GET "), std::string::npos) << b;
  c.send("GET /missing HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  std::string d = c.read_until("\r\n\r\n\r\n");  // until EOF
  EXPECT_NE(d.find("HTTP/1.1 404"), std::string::npos) << d;
  EXPECT_TRUE(c.eof());
}

TEST(HttpServer, BodyOverTheLimitIs413AndTheConnectionCloses) {
  Fixture f;
  Client c(f.server->port());
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\n\r\n" + std::string(5000, 'a'));
  std::string r = c.read_until("\r\n\r\n\r\n");
  EXPECT_EQ(r.rfind("HTTP/1.1 413", 0), 0u) << r;
  EXPECT_NE(r.find("\"code\":413"), std::string::npos) << r;
  EXPECT_TRUE(c.eof());
}

TEST(HttpServer, AHandlerExceptionIs500AndTheServerGoesOn) {
  Fixture f;
  Client c(f.server->port());
  c.send("GET /throw HTTP/1.1\r\nHost: x\r\n\r\n");
  std::string r = c.read_until("}}");
  EXPECT_EQ(r.rfind("HTTP/1.1 500", 0), 0u) << r;
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\nok");
  EXPECT_NE(c.read_until("POST ok").find("POST ok"), std::string::npos);
}

TEST(HttpServer, ChunkedStreamWrittenFromAnotherThread) {
  Fixture f;
  Client c(f.server->port());
  c.send("POST /defer HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  auto fut = f.deferred.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  auto res = fut.get();
  std::thread writer([res] {
    res->begin_stream(200, "text/event-stream");
    res->write("data: 1\n\n");
    res->write("data: [DONE]\n\n");
    res->end_stream();
  });
  writer.join();
  std::string r = c.read_until("0\r\n\r\n");
  EXPECT_NE(r.find("Transfer-Encoding: chunked"), std::string::npos) << r;
  EXPECT_NE(r.find("9\r\ndata: 1\n\n\r\n"), std::string::npos) << r;
  EXPECT_NE(r.find("e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"), std::string::npos) << r;
  EXPECT_EQ(f.disconnects.load(), 0);
  // The connection is still usable.
  c.send("GET /echo HTTP/1.1\r\nHost: x\r\n\r\n");
  EXPECT_NE(c.read_until("GET ").find("GET "), std::string::npos);
}

TEST(HttpServer, AClientThatGoesAwayIsNoticedAtOnce) {
  Fixture f;
  Client c(f.server->port());
  c.send("POST /defer HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  auto fut = f.deferred.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  auto res = fut.get();
  c.close();
  for (int i = 0; i < 200 && f.disconnects.load() == 0; ++i) std::this_thread::sleep_for(10ms);
  EXPECT_EQ(f.disconnects.load(), 1);
  EXPECT_TRUE(res->disconnected());
  res->write("ignored");  // no-op, no crash
  res->end_stream();
}

// ------------------------------------------------------------ request fields

SamplingRequest parse(const std::string& body, Endpoint ep = Endpoint::kCompletions) {
  json j = json::parse(body);
  Fields f(j);
  SamplingDefaults d;
  d.vocab_size = 100;
  d.generation.temperature = 0.7f;
  d.generation.top_p = 0.9f;
  return parse_sampling(f, ep, d);
}

TEST(ParseSampling, MapsEveryFieldOntoRequestOptions) {
  auto r = parse(R"({"temperature": 0.5, "top_p": 0.8, "top_k": -1, "min_p": 0.1, "repetition_penalty": 1.2,
                     "presence_penalty": 0.5, "frequency_penalty": -0.5, "seed": 9, "stop": "END",
                     "stop_token_ids": [7, 8], "include_stop_str_in_output": true, "ignore_eos": true,
                     "min_tokens": 2, "skip_special_tokens": false, "spaces_between_special_tokens": false,
                     "n": 2, "best_of": 3, "logprobs": 4, "prompt_logprobs": 1, "max_tokens": 12,
                     "truncate_prompt_tokens": 5, "priority": -1, "user": "u", "something_new": 1})");
  const auto& o = r.options;
  EXPECT_FLOAT_EQ(o.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(o.sampling.top_p, 0.8f);
  EXPECT_EQ(o.sampling.top_k, -1);
  EXPECT_FLOAT_EQ(o.sampling.min_p, 0.1f);
  EXPECT_FLOAT_EQ(o.sampling.repetition_penalty, 1.2f);
  EXPECT_FLOAT_EQ(o.sampling.presence_penalty, 0.5f);
  EXPECT_FLOAT_EQ(o.sampling.frequency_penalty, -0.5f);
  EXPECT_EQ(o.sampling.seed, 9u);
  EXPECT_EQ(o.stop, std::vector<std::string>{"END"});
  EXPECT_EQ(o.sampling.stop_token_ids, (std::vector<int32_t>{7, 8}));
  EXPECT_TRUE(o.include_stop_str_in_output);
  EXPECT_TRUE(o.sampling.ignore_eos);
  EXPECT_EQ(o.sampling.min_tokens, 2);
  EXPECT_FALSE(o.skip_special_tokens);
  EXPECT_FALSE(o.spaces_between_special_tokens);
  EXPECT_EQ(o.n, 2);
  EXPECT_EQ(o.best_of, 3);
  EXPECT_EQ(o.sampling.logprobs, 4);
  EXPECT_EQ(o.sampling.prompt_logprobs, 1);
  EXPECT_EQ(r.max_tokens, 12);
  EXPECT_EQ(r.truncate_prompt_tokens, 5);
  EXPECT_EQ(o.priority, -1);
}

TEST(ParseSampling, DefaultsComeFromGenerationConfig) {
  auto r = parse("{}");
  EXPECT_FLOAT_EQ(r.options.sampling.temperature, 0.7f);
  EXPECT_FLOAT_EQ(r.options.sampling.top_p, 0.9f);
  EXPECT_FALSE(r.max_tokens.has_value());
  EXPECT_EQ(r.options.sampling.logprobs, -1);
}

TEST(ParseSampling, ChatLogprobsAndMaxCompletionTokens) {
  auto r = parse(R"({"logprobs": true, "top_logprobs": 3, "max_tokens": 5, "max_completion_tokens": 7})",
                 Endpoint::kChat);
  EXPECT_EQ(r.options.sampling.logprobs, 3);
  EXPECT_EQ(r.max_tokens, 7);
}

TEST(ParseSampling, RejectsWhatCannotBeHonouredWithTheParamNamed) {
  struct Case {
    const char* body;
    const char* param;
  } cases[] = {
      {R"({"temperature": -1})", "temperature"}, {R"({"top_p": 0})", "top_p"},
      {R"({"n": 65})", "n"},                     {R"({"stop_token_ids": [100]})", "stop_token_ids"},
      {R"({"stop": 5})", "stop"},                {R"({"logit_bias": {"1": 2}})", "logit_bias"},
      {R"({"bad_words": ["x"]})", "bad_words"},  {R"({"allowed_token_ids": [1]})", "allowed_token_ids"},
      {R"({"seed": "x"})", "seed"},              {R"({"length_penalty": 2})", "length_penalty"},
      {R"({"stream": true, "best_of": 2})", "best_of"},
  };
  for (const auto& c : cases) {
    try {
      parse(c.body);
      ADD_FAILURE() << c.body << " was accepted";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400) << c.body;
      EXPECT_EQ(e.param(), c.param) << c.body << ": " << e.what();
    }
  }
}

TEST(ApiErrors, ContextMessageIsVllms) {
  EXPECT_EQ(context_length_message(512, 500, 20),
            "This model's maximum context length is 512 tokens. However, you requested 520 tokens (500 in the "
            "messages, 20 in the completion). Please reduce the length of the messages or completion.");
  auto e = error_object(429, "slow down");
  EXPECT_EQ(dump(e), R"({"error":{"message":"slow down","type":"RateLimitError","param":null,"code":429}})");
}

}  // namespace
}  // namespace halo::serve
