// halo_onednn: the oneDNN bf16 Linear against a double-precision reference,
// its primitive cache, what it does for batch invariance, and the peak
// measurement. Everything skips (with the reason) where oneDNN cannot run bf16
// natively.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "halo/kernels/dtype.h"
#include "halo/kernels/thread_pool.h"
#include "halo/onednn/onednn.h"

namespace {

using halo::kernels::DType;
using halo::kernels::WeightSource;
namespace k = halo::kernels;

#define SKIP_IF_UNAVAILABLE()                                                                      \
  do {                                                                                             \
    if (!halo::onednn::available())                                                                \
      GTEST_SKIP() << "oneDNN has no native bf16 matmul here (impl: '" << halo::onednn::isa_name() \
                   << "'); needs avx512_core_bf16 or AMX";                                         \
  } while (0)

float round_bf16(float f) { return k::bf16_to_f32(k::f32_to_bf16(f)); }

std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(n);
  for (float& f : v) f = dist(rng);
  return v;
}

// One weight source with its own storage and its values as bf16-rounded floats.
struct Source {
  DType dtype;
  size_t rows;
  std::vector<uint8_t> bytes;
  std::vector<float> rounded;  // [rows, K], what the matmul must use
};

Source make_source(DType dtype, size_t rows, size_t K, uint32_t seed) {
  Source s{dtype, rows, {}, {}};
  const std::vector<float> v = random_floats(rows * K, seed);
  s.rounded.resize(v.size());
  s.bytes.resize(v.size() * k::dtype_size(dtype));
  for (size_t i = 0; i < v.size(); ++i) {
    switch (dtype) {
      case DType::F32:
        std::memcpy(s.bytes.data() + 4 * i, &v[i], 4);
        s.rounded[i] = round_bf16(v[i]);
        break;
      case DType::BF16: {
        const uint16_t h = k::f32_to_bf16(v[i]);
        std::memcpy(s.bytes.data() + 2 * i, &h, 2);
        s.rounded[i] = k::bf16_to_f32(h);
        break;
      }
      case DType::F16: {
        const uint16_t h = k::f32_to_f16(v[i]);
        std::memcpy(s.bytes.data() + 2 * i, &h, 2);
        s.rounded[i] = round_bf16(k::f16_to_f32(h));
        break;
      }
    }
  }
  return s;
}

struct Case {
  size_t M, K, ldx_pad, ldy_pad;
  std::vector<std::pair<DType, size_t>> sources;
  bool bias;
};

void check_against_reference(const Case& c) {
  std::vector<Source> srcs;
  std::vector<WeightSource> ws;
  std::vector<float> w;  // [N, K] rounded
  uint32_t seed = 11;
  for (auto [dtype, rows] : c.sources) {
    srcs.push_back(make_source(dtype, rows, c.K, seed++));
  }
  for (const Source& s : srcs) {
    ws.push_back({s.bytes.data(), s.dtype, s.rows});
    w.insert(w.end(), s.rounded.begin(), s.rounded.end());
  }
  const size_t N = w.size() / c.K;
  halo::onednn::Linear lin(ws, c.K);
  ASSERT_EQ(lin.N(), N);
  ASSERT_EQ(lin.K(), c.K);
  EXPECT_GE(lin.weight_bytes(), N * c.K * 2);

  const size_t ldx = c.K + c.ldx_pad, ldy = N + c.ldy_pad;
  const std::vector<float> x = random_floats(c.M * ldx, 99);
  const std::vector<float> bias = random_floats(N, 7);
  std::vector<float> y(c.M * ldy, -12345.0f);
  lin.forward(x.data(), c.M, ldx, c.bias ? bias.data() : nullptr, y.data(), ldy);

  for (size_t m = 0; m < c.M; ++m) {
    for (size_t n = 0; n < N; ++n) {
      double ref = c.bias ? bias[n] : 0.0, mag = std::fabs(ref);
      for (size_t kk = 0; kk < c.K; ++kk) {
        const double p = static_cast<double>(round_bf16(x[m * ldx + kk])) * w[n * c.K + kk];
        ref += p;
        mag += std::fabs(p);
      }
      // fp32 accumulation of exact bf16 products: |error| <= ~K * 2^-24 * sum|terms|.
      const double tol = 2.0 * static_cast<double>(c.K + 1) * std::ldexp(1.0, -24) * mag + 1e-30;
      ASSERT_NEAR(y[m * ldy + n], ref, tol)
          << "m=" << m << " n=" << n << " M=" << c.M << " K=" << c.K << " N=" << N;
    }
    for (size_t n = N; n < ldy; ++n) ASSERT_EQ(y[m * ldy + n], -12345.0f) << "wrote past N";
  }
}

TEST(OneDnn, ReportsIsa) {
  const std::string isa = halo::onednn::isa_name();
  std::printf("oneDNN bf16 matmul impl: '%s', available=%d, threads=%d\n", isa.c_str(),
              halo::onednn::available() ? 1 : 0, halo::onednn::num_threads());
  if (halo::onednn::available()) {
    EXPECT_FALSE(isa.empty());
  }
}

TEST(OneDnn, LinearMatchesReferenceSmallTails) {
  SKIP_IF_UNAVAILABLE();
  check_against_reference({1, 7, 0, 0, {{DType::F32, 3}}, false});
  check_against_reference({3, 33, 5, 3, {{DType::F32, 100}}, true});
  check_against_reference(
      {17, 130, 1, 0, {{DType::BF16, 64}, {DType::F16, 17}, {DType::F32, 31}}, true});
}

TEST(OneDnn, LinearMatchesReferenceLarger) {
  SKIP_IF_UNAVAILABLE();
  check_against_reference({64, 512, 0, 0, {{DType::BF16, 1000}}, false});
  check_against_reference({70, 515, 3, 9, {{DType::F16, 128}, {DType::BF16, 129}}, true});
  check_against_reference({2, 2048, 0, 0, {{DType::BF16, 256}, {DType::F32, 256}}, true});
}

TEST(OneDnn, LinearSurvivesMove) {
  SKIP_IF_UNAVAILABLE();
  const Source s = make_source(DType::F32, 9, 16, 3);
  halo::onednn::Linear a({{s.bytes.data(), s.dtype, s.rows}}, 16);
  halo::onednn::Linear b = std::move(a);
  const std::vector<float> x = random_floats(16, 1);
  std::vector<float> y(9);
  b.forward(x.data(), 1, 16, nullptr, y.data(), 9);
  for (size_t n = 0; n < 9; ++n) {
    double ref = 0;
    for (size_t kk = 0; kk < 16; ++kk) ref += double(round_bf16(x[kk])) * s.rounded[n * 16 + kk];
    EXPECT_NEAR(y[n], ref, 1e-4);
  }
}

TEST(OneDnn, PrimitiveCacheCreatesOncePerShape) {
  SKIP_IF_UNAVAILABLE();
  const size_t K = 64, N = 48;
  const Source s = make_source(DType::BF16, N, K, 5);
  halo::onednn::Linear lin({{s.bytes.data(), s.dtype, s.rows}}, K);
  EXPECT_EQ(lin.primitives_created(), 0u);
  const std::vector<float> x = random_floats(9 * K, 2), bias = random_floats(N, 3);
  std::vector<float> y(9 * N);
  lin.forward(x.data(), 5, K, nullptr, y.data(), N);
  EXPECT_EQ(lin.primitives_created(), 1u);
  for (int i = 0; i < 5; ++i) lin.forward(x.data(), 5, K, nullptr, y.data(), N);
  EXPECT_EQ(lin.primitives_created(), 1u);
  lin.forward(x.data(), 9, K, nullptr, y.data(), N);
  EXPECT_EQ(lin.primitives_created(), 2u);
  lin.forward(x.data(), 5, K, bias.data(), y.data(), N);
  EXPECT_EQ(lin.primitives_created(), 3u);
  // Row strides do not make new primitives (a strided output goes through scratch).
  std::vector<float> y2(5 * (N + 4));
  lin.forward(x.data(), 5, K, bias.data(), y2.data(), N + 4);
  lin.forward(x.data(), 9, K, nullptr, y.data(), N);
  lin.forward(x.data(), 5, K, nullptr, y.data(), N);
  EXPECT_EQ(lin.primitives_created(), 3u);
}

// oneDNN does not promise batch invariance; this documents what it does here:
// the same x row at several places in batches of several sizes, compared
// bitwise with the M = 1 result. Only closeness is asserted.
TEST(OneDnn, BatchInvarianceIsDocumented) {
  SKIP_IF_UNAVAILABLE();
  struct Shape {
    size_t K, N;
  };
  for (const Shape sh : {Shape{2048, 1024}, Shape{5632, 512}, Shape{300, 200}}) {
    const Source s = make_source(DType::BF16, sh.N, sh.K, 17);
    halo::onednn::Linear lin({{s.bytes.data(), s.dtype, s.rows}}, sh.K);
    const std::vector<float> row = random_floats(sh.K, 23);
    std::vector<float> alone(sh.N);
    lin.forward(row.data(), 1, sh.K, nullptr, alone.data(), sh.N);
    for (const size_t M : {1, 4, 17, 64, 512}) {
      const std::vector<float> x0 = random_floats(M * sh.K, 29 + static_cast<uint32_t>(M));
      for (const size_t pos : {size_t{0}, M / 2, M - 1}) {
        if (M == 1 && pos > 0) break;
        std::vector<float> x = x0;
        std::memcpy(x.data() + pos * sh.K, row.data(), sh.K * sizeof(float));
        std::vector<float> y(M * sh.N);
        lin.forward(x.data(), M, sh.K, nullptr, y.data(), sh.N);
        size_t diff = 0;
        double max_rel = 0;
        for (size_t n = 0; n < sh.N; ++n) {
          const float a = alone[n], b = y[pos * sh.N + n];
          if (std::memcmp(&a, &b, sizeof a) != 0) ++diff;
          max_rel = std::max(max_rel, std::fabs(double(a) - b) / (std::fabs(double(a)) + 1e-3));
          ASSERT_NEAR(b, a, 1e-3 * (std::fabs(a) + 1.0)) << "n=" << n;
        }
        std::printf(
            "batch invariance K=%zu N=%zu M=%zu pos=%zu: %s (%zu/%zu differ, max rel %.2g)\n", sh.K,
            sh.N, M, pos, diff == 0 ? "bitwise identical" : "DIFFERS", diff, sh.N, max_rel);
      }
    }
    // The same row with a single OpenMP thread (oneDNN plans its split per thread count).
    const int threads = halo::onednn::num_threads();
    halo::onednn::set_num_threads(1);
    std::vector<float> one(sh.N);
    lin.forward(row.data(), 1, sh.K, nullptr, one.data(), sh.N);
    halo::onednn::set_num_threads(threads);
    const bool same = std::memcmp(one.data(), alone.data(), sh.N * sizeof(float)) == 0;
    std::printf("thread invariance K=%zu N=%zu M=1, 1 vs %d threads: %s\n", sh.K, sh.N, threads,
                same ? "bitwise identical" : "DIFFERS");
    for (size_t n = 0; n < sh.N; ++n)
      ASSERT_NEAR(one[n], alone[n], 1e-3 * (std::fabs(alone[n]) + 1.0));
  }
}

// Not a check: how long a ThreadPool parallel_for takes alone and right after
// a oneDNN call (libgomp's idle threads may still spin on the cores), in
// this process's OMP_WAIT_POLICY / GOMP_SPINCOUNT. Run with
// --gtest_also_run_disabled_tests, under several environments.
TEST(OneDnn, DISABLED_OpenMpSpinVersusThreadPool) {
  SKIP_IF_UNAVAILABLE();
  const size_t K = 2048, N = 2048;
  const Source s = make_source(DType::BF16, N, K, 1);
  halo::onednn::Linear lin({{s.bytes.data(), s.dtype, s.rows}}, K);
  k::ThreadPool pool(halo::onednn::num_threads());
  const std::vector<float> x = random_floats(K, 2);
  std::vector<float> y(N);
  std::vector<std::vector<float>> bufs(8, std::vector<float>(4096, 1.0f));
  auto pool_step = [&] {
    pool.parallel_for(bufs.size(), [&](size_t t, int) {
      float acc = 0;
      for (float& v : bufs[t]) acc = v = acc * 0.5f + v;
    });
  };
  auto dnn_step = [&] { lin.forward(x.data(), 1, K, nullptr, y.data(), N); };
  auto now = [] { return std::chrono::steady_clock::now(); };
  auto us = [](auto d) { return std::chrono::duration<double, std::micro>(d).count(); };
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  for (int i = 0; i < 50; ++i) dnn_step(), pool_step();
  std::vector<double> pool_alone, dnn_alone, dnn_mixed, pool_mixed;
  for (int i = 0; i < 300; ++i) {
    const auto a = now();
    pool_step();
    pool_alone.push_back(us(now() - a));
  }
  for (int i = 0; i < 300; ++i) {
    const auto a = now();
    dnn_step();
    dnn_alone.push_back(us(now() - a));
  }
  for (int i = 0; i < 300; ++i) {
    const auto a = now();
    dnn_step();
    const auto b = now();
    pool_step();
    dnn_mixed.push_back(us(b - a));
    pool_mixed.push_back(us(now() - b));
  }
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  std::printf(
      "OMP_WAIT_POLICY=%s GOMP_SPINCOUNT=%s, median us: alone pool %.1f, oneDNN %.1f; "
      "interleaved pool %.1f, oneDNN %.1f\n",
      policy ? policy : "(unset)", spin ? spin : "(unset)", median(pool_alone), median(dnn_alone),
      median(pool_mixed), median(dnn_mixed));
}

TEST(OneDnn, OmpEnvHelperRespectsUserSettings) {
  // Whatever the environment, the helper never overrides a user's choice.
  const char* spin = std::getenv("GOMP_SPINCOUNT");
  const char* policy = std::getenv("OMP_WAIT_POLICY");
  const std::string before_spin = spin ? spin : "";
  const bool set = halo::onednn::apply_recommended_omp_env();
  if (spin != nullptr || policy != nullptr) {
    EXPECT_FALSE(set);
    EXPECT_EQ(before_spin, std::getenv("GOMP_SPINCOUNT") ? std::getenv("GOMP_SPINCOUNT") : "");
  } else {
    EXPECT_TRUE(set);
    ASSERT_NE(std::getenv("GOMP_SPINCOUNT"), nullptr);
    EXPECT_STREQ(std::getenv("GOMP_SPINCOUNT"), halo::onednn::kRecommendedGompSpinCount);
    ::unsetenv("GOMP_SPINCOUNT");
  }
  std::printf("OpenMP wait settings: %s\n", halo::onednn::spin_env().c_str());
}

TEST(OneDnn, PeakMeasurement) {
  SKIP_IF_UNAVAILABLE();
  const halo::onednn::Peak p = halo::onednn::measure_bf16_matmul_peak(0.01);
  std::printf("bf16 peak (tiny budget): %.1f GFLOP/s, impl %s, %zux%zux%zu, %.3f ms\n",
              p.flops_per_s / 1e9, p.impl.c_str(), p.m, p.n, p.k, p.seconds * 1e3);
  EXPECT_GT(p.flops_per_s, 0.0);
  EXPECT_GT(p.seconds, 0.0);
  EXPECT_FALSE(p.impl.empty());
  EXPECT_GT(p.m * p.n * p.k, 0u);
}

TEST(OneDnn, SetNumThreads) {
  SKIP_IF_UNAVAILABLE();
  const int before = halo::onednn::num_threads();
  halo::onednn::set_num_threads(1);
  EXPECT_EQ(halo::onednn::num_threads(), 1);
  check_against_reference({9, 100, 0, 0, {{DType::F32, 70}}, true});
  halo::onednn::set_num_threads(0);
  EXPECT_EQ(halo::onednn::num_threads(), before);
}

}  // namespace
