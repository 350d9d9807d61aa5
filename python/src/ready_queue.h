#pragma once
// Which requests have new events, for a consumer that waits on an event loop
// or a condition instead of blocking in RequestStream::next. Stream listeners
// (called on the engine's thread) mark a request ready; the consumer takes
// the ready ids and drains those streams.
//
// Threads: every method may be called from any thread. Lifetime: shared by
// the listeners, so it outlives the engine wrapper that made it.
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <unordered_set>
#include <vector>

namespace halo::python {

class ReadyQueue {
 public:
  ReadyQueue();  // throws std::system_error when no eventfd can be made
  ~ReadyQueue();
  ReadyQueue(const ReadyQueue&) = delete;
  ReadyQueue& operator=(const ReadyQueue&) = delete;

  // An eventfd that is readable while ids are waiting (for loop.add_reader).
  int fd() const { return fd_; }
  // Marks `id` ready and wakes the consumer.
  void mark(const std::string& id);
  // The ready ids (each once), clearing them and the eventfd.
  std::vector<std::string> take();
  // Waits until some id is ready or `timeout` passes; true if one is.
  bool wait(std::chrono::milliseconds timeout);

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::string> order_;
  std::unordered_set<std::string> ids_;
  int fd_ = -1;
};

}  // namespace halo::python
