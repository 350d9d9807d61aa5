#include "halo/kernels/thread_pool.h"

#include <algorithm>

namespace halo::kernels {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  scratch_.resize(static_cast<size_t>(num_threads_));
  threads_.reserve(static_cast<size_t>(num_threads_ - 1));
  try {
    for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker_main(i); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    wake_cv_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  wake_cv_.notify_all();
  for (auto& t : threads_) t.join();
}

float* ThreadPool::scratch(int worker, int slot, size_t n) {
  std::vector<float>& v = scratch_[static_cast<size_t>(worker)][static_cast<size_t>(slot)];
  if (v.size() < n) v.resize(n);
  return v.data();
}

void ThreadPool::work(int worker) {
  for (;;) {
    const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
    if (i >= num_tasks_) return;
    try {
      fn_(ctx_, i, worker);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mu_);
      if (!error_) error_ = std::current_exception();
      next_.store(num_tasks_, std::memory_order_relaxed);  // stop handing out tasks
    }
  }
}

void ThreadPool::worker_main(int worker) {
  uint64_t seen = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
    }
    work(worker);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (--busy_ == 0) done_cv_.notify_one();
    }
  }
}

void ThreadPool::run(size_t n, TaskFn fn, void* ctx) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = fn;
    ctx_ = ctx;
    num_tasks_ = n;
    next_.store(0, std::memory_order_relaxed);
    error_ = nullptr;
    busy_ = static_cast<int>(threads_.size());
    ++generation_;
  }
  wake_cv_.notify_all();
  work(0);
  std::exception_ptr err;
  {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, [&] { return busy_ == 0; });
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace halo::kernels
