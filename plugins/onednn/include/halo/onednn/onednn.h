// bf16 matmuls through oneDNN (Debian libdnnl-dev 2.6, OpenMP runtime): an
// optional backend for the CPU plugin's linear layers and the bf16 peak figure
// of `halo bench latency`'s roofline. Built only when oneDNN is installed
// (HALO_HAVE_ONEDNN=1 is then defined for users of halo_onednn).
//
// Threads: oneDNN runs on OpenMP's threads, not on halo::kernels::ThreadPool.
// set_num_threads() sizes them (every forward() on any thread honours it);
// with 2 cores the OpenMP team and the pool take turns, never run together.
// libgomp's idle OpenMP threads spin (GOMP_SPINCOUNT, OMP_WAIT_POLICY, read
// once when libgomp loads) after each oneDNN call, competing with the pool's
// workers; see apply_recommended_omp_env().
//
// Batch invariance: oneDNN does not promise that a row's result is bitwise
// independent of M or of the thread count (it plans blockings per shape and
// per thread count). With oneDNN 2.6.3's brgemm on avx512_core_bf16 it was
// bitwise identical for every M (1..512), row position and 1 vs 2 threads
// tested (tests/onednn/onednn_test.cpp prints this), but another oneDNN
// version or ISA (AMX) may differ; halo::kernels::gemm_bf16 guarantees it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "halo/kernels/dtype.h"
#include "halo/kernels/gemm_bf16.h"

namespace halo::onednn {

// True if oneDNN runs bf16 matmuls natively on this CPU (its optimized
// implementation dispatches to avx512_core_bf16 or AMX); false otherwise,
// including when oneDNN fails to initialise. Probed once, then cached.
bool available();

// What oneDNN dispatches a bf16 matmul to, from the implementation string of
// a probe primitive, e.g. "brg:avx512_core_bf16"; "" if oneDNN is unusable.
std::string isa_name();

// Number of OpenMP threads oneDNN uses from now on, for calls on any thread
// (n <= 0: OpenMP's default, usually one per core). Returns immediately.
void set_num_threads(int n);
int num_threads();  // the value oneDNN will use for the next call

// libgomp's idle threads spin GOMP_SPINCOUNT times (default 300000 `pause`s,
// about 8 ms on the Zen4 test machine at ~26 ns a pause) before sleeping.
// When the two threads of an OpenMP team share a core (with ThreadPool's
// workers or any other busy process on the other one), a barrier can cost
// that whole spin: M=1 2048x2048 calls of 60 us took 8-16 ms (median) under
// load. Measured (2 cores, interleaved oneDNN call + pool parallel_for):
//   default:  62 us per call quiet, but 8-16 ms episodes under load
//   passive:  140 us per call quiet (futex wake-ups), 115-145 us under load
//   1000:     62 us per call quiet, 160-195 us under load, never ms-scale
//   10000:    650-850 us per call under load
// 1000 keeps back-to-back calls as fast as spinning and bounds the damage.
inline constexpr const char* kRecommendedGompSpinCount = "1000";

// Sets GOMP_SPINCOUNT=kRecommendedGompSpinCount unless the user set
// GOMP_SPINCOUNT or OMP_WAIT_POLICY; true if it set it. Header-only on
// purpose: libgomp reads these variables once, when it is loaded, so the
// host must call this BEFORE loading (dlopen) a plugin that links oneDNN;
// called after libgomp is loaded it changes nothing. See spin_env().
inline bool apply_recommended_omp_env() {
  if (std::getenv("GOMP_SPINCOUNT") != nullptr || std::getenv("OMP_WAIT_POLICY") != nullptr)
    return false;
  return ::setenv("GOMP_SPINCOUNT", kRecommendedGompSpinCount, 0) == 0;
}

// The OpenMP wait settings in this process's environment, e.g.
// "GOMP_SPINCOUNT=1000" or "libgomp default wait policy", for logs and
// `halo bench` (what libgomp uses if they were set before it was loaded).
std::string spin_env();

// y[M, N] = bf16(x)[M, K] * W^T (+ bias), fp32 accumulation and output; W is
// the sources stacked along N (q/k/v or gate/up fused), each row-major
// [rows, K] like nn.Linear, fp32/bf16/fp16 (rounded to bf16, nearest even).
// Weights are reordered once, at construction, into the blocked layout
// oneDNN's kernel prefers. One oneDNN primitive per distinct (M, bias or
// not, thread count) is created on first use and cached, so steady-state
// calls create nothing. Concurrent forward() calls on one object serialize.
class Linear {
 public:
  Linear(const std::vector<halo::kernels::WeightSource>& sources, size_t K);
  ~Linear();
  Linear(Linear&&) noexcept;
  Linear& operator=(Linear&&) noexcept;
  Linear(const Linear&) = delete;
  Linear& operator=(const Linear&) = delete;

  // x: fp32 [M, ldx] (first K columns used); bias: fp32 [N] or nullptr;
  // y: fp32 [M, ldy] (first N columns written), must not alias x. M == 0 is a
  // no-op. Throws std::runtime_error if oneDNN fails.
  void forward(const float* x, size_t M, size_t ldx, const float* bias, float* y, size_t ldy);

  size_t N() const;
  size_t K() const;
  size_t weight_bytes() const;        // bytes of the packed weight (incl. padding)
  std::string impl() const;           // oneDNN implementation used (probe at M=64)
  size_t primitives_created() const;  // primitives created so far (cache misses)

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct Peak {
  double flops_per_s = 0;  // best measured bf16 matmul throughput (2*M*N*K / s)
  std::string impl;        // oneDNN implementation that reached it
  size_t m = 0, n = 0, k = 0;
  double seconds = 0;  // time of that single best matmul
};

// Best bf16 matmul throughput oneDNN reaches on this machine in roughly
// budget_s seconds: a few large shapes (2048x2048x2048, 512x5632x2048,
// 1024x11264x2048 when the budget allows), weights pre-packed, timed after a
// warm-up, best of several repetitions. Each shape runs at least once timed,
// so a tiny budget still gives a figure (lower confidence). Uses
// num_threads() threads. Throws std::runtime_error if !available().
Peak measure_bf16_matmul_peak(double budget_s = 2.0);

}  // namespace halo::onednn
