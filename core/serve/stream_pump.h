#pragma once
// One thread that moves events from many engine RequestStreams to their
// consumers (the HTTP responses), instead of a thread per request. Each pass
// polls every open stream without waiting; when a pass finds nothing it
// sleeps briefly (or until a new stream arrives).
#include <chrono>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/async_engine.h"

namespace halo::serve {

// Receives the events of one or more streams. Called on the pump thread only.
class StreamConsumer {
 public:
  virtual ~StreamConsumer() = default;
  // Events of stream `stream_index` (in order).
  virtual void on_events(size_t stream_index, std::vector<engine::StreamEvent>& events) = 0;
  // Stream `stream_index` has ended (every choice finished, all events taken).
  virtual void on_end(size_t stream_index) = 0;
};

class StreamPump {
 public:
  explicit StreamPump(std::chrono::microseconds idle_sleep = std::chrono::microseconds(500));
  ~StreamPump();  // stops the thread; streams still open are dropped
  StreamPump(const StreamPump&) = delete;
  StreamPump& operator=(const StreamPump&) = delete;

  void add(std::shared_ptr<engine::RequestStream> stream, std::shared_ptr<StreamConsumer> consumer,
           size_t stream_index);
  size_t size() const;

 private:
  struct Entry {
    std::shared_ptr<engine::RequestStream> stream;
    std::shared_ptr<StreamConsumer> consumer;
    size_t index;
  };
  void loop();

  std::chrono::microseconds idle_sleep_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Entry> incoming_;
  size_t active_ = 0;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace halo::serve
