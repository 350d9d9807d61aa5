#include "bench_serve_client.h"

#include <curl/curl.h>
#include <fmt/format.h>

#include <algorithm>

#include "common/error.h"

namespace halo::tools {
namespace {

// Once per process, before the first handle (libcurl's rule).
void init_curl() {
  static const bool ok = curl_global_init(CURL_GLOBAL_DEFAULT) == CURLE_OK;
  if (!ok) throw Error("libcurl failed to initialise");
}

}  // namespace

struct StreamClient::Transfer {
  CURL* easy = nullptr;
  curl_slist* headers = nullptr;
  std::string body;
  StreamReader reader;
  std::string error_body;
  long status = 0;
  StreamResult result;
  std::function<void(StreamResult&&)> on_done;

  ~Transfer() {
    if (easy) curl_easy_cleanup(easy);
    curl_slist_free_all(headers);
  }

  // The body as it arrives: an error's JSON, or the stream's events.
  void on_bytes(const char* p, size_t n) {
    const auto now = BenchClock::now();
    if (status == 0) curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (status >= 400) {
      if (error_body.size() < 4096)
        error_body.append(p, std::min<size_t>(n, 4096 - error_body.size()));
      return;
    }
    reader.feed(std::string_view(p, n), now, result);
  }

  static size_t write(char* p, size_t size, size_t n, void* self) {
    static_cast<Transfer*>(self)->on_bytes(p, size * n);
    return size * n;
  }

  void finish(CURLcode code) {
    result.done = BenchClock::now();
    curl_easy_getinfo(easy, CURLINFO_RESPONSE_CODE, &status);
    if (code != CURLE_OK) {
      result.error = curl_easy_strerror(code);
    } else if (status != 200) {
      result.error = fmt::format("HTTP {}: {}", status, error_body_message(error_body));
    } else if (result.error.empty() && result.chunks.empty()) {
      result.error = "the stream ended without a token or a finish_reason";
    }
    result.success = result.error.empty();
  }
};

StreamClient::StreamClient() {
  init_curl();
  multi_ = curl_multi_init();
  // Every request on a connection of its own, as many as are in flight.
  curl_multi_setopt(multi_, CURLMOPT_MAX_HOST_CONNECTIONS, 0L);
}

StreamClient::~StreamClient() {
  for (auto& t : transfers_) curl_multi_remove_handle(multi_, t->easy);
  transfers_.clear();
  curl_multi_cleanup(multi_);
}

void StreamClient::start(const std::string& url, std::string body,
                         const std::vector<std::string>& headers,
                         std::function<void(StreamResult&&)> on_done) {
  auto t = std::make_unique<Transfer>();
  t->easy = curl_easy_init();
  if (!t->easy) throw Error("libcurl could not make a transfer");
  t->body = std::move(body);
  t->on_done = std::move(on_done);
  t->headers = curl_slist_append(t->headers, "Content-Type: application/json");
  t->headers = curl_slist_append(t->headers, "Accept: text/event-stream");
  for (const auto& h : headers) t->headers = curl_slist_append(t->headers, h.c_str());
  CURL* e = t->easy;
  curl_easy_setopt(e, CURLOPT_URL, url.c_str());
  curl_easy_setopt(e, CURLOPT_POST, 1L);
  curl_easy_setopt(e, CURLOPT_POSTFIELDS, t->body.c_str());
  curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, static_cast<curl_off_t>(t->body.size()));
  curl_easy_setopt(e, CURLOPT_HTTPHEADER, t->headers);
  curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, &Transfer::write);
  curl_easy_setopt(e, CURLOPT_WRITEDATA, t.get());
  curl_easy_setopt(e, CURLOPT_PRIVATE, t.get());
  curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
  curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT, 30L);
  t->result.sent = BenchClock::now();
  if (curl_multi_add_handle(multi_, e) != CURLM_OK)
    throw Error("libcurl could not start a transfer");
  transfers_.push_back(std::move(t));
  ++active_;
  int running = 0;
  curl_multi_perform(multi_, &running);  // send it now, not at the next poll
}

void StreamClient::poll(std::chrono::milliseconds timeout) {
  int running = 0;
  curl_multi_poll(multi_, nullptr, 0, static_cast<int>(std::max<int64_t>(0, timeout.count())),
                  nullptr);
  curl_multi_perform(multi_, &running);
  int left = 0;
  while (CURLMsg* msg = curl_multi_info_read(multi_, &left)) {
    if (msg->msg != CURLMSG_DONE) continue;
    Transfer* t = nullptr;
    curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
    t->finish(msg->data.result);
    curl_multi_remove_handle(multi_, t->easy);
    auto it = std::find_if(transfers_.begin(), transfers_.end(),
                           [&](const auto& p) { return p.get() == t; });
    std::unique_ptr<Transfer> owned = std::move(*it);
    transfers_.erase(it);
    --active_;
    owned->on_done(std::move(owned->result));
  }
}

namespace {
size_t append(char* p, size_t size, size_t n, void* out) {
  static_cast<std::string*>(out)->append(p, size * n);
  return size * n;
}
}  // namespace

std::string http_get(const std::string& url, const std::vector<std::string>& headers) {
  init_curl();
  std::unique_ptr<CURL, decltype(&curl_easy_cleanup)> e(curl_easy_init(), &curl_easy_cleanup);
  std::unique_ptr<curl_slist, decltype(&curl_slist_free_all)> list(nullptr, &curl_slist_free_all);
  for (const auto& h : headers) list.reset(curl_slist_append(list.release(), h.c_str()));
  std::string body;
  curl_easy_setopt(e.get(), CURLOPT_URL, url.c_str());
  curl_easy_setopt(e.get(), CURLOPT_HTTPHEADER, list.get());
  curl_easy_setopt(e.get(), CURLOPT_WRITEFUNCTION, &append);
  curl_easy_setopt(e.get(), CURLOPT_WRITEDATA, &body);
  curl_easy_setopt(e.get(), CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(e.get(), CURLOPT_TIMEOUT, 30L);
  CURLcode code = curl_easy_perform(e.get());
  if (code != CURLE_OK) throw Error(fmt::format("GET {}: {}", url, curl_easy_strerror(code)));
  long status = 0;
  curl_easy_getinfo(e.get(), CURLINFO_RESPONSE_CODE, &status);
  if (status != 200)
    throw Error(fmt::format("GET {}: HTTP {}: {}", url, status, body.substr(0, 300)));
  return body;
}

}  // namespace halo::tools
