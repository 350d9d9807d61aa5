// Tests of the packed bf16 matmul (gemm_bf16) and of the thread pool it runs on.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "halo/kernels/gemm_bf16.h"
#include "halo/kernels/kernels.h"

namespace k = halo::kernels;

namespace {

std::vector<float> random_vec(size_t n, uint32_t seed, float scale = 1.f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

// One source: its bytes in dtype t and the exact bf16 value the packer must
// produce for every element (RNE of the source value).
struct Source {
  k::DType t;
  size_t rows;
  std::vector<uint8_t> bytes;
  std::vector<float> bf16_ref;  // [rows, K]
};

Source make_source(k::DType t, size_t rows, size_t K, uint32_t seed) {
  Source s{t, rows, {}, {}};
  const auto v = random_vec(rows * K, seed);
  s.bytes.resize(rows * K * k::dtype_size(t));
  s.bf16_ref.resize(rows * K);
  for (size_t i = 0; i < rows * K; ++i) {
    float exact = v[i];
    if (t == k::DType::F32) {
      std::memcpy(&s.bytes[4 * i], &v[i], 4);
    } else {
      const uint16_t h = t == k::DType::BF16 ? k::f32_to_bf16(v[i]) : k::f32_to_f16(v[i]);
      std::memcpy(&s.bytes[2 * i], &h, 2);
      exact = t == k::DType::BF16 ? k::bf16_to_f32(h) : k::f16_to_f32(h);
    }
    s.bf16_ref[i] = k::bf16_to_f32(k::f32_to_bf16(exact));
  }
  return s;
}

k::PackedWeight pack(const std::vector<Source>& srcs, size_t K) {
  std::vector<k::WeightSource> ws;
  for (const auto& s : srcs) ws.push_back({s.bytes.data(), s.t, s.rows});
  return k::PackedWeight::pack(ws, K);
}

// Restores the best SIMD path when a test forced the portable one.
struct PathGuard {
  explicit PathGuard(const char* name) { ok = k::set_simd_path(name); }
  ~PathGuard() { k::set_simd_path("avx512"); }
  bool ok;
};

#define SKIP_WITHOUT_BF16()                                                              \
  do {                                                                                   \
    if (!k::cpu_has_avx512_bf16()) {                                                     \
      std::printf("skipping: the CPU lacks avx512_bf16, only the portable path runs\n"); \
      GTEST_SKIP() << "CPU lacks avx512_bf16";                                           \
    }                                                                                    \
  } while (0)

// y vs a double-precision reference from the bf16-rounded x and W: only fp32
// accumulation error is allowed ((K + 2) ulps of the sum of |terms|).
void check_against_reference(k::ThreadPool& pool, size_t M, size_t K,
                             const std::vector<std::pair<k::DType, size_t>>& parts, bool bias,
                             size_t ldx_extra = 0, size_t ldy_extra = 0) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " K=" << K << " parts=" << parts.size()
                                  << " bias=" << bias << " path=" << k::simd_name());
  std::vector<Source> srcs;
  size_t N = 0;
  uint32_t seed = static_cast<uint32_t>(M * 131 + K * 7 + parts.size());
  for (auto [t, rows] : parts) {
    srcs.push_back(make_source(t, rows, K, ++seed));
    N += rows;
  }
  const k::PackedWeight w = pack(srcs, K);
  ASSERT_EQ(w.N(), N);
  ASSERT_EQ(w.K(), K);
  EXPECT_EQ(w.bytes(), (N + 15) / 16 * ((K + 1) / 2) * 64);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(w.data()) % 64, 0u);

  const size_t ldx = K + ldx_extra, ldy = N + ldy_extra;
  const auto x = random_vec(M * ldx, seed + 100);
  const auto b = random_vec(N, seed + 200);
  const float sentinel = 12345.f;
  std::vector<float> y(M * ldy, sentinel);
  k::GemmScratch scratch;
  k::gemm_bf16(pool, x.data(), M, ldx, w, bias ? b.data() : nullptr, y.data(), ldy, scratch);

  std::vector<const float*> wrow(N);
  for (size_t n = 0, s = 0, r = 0; n < N; ++n, ++r) {
    while (r >= srcs[s].rows) {
      ++s;
      r = 0;
    }
    wrow[n] = srcs[s].bf16_ref.data() + r * K;
  }
  for (size_t m = 0; m < M; ++m) {
    for (size_t n = 0; n < N; ++n) {
      double s = bias ? b[n] : 0.0, mag = bias ? std::fabs(b[n]) : 0.0;
      for (size_t i = 0; i < K; ++i) {
        const double term = double(k::bf16_to_f32(k::f32_to_bf16(x[m * ldx + i]))) * wrow[n][i];
        s += term;
        mag += std::fabs(term);
      }
      const double tol = double(K + 2) * std::ldexp(1.0, -24) * mag + 1e-30;
      ASSERT_NEAR(y[m * ldy + n], s, tol) << "m=" << m << " n=" << n;
    }
    for (size_t n = N; n < ldy; ++n) ASSERT_EQ(y[m * ldy + n], sentinel) << "wrote past N";
  }
}

void run_reference_suite() {
  k::ThreadPool pool(2);
  const k::DType F32 = k::DType::F32, BF16 = k::DType::BF16, F16 = k::DType::F16;
  // N and K tails, single rows up to batches past the decode/prefill switch.
  for (size_t M : {1, 2, 5, 7, 8, 9, 16, 31, 70})
    for (size_t K : {1, 2, 3, 31, 64, 257})
      for (size_t N : {1, 15, 16, 17, 70, 200})
        check_against_reference(pool, M, K, {{BF16, N}}, (M + K + N) % 2 == 1);
  // Every source type and several sources side by side (boundaries inside a block).
  for (k::DType t : {F32, BF16, F16}) {
    check_against_reference(pool, 3, 129, {{t, 37}}, true);
    check_against_reference(pool, 40, 66, {{t, 37}}, false);
  }
  check_against_reference(pool, 4, 100, {{BF16, 40}, {F32, 9}, {F16, 23}}, true);
  check_against_reference(pool, 70, 101, {{F16, 48}, {BF16, 8}, {BF16, 8}}, false);
  // Row strides; K past the prefill K block (1024) so the accumulators go through y.
  check_against_reference(pool, 6, 50, {{BF16, 33}}, true, 7, 5);
  check_against_reference(pool, 20, 50, {{BF16, 33}}, false, 3, 16);
  check_against_reference(pool, 1, 2100, {{BF16, 70}}, true);
  check_against_reference(pool, 25, 2101, {{F32, 70}}, true, 1, 3);
}

TEST(GemmBf16, MatchesReferenceAvx512) {
  SKIP_WITHOUT_BF16();
  ASSERT_STREQ(k::simd_name(), "avx512");
  run_reference_suite();
}

TEST(GemmBf16, MatchesReferenceGeneric) {
  PathGuard g("generic");
  ASSERT_TRUE(g.ok);
  run_reference_suite();
}

// Every row computed alone, inside batches of several sizes at several
// offsets, and with 1 or 2 threads gives the same bits.
void check_batch_invariance() {
  SCOPED_TRACE(k::simd_name());
  const size_t M = 513, K = 1101, N = 150;  // K past a K block; N with a 6-column tail
  const Source s = make_source(k::DType::BF16, N, K, 77);
  const k::PackedWeight w = pack({s}, K);
  const auto x = random_vec(M * K, 78);
  const auto b = random_vec(N, 79);
  k::GemmScratch scratch;
  k::ThreadPool pool1(1), pool2(2);

  std::vector<float> full(M * N);
  k::gemm_bf16(pool2, x.data(), M, K, w, b.data(), full.data(), N, scratch);
  std::vector<float> full1(M * N);
  k::gemm_bf16(pool1, x.data(), M, K, w, b.data(), full1.data(), N, scratch);
  ASSERT_EQ(0, std::memcmp(full.data(), full1.data(), full.size() * 4)) << "1 vs 2 threads";

  std::vector<float> y(M * N);
  for (size_t m = 0; m < M; m += 7) {
    k::gemm_bf16(pool2, x.data() + m * K, 1, K, w, b.data(), y.data(), N, scratch);
    ASSERT_EQ(0, std::memcmp(y.data(), full.data() + m * N, N * 4)) << "row " << m << " alone";
  }
  for (size_t Mb : {2, 3, 6, 7, 8, 9, 17, 64, 100})
    for (size_t off : {size_t{0}, size_t{1}, size_t{5}, M - Mb}) {
      for (k::ThreadPool* pool : {&pool1, &pool2}) {
        k::gemm_bf16(*pool, x.data() + off * K, Mb, K, w, b.data(), y.data(), N, scratch);
        ASSERT_EQ(0, std::memcmp(y.data(), full.data() + off * N, Mb * N * 4))
            << "batch of " << Mb << " at " << off << " threads " << pool->size();
      }
    }
}

TEST(GemmBf16, BitwiseBatchInvarianceAvx512) {
  SKIP_WITHOUT_BF16();
  check_batch_invariance();
}

TEST(GemmBf16, BitwiseBatchInvarianceGeneric) {
  PathGuard g("generic");
  ASSERT_TRUE(g.ok);
  check_batch_invariance();
}

TEST(GemmBf16, NoWritesWithZeroRows) {
  const Source s = make_source(k::DType::BF16, 20, 8, 5);
  const k::PackedWeight w = pack({s}, 8);
  k::ThreadPool pool(2);
  k::GemmScratch scratch;
  float y = 7.f;
  k::gemm_bf16(pool, nullptr, 0, 8, w, nullptr, &y, 20, scratch);
  EXPECT_EQ(y, 7.f);
  EXPECT_THROW(k::PackedWeight::pack({}, 8), std::invalid_argument);
}

// Not a requirement, only reported: whether the portable emulation of
// vdpbf16ps reproduces the hardware bits.
TEST(GemmBf16, ReportsGenericVsAvx512Bits) {
  SKIP_WITHOUT_BF16();
  const size_t M = 9, K = 515, N = 40;
  const Source s = make_source(k::DType::BF16, N, K, 3);
  const k::PackedWeight w = pack({s}, K);
  const auto x = random_vec(M * K, 4);
  k::ThreadPool pool(2);
  k::GemmScratch scratch;
  std::vector<float> ya(M * N), yg(M * N);
  k::gemm_bf16(pool, x.data(), M, K, w, nullptr, ya.data(), N, scratch);
  {
    PathGuard g("generic");
    k::gemm_bf16(pool, x.data(), M, K, w, nullptr, yg.data(), N, scratch);
  }
  size_t same = 0;
  for (size_t i = 0; i < ya.size(); ++i) same += std::memcmp(&ya[i], &yg[i], 4) == 0;
  std::printf("generic path reproduces %zu of %zu avx512-bf16 results bitwise\n", same, ya.size());
}

// ------------------------------------------------------------ thread pool

TEST(ThreadPoolSpin, EveryTaskOnceBackToBack) {
  k::ThreadPool pool(2);
  std::vector<std::atomic<int>> hits(97);
  for (int rep = 0; rep < 3000; ++rep) {  // back-to-back calls hit the spinning workers
    const size_t n = 1 + static_cast<size_t>(rep) % 97;
    pool.parallel_for(n, [&](size_t i, int w) {
      if (w < 0 || w >= 2) std::abort();
      hits[i].fetch_add(1, std::memory_order_relaxed);
    });
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].exchange(0), 1) << rep << " " << i;
  }
}

TEST(ThreadPoolSpin, WakesAfterSleeping) {
  k::ThreadPool pool(3);
  for (int rep = 0; rep < 3; ++rep) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // workers went to sleep
    std::atomic<int> count{0};
    std::atomic<int> mask{0};
    pool.parallel_for(300, [&](size_t, int w) {
      count++;
      mask |= 1 << w;
      std::this_thread::sleep_for(std::chrono::microseconds(50));
    });
    EXPECT_EQ(count.load(), 300);
    EXPECT_NE(mask.load() & ~1, 0) << "no worker thread took part";
  }
}

TEST(ThreadPoolSpin, ExceptionsPropagateAndPoolKeepsWorking) {
  k::ThreadPool pool(2);
  for (int rep = 0; rep < 50; ++rep) {
    EXPECT_THROW(pool.parallel_for(64,
                                   [&](size_t i, int) {
                                     if (i == static_cast<size_t>(rep) % 64)
                                       throw std::runtime_error("boom");
                                   }),
                 std::runtime_error);
    std::atomic<int> count{0};
    pool.parallel_for(64, [&](size_t, int) { count++; });
    ASSERT_EQ(count.load(), 64);
  }
}

TEST(ThreadPoolSpin, CallsFromSeveralThreadsAreSerialized) {
  k::ThreadPool pool(2);
  std::atomic<int> active[2] = {0, 0};
  std::atomic<int> overlap{0}, total{0};
  auto caller = [&](int c) {
    for (int rep = 0; rep < 200; ++rep)
      pool.parallel_for(8, [&](size_t, int) {
        active[c]++;
        if (active[1 - c].load() != 0) overlap++;  // a task of the other call is running
        total++;
        active[c]--;
      });
  };
  std::thread a(caller, 0), b(caller, 1);
  a.join();
  b.join();
  EXPECT_EQ(total.load(), 2 * 200 * 8);
  EXPECT_EQ(overlap.load(), 0);
}

}  // namespace
