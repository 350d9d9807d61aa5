#pragma once
// The threads that parse, render and tokenize requests. Chat-template
// rendering and tokenization can take seconds on a large or hostile request;
// on an HTTP I/O thread that would stall every connection of that thread
// (/health included). The I/O threads only route and hand the request here;
// a task answers through its Responder when it is done.
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace halo::serve {

class PreprocessPool {
 public:
  // `max_waiting`: tasks that may wait for a thread (0: no limit).
  PreprocessPool(int threads, size_t max_waiting);
  ~PreprocessPool();  // waiting tasks are dropped; running ones finish first
  PreprocessPool(const PreprocessPool&) = delete;
  PreprocessPool& operator=(const PreprocessPool&) = delete;

  // Queues `task`; false (nothing queued) when max_waiting tasks already wait.
  bool submit(std::function<void()> task);
  size_t waiting() const;
  int threads() const { return static_cast<int>(threads_.size()); }

 private:
  void loop();

  const size_t max_waiting_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace halo::serve
