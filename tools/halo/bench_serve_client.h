#pragma once
// The HTTP side of `halo bench serve`: streaming OpenAI requests (SSE) to any
// compatible server, many at once on one thread (libcurl's multi interface),
// each timed at the moment its bytes arrive.
//
// Threads: one. A StreamClient is driven by whoever calls poll(); callbacks
// run inside poll().
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "bench_serve_stream.h"

namespace halo::tools {

class StreamClient {
 public:
  StreamClient();
  ~StreamClient();
  StreamClient(const StreamClient&) = delete;
  StreamClient& operator=(const StreamClient&) = delete;

  // POSTs `body` (JSON) to `url` now; `on_done` runs (in poll) with the result.
  void start(const std::string& url, std::string body, const std::vector<std::string>& headers,
             std::function<void(StreamResult&&)> on_done);
  // Moves the transfers on, waiting at most `timeout` for something to happen.
  void poll(std::chrono::milliseconds timeout);
  size_t active() const { return active_; }

  struct Transfer;

 private:
  void* multi_;  // CURLM*
  size_t active_ = 0;
  std::vector<std::unique_ptr<Transfer>> transfers_;
};

// A plain GET, for the server's /v1/models; throws halo::Error naming the URL.
std::string http_get(const std::string& url, const std::vector<std::string>& headers);

}  // namespace halo::tools
