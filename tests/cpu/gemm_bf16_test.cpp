// Tests of the packed bf16 matmul (gemm_bf16) and of the thread pool it runs on.
#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
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

// Turns the AMX path on or off for a scope (off: the AVX-512 path runs on an
// AMX host), then back to what it was.
struct AmxGuard {
  explicit AmxGuard(bool on) : was(std::strcmp(k::gemm_bf16_path(), "amx") == 0) {
    ok = k::set_gemm_bf16_amx(on);
  }
  ~AmxGuard() { k::set_gemm_bf16_amx(was); }
  bool was, ok;
};

#define SKIP_WITHOUT_AMX()                                                    \
  do {                                                                        \
    if (!k::cpu_has_amx_bf16() || !k::cpu_has_avx512_bf16()) {                \
      std::printf("skipping: the CPU (or the OS) gives no AMX-BF16 tiles\n"); \
      GTEST_SKIP() << "no AMX-BF16";                                          \
    }                                                                         \
  } while (0)

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
                                  << " bias=" << bias << " path=" << k::gemm_bf16_path());
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
  // k-pairs padded to a multiple of 16 (one AMX B tile, 1 KiB per block).
  EXPECT_EQ(w.bytes(), (N + 15) / 16 * (((K + 1) / 2 + 15) / 16) * 1024);
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
  AmxGuard off(false);
  ASSERT_STREQ(k::gemm_bf16_path(), "avx512-bf16");
  run_reference_suite();
}

TEST(GemmBf16, MatchesReferenceAmx) {
  SKIP_WITHOUT_AMX();
  AmxGuard on(true);
  ASSERT_TRUE(on.ok);
  ASSERT_STREQ(k::gemm_bf16_path(), "amx");
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
  SCOPED_TRACE(k::gemm_bf16_path());
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
  AmxGuard off(false);
  check_batch_invariance();
}

TEST(GemmBf16, BitwiseBatchInvarianceAmx) {
  SKIP_WITHOUT_AMX();
  AmxGuard on(true);
  ASSERT_TRUE(on.ok);
  check_batch_invariance();
}

TEST(GemmBf16, BitwiseBatchInvarianceGeneric) {
  PathGuard g("generic");
  ASSERT_TRUE(g.ok);
  check_batch_invariance();
}

// Every M from 1 to 20, 33 and 64 (one A tile, two, several row groups, row
// blocks over threads) gives each row bitwise its M=1 result, with odd K, N
// not a multiple of 16, a bias, row strides and 1-3 threads.
void check_every_m_matches_rows(size_t K, size_t N) {
  SCOPED_TRACE(testing::Message() << k::gemm_bf16_path() << " K=" << K << " N=" << N);
  const size_t ldx = K + 3, ldy = N + 5, rows = 70;
  const Source s = make_source(k::DType::BF16, N, K, static_cast<uint32_t>(K + N));
  const k::PackedWeight w = pack({s}, K);
  const auto x = random_vec(rows * ldx, 11);
  const auto b = random_vec(N, 12);
  k::GemmScratch scratch;
  k::ThreadPool pool1(1), pool2(2), pool3(3);
  std::vector<float> ref(rows * N);
  for (size_t m = 0; m < rows; ++m)
    k::gemm_bf16(pool1, x.data() + m * ldx, 1, ldx, w, b.data(), ref.data() + m * N, N, scratch);
  std::vector<size_t> ms;
  for (size_t m = 1; m <= 20; ++m) ms.push_back(m);
  ms.push_back(33);
  ms.push_back(64);
  const float sentinel = -777.f;
  for (size_t M : ms)
    for (k::ThreadPool* pool : {&pool1, &pool2, &pool3}) {
      const size_t off = (M * 5) % (rows - M + 1);
      std::vector<float> y(M * ldy, sentinel);
      k::gemm_bf16(*pool, x.data() + off * ldx, M, ldx, w, b.data(), y.data(), ldy, scratch);
      for (size_t m = 0; m < M; ++m) {
        ASSERT_EQ(0, std::memcmp(y.data() + m * ldy, ref.data() + (off + m) * N, N * 4))
            << "M=" << M << " row " << m << " (x row " << off + m << ") threads " << pool->size();
        for (size_t n = N; n < ldy; ++n) ASSERT_EQ(y[m * ldy + n], sentinel) << "wrote past N";
      }
    }
}

void run_every_m_suite() {
  check_every_m_matches_rows(1101, 150);  // past the AVX K block; 6-column tail; rows split
  check_every_m_matches_rows(33, 647);    // K ends inside the second 32-k chunk
  check_every_m_matches_rows(2048, 40);
  check_every_m_matches_rows(4500, 33);  // past the AMX K block (4096): C goes through y
}

TEST(GemmBf16, EveryMBitwiseRowByRowAmx) {
  SKIP_WITHOUT_AMX();
  AmxGuard on(true);
  ASSERT_STREQ(k::gemm_bf16_path(), "amx");
  run_every_m_suite();
}

TEST(GemmBf16, EveryMBitwiseRowByRowAvx512) {
  SKIP_WITHOUT_BF16();
  AmxGuard off(false);
  ASSERT_STREQ(k::gemm_bf16_path(), "avx512-bf16");
  run_every_m_suite();
}

TEST(GemmBf16, EveryMBitwiseRowByRowGeneric) {
  PathGuard g("generic");
  ASSERT_TRUE(g.ok);
  ASSERT_STREQ(k::gemm_bf16_path(), "generic");
  run_every_m_suite();
}

// AMX and vdpbf16ps round differently, but both only by fp32 accumulation
// error: within 2 (K + 2) ulps of the sum of |terms| of each other.
TEST(GemmBf16, AmxMatchesAvx512WithinTolerance) {
  SKIP_WITHOUT_AMX();
  const size_t M = 21, K = 2051, N = 70;
  const Source s = make_source(k::DType::BF16, N, K, 21);
  const k::PackedWeight w = pack({s}, K);
  const auto x = random_vec(M * K, 22);
  const auto b = random_vec(N, 23);
  k::ThreadPool pool(2);
  k::GemmScratch scratch;
  std::vector<float> ya(M * N), yv(M * N);
  {
    AmxGuard on(true);
    ASSERT_STREQ(k::gemm_bf16_path(), "amx");
    k::gemm_bf16(pool, x.data(), M, K, w, b.data(), ya.data(), N, scratch);
  }
  {
    AmxGuard off(false);
    ASSERT_STREQ(k::gemm_bf16_path(), "avx512-bf16");
    k::gemm_bf16(pool, x.data(), M, K, w, b.data(), yv.data(), N, scratch);
  }
  size_t same = 0;
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      double mag = std::fabs(b[n]);
      for (size_t i = 0; i < K; ++i)
        mag +=
            std::fabs(double(k::bf16_to_f32(k::f32_to_bf16(x[m * K + i]))) * s.bf16_ref[n * K + i]);
      const double tol = 2.0 * double(K + 2) * std::ldexp(1.0, -24) * mag;
      ASSERT_NEAR(ya[m * N + n], yv[m * N + n], tol) << "m=" << m << " n=" << n;
      same += std::memcmp(&ya[m * N + n], &yv[m * N + n], 4) == 0;
    }
  std::printf("amx reproduces %zu of %zu avx512-bf16 results bitwise\n", same, ya.size());
}

// With identity weights y = bf16(x): the activations are rounded to nearest
// even exactly as f32_to_bf16 on every path (K = 37: a vector tail and, on
// AMX, a second 32-k chunk; ties and values next to them).
void check_activation_rounding() {
  SCOPED_TRACE(k::gemm_bf16_path());
  const size_t M = 50, K = 37;
  std::vector<float> eye(K * K, 0.f);
  for (size_t i = 0; i < K; ++i) eye[i * K + i] = 1.f;
  const k::PackedWeight w = k::PackedWeight::pack({{eye.data(), k::DType::F32, K}}, K);
  std::mt19937 rng(5);
  std::vector<float> x(M * K);
  for (size_t i = 0; i < x.size(); ++i) {
    uint32_t u = (rng() & 0x807fffffu) | ((100u + rng() % 56u) << 23);  // normal, any sign
    if (i % 3 == 0) u = (u & 0xffff0000u) | 0x8000u;                    // a tie
    if (i % 3 == 1) u = (u & 0xffff0000u) | (0x7fffu + rng() % 3u);
    std::memcpy(&x[i], &u, 4);
  }
  k::ThreadPool pool(2);
  k::GemmScratch scratch;
  std::vector<float> y(M * K);
  k::gemm_bf16(pool, x.data(), M, K, w, nullptr, y.data(), K, scratch);
  for (size_t i = 0; i < x.size(); ++i) ASSERT_EQ(y[i], k::bf16_to_f32(k::f32_to_bf16(x[i]))) << i;
}

TEST(GemmBf16, ActivationsRoundToNearestEven) {
  check_activation_rounding();
  if (k::cpu_has_avx512_bf16()) {
    AmxGuard off(false);
    check_activation_rounding();
  }
  PathGuard g("generic");
  check_activation_rounding();
}

TEST(GemmBf16, AmxForcedOffFallsBack) {
  SKIP_WITHOUT_BF16();
  {
    AmxGuard off(false);
    EXPECT_TRUE(off.ok);
    EXPECT_STREQ(k::gemm_bf16_path(), "avx512-bf16");
  }
  {
    PathGuard g("generic");  // the portable path turns AMX off too
    AmxGuard on(true);
    EXPECT_FALSE(on.ok);
    EXPECT_STREQ(k::gemm_bf16_path(), "generic");
  }
}

// ------------------------------------------------------------ in a fresh process
// Tests that need a process where nothing has run a gemm yet: the parent test
// runs this binary again with one GemmBf16Child test and an environment.
bool child_only() { return std::getenv("HALO_GEMM_TEST_CHILD") != nullptr; }

// Runs this test binary with `env` and the one test `name`; true if it passed.
bool run_child(const std::string& env, const char* name) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n <= 0) return false;
  exe[n] = 0;
  const std::string cmd = "env HALO_GEMM_TEST_CHILD=1 " + env + " '" + exe +
                          "' --gtest_filter=GemmBf16Child." + name + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return false;
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  const int rc = pclose(p);
  const bool passed = rc == 0 && out.find("[  PASSED  ] 1 test.") != std::string::npos &&
                      out.find("SKIPPED") == std::string::npos;
  if (!passed) std::printf("child %s (%s) failed:\n%s\n", name, env.c_str(), out.c_str());
  return passed;
}

TEST(GemmBf16Child, PathIs) {
  if (!child_only()) GTEST_SKIP() << "run by GemmBf16.EnvironmentSelectsPath";
  ASSERT_NE(std::getenv("HALO_GEMM_TEST_WANT"), nullptr);
  EXPECT_STREQ(k::gemm_bf16_path(), std::getenv("HALO_GEMM_TEST_WANT"));
}

TEST(GemmBf16, EnvironmentSelectsPath) {
  SKIP_WITHOUT_AMX();
  EXPECT_TRUE(run_child("HALO_GEMM_TEST_WANT=amx", "PathIs"));
  EXPECT_TRUE(run_child("HALO_GEMM_AMX=1 HALO_GEMM_TEST_WANT=amx", "PathIs"));
  EXPECT_TRUE(run_child("HALO_GEMM_AMX=0 HALO_GEMM_TEST_WANT=avx512-bf16", "PathIs"));
  EXPECT_TRUE(run_child("HALO_KERNELS_SIMD=generic HALO_GEMM_TEST_WANT=generic", "PathIs"));
}

// The tile permission is asked for at the first gemm, after the pool's
// workers started: they must be able to use the tiles too (a worker without
// it would die of SIGILL), and give the caller's bits.
TEST(GemmBf16Child, TilesOnWorkersStartedBeforePermission) {
  if (!child_only()) GTEST_SKIP() << "run by GemmBf16.AmxOnPoolWorkersStartedFirst";
  k::ThreadPool pool(2);
  std::atomic<bool> worker_ran{false};
  while (!worker_ran.load())  // worker 1 is up and running
    pool.parallel_for(4, [&](size_t, int w) {
      if (w == 1) worker_ran = true;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  ASSERT_STREQ(k::gemm_bf16_path(), "amx");  // asks for the permission now
  const size_t M = 5, K = 300, N = 40;
  const Source s = make_source(k::DType::BF16, N, K, 31);
  const k::PackedWeight w = pack({s}, K);
  const auto x = random_vec(M * K, 32);
  k::ThreadPool caller_only(1);
  k::GemmScratch scratch;
  std::vector<float> ref(M * N), y(M * N, 0.f);
  k::gemm_bf16(caller_only, x.data(), M, K, w, nullptr, ref.data(), N, scratch);
  std::atomic<bool> done{false};
  while (!done.load())
    pool.parallel_for(4, [&](size_t, int wk) {
      if (wk == 1 && !done.exchange(true)) {
        k::ThreadPool inner(1);  // runs on this worker thread
        k::GemmScratch sc;
        k::gemm_bf16(inner, x.data(), M, K, w, nullptr, y.data(), N, sc);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    });
  EXPECT_EQ(0, std::memcmp(y.data(), ref.data(), y.size() * 4));
  // And the pool's own split of a larger call.
  std::vector<float> y2(M * N);
  k::gemm_bf16(pool, x.data(), M, K, w, nullptr, y2.data(), N, scratch);
  EXPECT_EQ(0, std::memcmp(y2.data(), ref.data(), y2.size() * 4));
}

TEST(GemmBf16, AmxOnPoolWorkersStartedFirst) {
  SKIP_WITHOUT_AMX();
  EXPECT_TRUE(run_child("", "TilesOnWorkersStartedBeforePermission"));
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
  AmxGuard off(false);
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
