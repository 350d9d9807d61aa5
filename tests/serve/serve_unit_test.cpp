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
#include "serve/guided_request.h"
#include "serve/http_server.h"
#include "serve/preprocess_pool.h"
#include "serve/tool_messages.h"
#include "text/jinja/chat_template.h"

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
  EXPECT_NE(r.find("\"code\":null"), std::string::npos) << r;  // OpenAI: a string or null, never the status
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

// Request smuggling (RFC 9112 section 6.1): framing other than exactly
// `chunked`, or chunked with Content-Length, is a 400 and the connection
// closes, so the bytes after the headers are never parsed as a request.
TEST(HttpServer, TransferEncodingOtherThanChunkedIs400AndCloses) {
  const std::string smuggled = "GET /echo HTTP/1.1\r\nHost: x\r\n\r\n";
  const std::string cases[] = {
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\n" + smuggled,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" + smuggled,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked, identity\r\n\r\n" + smuggled,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\n" + smuggled,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: identity\r\nContent-Length: 3\r\n\r\nabc" + smuggled,
      "POST /echo HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\nabc" + smuggled,
      "POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nContent-Length: 3\r\n\r\n"
      "3\r\nabc\r\n0\r\n\r\n" + smuggled,
      // HTTP/1.0 has no transfer codings: faulty framing even when it is chunked.
      "POST /echo HTTP/1.0\r\nConnection: keep-alive\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n" +
          smuggled,
  };
  Fixture f;
  for (const auto& request : cases) {
    Client c(f.server->port());
    c.send(request);
    std::string r = c.read_until("\r\n\r\n\r\n");  // until EOF
    EXPECT_EQ(r.rfind("HTTP/1.1 400", 0), 0u) << request << "\n->\n" << r;
    EXPECT_EQ(r.find("HTTP/1.1", 1), std::string::npos) << "a second response: " << r;
    EXPECT_EQ(r.find("POST abc"), std::string::npos) << r;
    EXPECT_TRUE(c.eof()) << request;
  }
  // Plain chunked still works.
  Client c(f.server->port());
  c.send("POST /echo HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: Chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n");
  EXPECT_NE(c.read_until("POST abc").find("POST abc"), std::string::npos);
}

TEST(HttpServer, OnDisconnectSetAfterTheClientLeftRunsAtOnce) {
  Fixture f;
  Client c(f.server->port());
  c.send("POST /defer HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n");
  auto fut = f.deferred.get_future();
  ASSERT_EQ(fut.wait_for(5s), std::future_status::ready);
  auto res = fut.get();
  c.close();
  for (int i = 0; i < 200 && !res->disconnected(); ++i) std::this_thread::sleep_for(10ms);
  ASSERT_TRUE(res->disconnected());
  int called = 0;
  res->on_disconnect([&] { called++; });  // as a preprocessing thread does after the client left
  EXPECT_EQ(called, 1);
}

TEST(PreprocessPool, RunsTasksAndBoundsTheQueue) {
  PreprocessPool pool(1, 2);
  std::promise<void> release;
  std::shared_future<void> gate = release.get_future().share();
  std::atomic<int> ran{0};
  ASSERT_TRUE(pool.submit([gate, &ran] {
    gate.wait();
    ran++;
  }));
  for (int i = 0; i < 100 && pool.waiting() > 0; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(pool.submit([&ran] { ran++; }));
  EXPECT_TRUE(pool.submit([&ran] { ran++; }));
  EXPECT_FALSE(pool.submit([&ran] { ran++; }));  // two already wait
  release.set_value();
  for (int i = 0; i < 500 && ran.load() < 3; ++i) std::this_thread::sleep_for(1ms);
  EXPECT_EQ(ran.load(), 3);
}

// ------------------------------------------------------------ request JSON

std::string nested(int depth, const std::string& inner = "1") {
  return std::string(size_t(depth), '[') + inner + std::string(size_t(depth), ']');
}

TEST(RequestJson, DepthIsLimitedWhileParsing) {
  // The crash: 12,000 levels inside `messages` content.
  const std::string deep = R"({"messages": [{"role": "user", "content": )" + nested(12000) + "}]}";
  try {
    parse_json_object(deep, 128);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("deeper than 128 levels (--max-request-json-depth)"), std::string::npos)
        << e.what();
  }
  // Exactly the limit is accepted (the body object counts as one level).
  EXPECT_NO_THROW(parse_json_object(R"({"a": )" + nested(127) + "}", 128));
  EXPECT_THROW(parse_json_object(R"({"a": )" + nested(128) + "}", 128), ApiError);
  EXPECT_THROW(parse_json_object(R"({"a": {"b": {"c": 1}}})", 2), ApiError);
  EXPECT_NO_THROW(parse_json_object(R"({"a": {"b": 1}})", 2));
  // Other requests' JSON (KServe's sampling_parameters string) names what it was.
  try {
    parse_request_json(nested(200), 64, "'sampling_parameters'");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("'sampling_parameters' is nested deeper than 64", 0), 0u) << e.what();
  }
  try {
    parse_json_object("{\"a\": ", 64);
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_NE(std::string(e.what()).find("not valid JSON"), std::string::npos);
  }
}

// JSON text inside a string field gets the same rule (issue 42: 20,000 levels
// in tool_calls[].function.arguments crashed /v1/chat/completions).
TEST(RequestJson, JsonTextInsideStringsHasTheSameDepthRule) {
  auto messages = [](const std::string& args) {
    ojson m = ojson::array();
    m.push_back({{"role", "user"}, {"content", "hi"}});
    m.push_back({{"role", "assistant"},
                 {"content", nullptr},
                 {"tool_calls", {{{"id", "c1"}, {"type", "function"}, {"function", {{"name", "f"}, {"arguments", args}}}}}}});
    return m;
  };
  for (int depth : {129, 20000}) {
    ojson m = messages(R"({"a": )" + nested(depth) + "}");
    try {
      prepare_tool_messages(m, 128);
      ADD_FAILURE() << "accepted depth " << depth;
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find("messages[1].tool_calls[0].function.arguments"), std::string::npos)
          << e.what();
      EXPECT_NE(std::string(e.what()).find("deeper than 128 levels"), std::string::npos) << e.what();
    }
  }
  // Within the limit: the object it encodes; text that is no JSON stays text.
  ojson ok = messages(R"({"a": )" + nested(100) + "}");
  prepare_tool_messages(ok, 128);
  EXPECT_TRUE(ok[1]["tool_calls"][0]["function"]["arguments"].is_object());
  ojson cut = messages(R"({"a": [1, 2)");
  prepare_tool_messages(cut, 128);
  EXPECT_EQ(cut[1]["tool_calls"][0]["function"]["arguments"], R"({"a": [1, 2)");
}

// An order-keeping parse costs n^2 in an object's keys: bounded (issue 42).
TEST(RequestJson, OrderedParseRefusesAnObjectOfTooManyKeys) {
  auto object_of = [](size_t n) {
    std::string s = "{";
    for (size_t i = 0; i < n; ++i) s += (i ? ",\"k" : "\"k") + std::to_string(i) + "\":1";
    return s + "}";
  };
  const ojson ok = parse_ordered_body(R"({"b": 1, "messages": [)" + object_of(kMaxOrderedKeys) + R"(], "a": 2})");
  EXPECT_EQ(ok.begin().key(), "b");  // the client's order
  EXPECT_EQ(ok["messages"][0].size(), kMaxOrderedKeys);
  try {
    parse_ordered_body(R"({"messages": [{"x": )" + object_of(200000) + "}]}");
    ADD_FAILURE() << "accepted";
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400);
    EXPECT_NE(std::string(e.what()).find("more than 10000 keys"), std::string::npos) << e.what();
  }
}

// A schema given as JSON text, and schemas that recurse through $ref, are
// bounded before anything recurses over them (issue 42: crashes at 10,000).
TEST(RequestJson, SchemasAsTextAndRefChainsAreBounded) {
  auto refused = [](const json& schema, const std::string& needle) {
    try {
      guided_schema_regex(schema, "guided_json");
      ADD_FAILURE() << "accepted " << schema.dump().substr(0, 80);
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(std::string(e.what()).rfind("'guided_json': ", 0), 0u) << e.what();
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
      EXPECT_LT(std::string(e.what()).size(), 600u);
    }
  };
  refused(json(R"({"type": "object", "default": )" + nested(10000) + "}"), "deeper than 128 levels");
  refused(json(R"({"type": "object", "default": )" + nested(2000) + "}"), "deeper than 128 levels");
  // 10,000 $defs, each a $ref to the next (a 358 KB body of depth 4).
  json defs = json::object();
  for (int i = 0; i < 10000; ++i) defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  defs["d10000"] = {{"type", "string"}};
  refused(json{{"$defs", defs}, {"$ref", "#/$defs/d0"}}, "nested deeper than 64 schemas");
  // A chain within the bound converts.
  json short_defs = json::object();
  for (int i = 0; i < 30; ++i) short_defs["d" + std::to_string(i)] = {{"$ref", "#/$defs/d" + std::to_string(i + 1)}};
  short_defs["d30"] = {{"type", "string"}};
  EXPECT_NO_THROW(guided_schema_regex(json{{"$defs", short_defs}, {"$ref", "#/$defs/d0"}}, "guided_json"));
  // guided_choice [] was silently unconstrained (issue 42).
  {
    json body = {{"guided_choice", json::array()}};
    Fields f(body);
    engine::RequestOptions o;
    try {
      parse_guided(f, o);
      ADD_FAILURE() << "accepted an empty guided_choice";
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_NE(std::string(e.what()).find("'guided_choice' is an empty list"), std::string::npos) << e.what();
    }
  }
  // An array index too large for any integer type: a 400, not a 500 (stoul).
  refused(json::parse(R"({"$defs": {"a": [{"type": "string"}]}, "$ref": "#/$defs/a/99999999999999999999"})"),
          "does not resolve");
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

std::string error_of(const std::string& body, Endpoint ep = Endpoint::kCompletions) {
  try {
    parse(body, ep);
  } catch (const ApiError& e) {
    EXPECT_EQ(e.status(), 400) << body;
    return e.what();
  }
  return "accepted";
}

// Numbers past int32/int64 or float range are reported as sent, never wrapped.
TEST(ParseSampling, OutOfRangeNumbersAreReportedAsSent) {
  EXPECT_EQ(error_of(R"({"n": 3e9})"), "'n' must be an integer in [1, 2147483647], got 3000000000.0");
  EXPECT_EQ(error_of(R"({"n": 3000000000})"), "'n' must be an integer in [1, 2147483647], got 3000000000");
  EXPECT_EQ(error_of(R"({"max_tokens": 18446744073709551615})"),
            "'max_tokens' must be an integer in [1, 2147483647], got 18446744073709551615");
  EXPECT_EQ(error_of(R"({"max_tokens": -3e9})"), "'max_tokens' must be at least 1, got -3000000000.0");
  EXPECT_EQ(error_of(R"({"n": 0})"), "'n' must be at least 1, got 0");
  EXPECT_EQ(error_of(R"({"top_logprobs": 1e300, "logprobs": true})", Endpoint::kChat),
            "'top_logprobs' must be an integer in [0, 20], got 1e+300");
  EXPECT_EQ(error_of(R"({"seed": 18446744073709551615})"),
            "'seed' must be an integer in [-9223372036854775808, 9223372036854775807], got 18446744073709551615");
  EXPECT_EQ(error_of(R"({"seed": 9.3e18})"),
            "'seed' must be an integer in [-9223372036854775808, 9223372036854775807], got 9.3e+18");
  EXPECT_EQ(error_of(R"({"temperature": 1e39})"), "'temperature' is not a finite number as a 32-bit float, got 1e+39");
  EXPECT_EQ(error_of(R"({"stop_token_ids": [18446744073709551615]})"),
            "'stop_token_ids' holds 18446744073709551615, outside the vocabulary [0, 100)");
  EXPECT_EQ(error_of(R"({"top_k": 1.5})"), "'top_k' must be an integer, got a number");
  // 1e400 does not parse (nlohmann stops at the overflow): a 400 naming the field.
  for (const char* body : {R"({"temperature": 1e400})", R"({"a": 1, "temperature": [1, -1e400]})"}) {
    try {
      parse_json_object(body, 128);
      ADD_FAILURE() << "accepted";
    } catch (const ApiError& e) {
      EXPECT_STREQ(e.what(), "'temperature' is not a finite number (it overflows a double)");
      EXPECT_EQ(e.param(), "temperature");
    }
  }
}

TEST(Tools, EachToolIsAFunctionWithANameAndTheIndexIsNamed) {
  auto error_of_tools = [](const std::string& tools) -> std::string {
    try {
      validate_tools(json::parse(tools));
    } catch (const ApiError& e) {
      EXPECT_EQ(e.status(), 400);
      EXPECT_EQ(e.param(), "tools");
      return e.what();
    }
    return "accepted";
  };
  const std::string ok = R"({"type": "function", "function": {"name": "f", "description": "d", "parameters": {}}})";
  EXPECT_EQ(error_of_tools("[" + ok + "]"), "accepted");
  EXPECT_EQ(error_of_tools(R"([{"type": "function", "function": {"name": "f"}}])"), "accepted");
  EXPECT_EQ(error_of_tools("[]"), "accepted");
  EXPECT_EQ(error_of_tools(R"({"type": "function"})"), "'tools' must be a list");
  EXPECT_EQ(error_of_tools("[" + ok + ", 5]"),
            R"(tools[1] must be an object {"type": "function", "function": {...}})");
  EXPECT_EQ(error_of_tools(R"([{"type": "retrieval", "function": {"name": "f"}}])"),
            R"(tools[0].type must be "function")");
  EXPECT_EQ(error_of_tools(R"([{"function": {"name": "f"}}])"), R"(tools[0].type must be "function")");
  EXPECT_EQ(error_of_tools(R"([{"type": "function"}])"), "tools[0].function must be an object");
  EXPECT_EQ(error_of_tools(R"([{"type": "function", "function": "f"}])"), "tools[0].function must be an object");
  EXPECT_EQ(error_of_tools(R"([{"type": "function", "function": {"name": ""}}])"),
            "tools[0].function.name must be a non-empty string");
  EXPECT_EQ(error_of_tools(R"([{"type": "function", "function": {"name": 3}}])"),
            "tools[0].function.name must be a non-empty string");
  EXPECT_EQ(error_of_tools(R"([{"type": "function", "function": {"name": "f", "parameters": []}}])"),
            "tools[0].function.parameters must be an object (a JSON schema)");
  EXPECT_EQ(error_of_tools(R"([{"type": "function", "function": {"name": "f", "description": 1}}])"),
            "tools[0].function.description must be a string");
}

TEST(ApiErrors, OneMappingOfExceptionsToStatuses) {
  auto map = [](auto&& thrower) {
    try {
      thrower();
    } catch (...) {
      return to_api_error(std::current_exception());
    }
    return ApiError(0, "nothing thrown");
  };
  ApiError a = map([] {
    ApiError e(429, "busy");
    e.headers.push_back({"Retry-After", "3"});
    throw e;
  });
  EXPECT_EQ(a.status(), 429);
  ASSERT_EQ(a.headers.size(), 1u);
  EXPECT_EQ(map([] { throw text::TemplateError(1, "bad"); }).status(), 400);
  EXPECT_EQ(map([] { throw text::TemplateError(1, "bad"); }).param(), "messages");
  EXPECT_EQ(map([] { [[maybe_unused]] json j = json::parse("{"); }).status(), 400);
  EXPECT_EQ(map([] { throw Error("no"); }).status(), 400);
  EXPECT_EQ(map([] { throw std::runtime_error("bug"); }).status(), 500);
  HttpResponse r = error_http_response(std::make_exception_ptr(a), [](const ApiError& e) {
    HttpResponse out;
    out.status = e.status();
    return out;
  });
  EXPECT_EQ(r.status, 429);
  ASSERT_EQ(r.headers.size(), 1u);
  EXPECT_EQ(r.headers[0].first, "Retry-After");
}

TEST(ApiErrors, ContextMessageIsVllms) {
  EXPECT_EQ(context_length_message(512, 500, 20),
            "This model's maximum context length is 512 tokens. However, you requested 520 tokens (500 in the "
            "messages, 20 in the completion). Please reduce the length of the messages or completion.");
  auto e = error_object(429, "slow down");
  EXPECT_EQ(dump(e),
            R"({"error":{"message":"slow down","type":"RateLimitError","param":null,"code":"rate_limit_exceeded"}})");
}

// OpenAI's Error: `code` is a string or null, never the HTTP status.
TEST(ApiErrors, CodesAreOpenAIsStrings) {
  EXPECT_EQ(ApiError(400, "x").code(), "invalid_request_error");
  EXPECT_EQ(ApiError(401, "x").code(), "invalid_api_key");
  EXPECT_EQ(ApiError(429, "x").code(), "rate_limit_exceeded");
  EXPECT_EQ(ApiError(404, "x").code(), std::nullopt);  // an unknown route: null, as OpenAI sends
  EXPECT_EQ(ApiError(500, "x").code(), std::nullopt);
  EXPECT_EQ(ApiError(503, "x").code(), std::nullopt);
  EXPECT_EQ(ApiError(404, "x", "model", error_code::kModelNotFound).code(), "model_not_found");
  EXPECT_EQ(ApiError(400, "x", {}, "").code(), std::nullopt);  // "" is an explicit null
  EXPECT_EQ(dump(error_object(ApiError(404, "gone", "model", error_code::kModelNotFound))),
            R"({"error":{"message":"gone","type":"NotFoundError","param":"model","code":"model_not_found"}})");
  EXPECT_EQ(dump(error_object(503, "later")),
            R"({"error":{"message":"later","type":"ServiceUnavailableError","param":null,"code":null}})");
  // The codes reach every frontend through the one mapping.
  auto code_of = [](auto thrower) {
    try {
      thrower();
    } catch (...) {
      return to_api_error(std::current_exception()).code();
    }
    return std::optional<std::string>("nothing thrown");
  };
  SamplingDefaults d;
  d.vocab_size = 100;
  EXPECT_EQ(code_of([&] {
              json j = json::parse(R"({"n": "two"})");
              Fields f(j);
              parse_sampling(f, Endpoint::kCompletions, d);
            }),
            "invalid_type");
  EXPECT_EQ(code_of([&] {
              json j = json::parse(R"({"temperature": -1})");
              Fields f(j);
              parse_sampling(f, Endpoint::kCompletions, d);
            }),
            "invalid_value");
  EXPECT_EQ(code_of([&] {
              json j = json::parse(R"({"logit_bias": {"1": 2}})");
              Fields f(j);
              parse_sampling(f, Endpoint::kCompletions, d);
            }),
            "unsupported_parameter");
  EXPECT_EQ(code_of([&] {
              SamplingRequest s;
              s.max_tokens = 100;
              resolve_max_tokens(s, Endpoint::kChat, 500, 512, {});
            }),
            "context_length_exceeded");
  EXPECT_EQ(code_of([] { throw Error("engine said no"); }), "invalid_request_error");
  EXPECT_EQ(code_of([] { throw std::runtime_error("bug"); }), std::nullopt);
}

}  // namespace
}  // namespace halo::serve
