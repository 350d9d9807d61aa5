#include "roofline.h"

#include <sched.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <thread>
#include <vector>

namespace halo::tools {
namespace {

// Eight independent accumulators so the loop is bound by loads, not by one
// add chain; the compiler vectorizes it (AVX-512 / AVX2 clones picked at load
// time when the CPU has them).
// Not under a sanitizer: the clones' ifunc resolver runs during relocation,
// before the sanitizer's runtime is up, and its instrumented code crashes there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
__attribute__((target_clones("avx512f", "avx2", "default")))
#endif
uint64_t
sum_words(const uint64_t* p, size_t n) {
  uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0, a4 = 0, a5 = 0, a6 = 0, a7 = 0;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    a0 += p[i];
    a1 += p[i + 1];
    a2 += p[i + 2];
    a3 += p[i + 3];
    a4 += p[i + 4];
    a5 += p[i + 5];
    a6 += p[i + 6];
    a7 += p[i + 7];
  }
  for (; i < n; ++i) a0 += p[i];
  return a0 + a1 + a2 + a3 + a4 + a5 + a6 + a7;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// Runs body(t) on `threads` threads (t = 0..threads-1) and waits for all.
template <class F>
void parallel(int threads, F&& body) {
  std::vector<std::thread> pool;
  pool.reserve(static_cast<size_t>(threads - 1));
  for (int t = 1; t < threads; ++t) pool.emplace_back([&body, t] { body(t); });
  body(0);
  for (auto& th : pool) th.join();
}

}  // namespace

ReadBandwidth measure_read_bandwidth(size_t buffer_bytes, int threads, double budget_s) {
  using clock = std::chrono::steady_clock;
  const auto start = clock::now();
  ReadBandwidth r;
  r.threads = threads > 0 ? threads : usable_cores();
  const size_t page = 4096;
  buffer_bytes = std::max<size_t>(page, (buffer_bytes + page - 1) / page * page);
  r.buffer_bytes = buffer_bytes;
  const size_t words = buffer_bytes / sizeof(uint64_t);
  // Pre-faulted in one call (a page-by-page first touch of 1 GiB takes
  // seconds in some VMs); pages then sit on the caller's NUMA node.
  void* mem = mmap(nullptr, buffer_bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mem == MAP_FAILED) throw std::runtime_error("read bandwidth probe: cannot map the buffer");
  struct Unmap {
    void* p;
    size_t n;
    ~Unmap() { munmap(p, n); }
  } unmap{mem, buffer_bytes};
  uint64_t* buf = static_cast<uint64_t*>(mem);
  const auto slice = [&](int t) {
    size_t per = (words + static_cast<size_t>(r.threads) - 1) / static_cast<size_t>(r.threads);
    size_t b = std::min(words, per * static_cast<size_t>(t));
    return std::pair<size_t, size_t>(b, std::min(words, b + per));
  };
  // Written once, so no page is a shared zero page.
  parallel(r.threads, [&](int t) {
    auto [b, e] = slice(t);
    for (size_t i = b; i < e; ++i) buf[i] = i * 0x9E3779B97F4A7C15ull;
  });

  std::atomic<uint64_t> sink{0};
  std::vector<double> rates;
  for (;;) {
    const auto t0 = clock::now();
    parallel(r.threads, [&](int t) {
      auto [b, e] = slice(t);
      sink.fetch_add(sum_words(buf + b, e - b), std::memory_order_relaxed);
    });
    const double s = std::chrono::duration<double>(clock::now() - t0).count();
    ++r.passes;
    if (s > 0) rates.push_back(static_cast<double>(buffer_bytes) / s);
    const double spent = std::chrono::duration<double>(clock::now() - start).count();
    if (r.passes >= 5 && spent >= budget_s) break;
  }
  std::sort(rates.begin(), rates.end());
  if (!rates.empty()) {
    r.bytes_per_s = rates[rates.size() / 2];
    r.best_bytes_per_s = rates.back();
  }
  r.seconds = std::chrono::duration<double>(clock::now() - start).count();
  return r;
}

}  // namespace halo::tools
