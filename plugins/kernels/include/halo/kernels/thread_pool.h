// A small persistent thread pool: threads are created once and reused for
// every parallel_for, so a decode step creates no threads and allocates
// nothing. The calling thread takes part as worker 0.
//
// A decode step issues hundreds of short parallel_fors back to back, so
// idle workers (and the caller waiting for stragglers) first spin for a
// bounded time (~kSpinMicros) polling an atomic before sleeping on a
// condition variable: consecutive calls then cost no futex wake-up, while an
// idle pool still goes to sleep instead of burning cores.
#pragma once

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace halo::kernels {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 = run everything on the calling thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Calls f(task, worker) for every task in [0, n), worker in [0, size()).
  // Tasks are handed out dynamically; which worker runs a task must not
  // change results (kernels give each task a fixed piece of the output).
  // Calls from several threads are serialized. The first exception thrown by
  // a task is rethrown in the caller after all tasks have stopped.
  template <class F>
  void parallel_for(size_t n, F&& f) {
    if (n == 0) return;
    if (n == 1 || num_threads_ == 1) {
      for (size_t i = 0; i < n; ++i) f(i, 0);
      return;
    }
    using Fn = std::remove_reference_t<F>;
    run(
        n, [](void* ctx, size_t i, int w) { (*static_cast<Fn*>(ctx))(i, w); },
        const_cast<void*>(static_cast<const void*>(&f)));
  }

  // Per-worker scratch memory (slot 0 or 1), grown to at least n floats.
  // Only worker `worker` may use its slots while a parallel_for runs.
  float* scratch(int worker, int slot, size_t n);

 private:
  using TaskFn = void (*)(void*, size_t, int);
  void run(size_t n, TaskFn fn, void* ctx);
  void work(int worker);
  void worker_main(int worker);

  int num_threads_;
  std::mutex run_mu_;  // one parallel_for at a time
  std::mutex mu_;      // guards sleeping on the condition variables and error_
  std::condition_variable wake_cv_;
  std::condition_variable done_cv_;
  // Job state: generation in the high 32 bits, kClosed, and the number of
  // workers inside the current job in the low bits. A worker joins with a
  // CAS while the job is open; the caller closes it once every task has been
  // handed out and waits only for the workers that joined, so a worker that
  // was descheduled (busy machine) never delays the caller. Published under
  // mu_ (so sleepers cannot miss it) with release; fn_/ctx_/num_tasks_ are
  // read by joined workers only.
  std::atomic<uint64_t> state_{0};
  std::atomic<bool> stop_{false};
  TaskFn fn_ = nullptr;
  void* ctx_ = nullptr;
  size_t num_tasks_ = 0;
  std::atomic<size_t> next_{0};
  std::exception_ptr error_;
  std::vector<std::array<std::vector<float>, 2>> scratch_;
  std::vector<std::thread> threads_;
};

}  // namespace halo::kernels
