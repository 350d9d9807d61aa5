#include "serve/stream_pump.h"

#include <spdlog/spdlog.h>

namespace halo::serve {

StreamPump::StreamPump(std::chrono::microseconds idle_sleep) : idle_sleep_(idle_sleep) {
  thread_ = std::thread([this] { loop(); });
}

StreamPump::~StreamPump() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void StreamPump::add(std::shared_ptr<engine::RequestStream> stream, std::shared_ptr<StreamConsumer> consumer,
                     size_t stream_index) {
  {
    std::lock_guard lk(mu_);
    incoming_.push_back({std::move(stream), std::move(consumer), stream_index});
    active_++;
  }
  cv_.notify_all();
}

size_t StreamPump::size() const {
  std::lock_guard lk(mu_);
  return active_;
}

void StreamPump::loop() {
  std::vector<Entry> entries;
  std::vector<engine::StreamEvent> batch;
  bool idle = false;
  while (true) {
    {
      std::unique_lock lk(mu_);
      if (entries.empty() && incoming_.empty()) {
        cv_.wait(lk, [&] { return stop_ || !incoming_.empty(); });
      } else if (idle) {
        cv_.wait_for(lk, idle_sleep_, [&] { return stop_ || !incoming_.empty(); });
      }
      if (stop_) break;
      for (auto& e : incoming_) entries.push_back(std::move(e));
      incoming_.clear();
    }
    idle = true;
    size_t ended = 0;
    for (auto& e : entries) {
      batch.clear();
      engine::StreamEvent ev;
      engine::RequestStream::Poll p;
      // A bounded number per pass keeps one busy stream from starving the rest.
      while (batch.size() < 64 && (p = e.stream->next(ev, std::chrono::milliseconds(0))) ==
                                      engine::RequestStream::Poll::kEvent)
        batch.push_back(std::move(ev));
      if (batch.size() >= 64) p = engine::RequestStream::Poll::kEvent;
      try {
        if (!batch.empty()) {
          idle = false;
          e.consumer->on_events(e.index, batch);
        }
        if (p == engine::RequestStream::Poll::kEnd) {
          idle = false;
          e.consumer->on_end(e.index);
          e.stream.reset();
          ++ended;
        }
      } catch (const std::exception& ex) {
        // A consumer bug must not take the other streams down.
        spdlog::error("request {}: response failed: {}", e.stream ? e.stream->request_id() : "?", ex.what());
        if (e.stream) {
          if (p != engine::RequestStream::Poll::kEnd) {
            try {
              e.consumer->on_end(e.index);  // so the response still ends
            } catch (const std::exception&) {
            }
          }
          e.stream.reset();
          ++ended;
        }
      }
    }
    if (ended) {
      std::erase_if(entries, [](const Entry& e) { return !e.stream; });
      std::lock_guard lk(mu_);
      active_ -= ended;
    }
  }
}

}  // namespace halo::serve
