#include "halo/kernels/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace halo::kernels {

namespace {

// How long an idle worker (or the caller waiting for the last tasks) polls
// before sleeping: long enough to cover the serial gap between two kernels of
// a decode step, short enough that an idle pool stops using CPU almost at once.
constexpr auto kSpin = std::chrono::microseconds(100);

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls ready() with pause instructions for at most kSpin; true if it became true.
template <class Ready>
bool spin_until(Ready&& ready) {
  if (ready()) return true;
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  for (;;) {
    for (int i = 0; i < 64; ++i) {  // check the clock only now and then
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  scratch_.resize(static_cast<size_t>(num_threads_));
  threads_.reserve(static_cast<size_t>(num_threads_ - 1));
  try {
    for (int i = 1; i < num_threads_; ++i) threads_.emplace_back([this, i] { worker_main(i); });
  } catch (...) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_.store(true, std::memory_order_release);
    }
    wake_cv_.notify_all();
    for (auto& t : threads_) t.join();
    throw;
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_.store(true, std::memory_order_release);
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

namespace {
constexpr uint64_t kClosed = uint64_t{1} << 31;
constexpr uint64_t kActive = kClosed - 1;
inline uint32_t gen_of(uint64_t s) { return static_cast<uint32_t>(s >> 32); }
}  // namespace

void ThreadPool::worker_main(int worker) {
  uint32_t seen = 0;
  for (;;) {
    auto ready = [&] {
      return stop_.load(std::memory_order_acquire) ||
             gen_of(state_.load(std::memory_order_acquire)) != seen;
    };
    if (!spin_until(ready)) {
      // state_ changes generation only under mu_, so checking it under mu_
      // here cannot miss the notify of a job published in between.
      std::unique_lock<std::mutex> lock(mu_);
      wake_cv_.wait(lock, ready);
    }
    if (stop_.load(std::memory_order_acquire)) return;
    uint64_t s = state_.load(std::memory_order_acquire);
    seen = gen_of(s);
    // Join the job unless the caller already closed it (then it is done
    // without us and we must not touch its state).
    bool joined = false;
    while ((s & kClosed) == 0 && gen_of(s) == seen) {
      if (state_.compare_exchange_weak(s, s + 1, std::memory_order_acq_rel,
                                       std::memory_order_acquire)) {
        joined = true;
        break;
      }
    }
    if (!joined) continue;
    work(worker);
    const uint64_t before = state_.fetch_sub(1, std::memory_order_acq_rel);
    if ((before & kClosed) != 0 && (before & kActive) == 1) {
      // Last one out of a closed job: wake the caller if it went to sleep.
      // Taking mu_ orders this with the caller's check-then-wait.
      std::lock_guard<std::mutex> lock(mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::run(size_t n, TaskFn fn, void* ctx) {
  std::lock_guard<std::mutex> run_lock(run_mu_);
  // Only workers that join the new job read these, and every worker that
  // joined the previous job has left it.
  fn_ = fn;
  ctx_ = ctx;
  num_tasks_ = n;
  next_.store(0, std::memory_order_relaxed);
  error_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    const uint64_t gen = gen_of(state_.load(std::memory_order_relaxed)) + 1u;
    state_.store(static_cast<uint64_t>(static_cast<uint32_t>(gen)) << 32,
                 std::memory_order_release);
  }
  wake_cv_.notify_all();  // cheap when every worker is still spinning
  work(0);
  // Every task has been handed out: close the job to late-comers, then wait
  // for the workers still running tasks.
  state_.fetch_or(kClosed, std::memory_order_acq_rel);
  auto done = [&] { return (state_.load(std::memory_order_acquire) & kActive) == 0; };
  if (!spin_until(done)) {
    std::unique_lock<std::mutex> lock(mu_);
    done_cv_.wait(lock, done);
  }
  std::exception_ptr err;
  {
    std::lock_guard<std::mutex> lock(mu_);
    err = error_;
    error_ = nullptr;
  }
  if (err) std::rethrow_exception(err);
}

}  // namespace halo::kernels
