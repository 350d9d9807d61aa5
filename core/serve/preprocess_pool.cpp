#include "serve/preprocess_pool.h"

#include <algorithm>

#include <spdlog/spdlog.h>

namespace halo::serve {

PreprocessPool::PreprocessPool(int threads, size_t max_waiting) : max_waiting_(max_waiting) {
  for (int i = 0; i < std::max(1, threads); ++i) threads_.emplace_back([this] { loop(); });
}

PreprocessPool::~PreprocessPool() {
  {
    std::lock_guard lk(mu_);
    stop_ = true;
    tasks_.clear();
  }
  cv_.notify_all();
  for (auto& t : threads_) t.join();
}

bool PreprocessPool::submit(std::function<void()> task) {
  {
    std::lock_guard lk(mu_);
    if (stop_ || (max_waiting_ > 0 && tasks_.size() >= max_waiting_)) return false;
    tasks_.push_back(std::move(task));
  }
  cv_.notify_one();
  return true;
}

size_t PreprocessPool::waiting() const {
  std::lock_guard lk(mu_);
  return tasks_.size();
}

void PreprocessPool::loop() {
  while (true) {
    std::function<void()> task;
    {
      std::unique_lock lk(mu_);
      cv_.wait(lk, [&] { return stop_ || !tasks_.empty(); });
      if (stop_) return;
      task = std::move(tasks_.front());
      tasks_.pop_front();
    }
    try {
      task();
    } catch (const std::exception& e) {  // tasks answer their own errors; this is a bug, not a crash
      spdlog::error("preprocessing task failed: {}", e.what());
    }
  }
}

}  // namespace halo::serve
