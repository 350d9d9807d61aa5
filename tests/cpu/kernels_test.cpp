// Unit tests of the shared host kernels (halo_kernels).
#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <stdexcept>

#include "halo/kernels/kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace k = halo::kernels;

namespace {

TEST(Convert, Bf16) {
  EXPECT_EQ(k::f32_to_bf16(1.0f), 0x3f80);
  EXPECT_EQ(k::f32_to_bf16(-2.0f), 0xc000);
  EXPECT_EQ(k::bf16_to_f32(0x3f80), 1.0f);
  // Round to nearest even: 1 + 2^-8 is halfway between 1 and 1 + 2^-7.
  EXPECT_EQ(k::f32_to_bf16(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(k::f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 0x3f82);
  EXPECT_TRUE(std::isnan(k::bf16_to_f32(k::f32_to_bf16(NAN))));
  EXPECT_EQ(k::bf16_to_f32(k::f32_to_bf16(INFINITY)), INFINITY);
}

TEST(Convert, F16KnownValues) {
  EXPECT_EQ(k::f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(k::f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(k::f16_to_f32(0x7bff), 65504.0f);
  EXPECT_EQ(k::f16_to_f32(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(k::f16_to_f32(0x03ff), std::ldexp(1023.0f, -24));
  EXPECT_EQ(k::f16_to_f32(0x7c00), INFINITY);
  EXPECT_TRUE(std::isnan(k::f16_to_f32(0x7e00)));
  EXPECT_EQ(k::f32_to_f16(65520.0f), 0x7c00);
  EXPECT_EQ(k::f32_to_f16(65519.0f), 0x7bff);
  EXPECT_EQ(k::f32_to_f16(std::ldexp(1.0f, -25)), 0x0000);          // tie -> even (0)
  EXPECT_EQ(k::f32_to_f16(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(k::f32_to_f16(std::ldexp(3.0f, -25)), 0x0002);          // 1.5 ulp tie -> even
  EXPECT_EQ(k::f32_to_f16(-0.0f), 0x8000);
}

TEST(Convert, VectorToF32MatchesScalar) {
  std::vector<uint16_t> all(0x10000 + 7);
  for (size_t i = 0; i < all.size(); ++i) all[i] = static_cast<uint16_t>(i * 40503u);  // all values, shuffled
  for (const char* path : {"generic", "avx512"}) {
    if (!k::set_simd_path(path)) continue;
    SCOPED_TRACE(path);
    for (size_t n : {size_t{1}, size_t{15}, size_t{17}, all.size()}) {
      std::vector<float> a(n), b(n);
      k::to_f32(all.data(), k::DType::BF16, a.data(), n);
      k::to_f32(all.data(), k::DType::F16, b.data(), n);
      for (size_t i = 0; i < n; ++i) {
        const float ra = k::bf16_to_f32(all[i]), rb = k::f16_to_f32(all[i]);
        ASSERT_TRUE(std::memcmp(&a[i], &ra, 4) == 0 || (std::isnan(a[i]) && std::isnan(ra))) << i;
        ASSERT_TRUE(std::memcmp(&b[i], &rb, 4) == 0 || (std::isnan(b[i]) && std::isnan(rb))) << i;
      }
    }
  }
}

TEST(Convert, F16ExhaustiveRoundTrip) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = k::f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(k::f16_to_f32(k::f32_to_f16(f))));
      continue;
    }
    ASSERT_EQ(k::f32_to_f16(f), h) << std::hex << h;
  }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

TEST(Convert, F16MatchesF16C) {
  if (!k::cpu_has_f16c()) GTEST_SKIP() << "no F16C";
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float a = k::f16_to_f32(static_cast<uint16_t>(h)), b = hw_f16_to_f32(static_cast<uint16_t>(h));
    if (std::isnan(b)) {
      EXPECT_TRUE(std::isnan(a));
    } else {
      ASSERT_EQ(std::memcmp(&a, &b, 4), 0) << std::hex << h;
    }
  }
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 200000; ++i) {
    uint32_t u = bits(rng);
    // Concentrate on the f16 range.
    if (i % 2) u = (u & 0x80ffffffu) | (static_cast<uint32_t>(100 + i % 45) << 23);
    float f;
    std::memcpy(&f, &u, 4);
    if (std::isnan(f)) continue;
    ASSERT_EQ(k::f32_to_f16(f), hw_f32_to_f16(f)) << f;
  }
}
#endif

std::vector<float> random_vec(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(-1.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

struct WeightsOf {
  std::vector<float> ref;  // rounded values
  std::vector<uint8_t> bytes;
};

WeightsOf make_weights(size_t n, k::DType t, uint32_t seed) {
  WeightsOf w;
  w.ref = random_vec(n, seed);
  w.bytes.resize(n * k::dtype_size(t));
  for (size_t i = 0; i < n; ++i) {
    if (t == k::DType::F32) {
      std::memcpy(&w.bytes[4 * i], &w.ref[i], 4);
    } else {
      const uint16_t h = t == k::DType::BF16 ? k::f32_to_bf16(w.ref[i]) : k::f32_to_f16(w.ref[i]);
      w.ref[i] = t == k::DType::BF16 ? k::bf16_to_f32(h) : k::f16_to_f32(h);
      std::memcpy(&w.bytes[2 * i], &h, 2);
    }
  }
  return w;
}

void check_matmul(k::ThreadPool& pool, size_t M, size_t K, size_t N, k::DType t, bool bias) {
  SCOPED_TRACE(testing::Message() << "M=" << M << " K=" << K << " N=" << N << " " << k::dtype_name(t));
  const auto x = random_vec(M * K, 1);
  const auto w = make_weights(N * K, t, 2);
  const auto b = random_vec(N, 3);
  std::vector<float> y(M * N, -1.f);
  k::matmul_nt(pool, x.data(), M, K, w.bytes.data(), t, N, bias ? b.data() : nullptr, y.data());
  for (size_t m = 0; m < M; ++m)
    for (size_t n = 0; n < N; ++n) {
      double s = bias ? b[n] : 0.0;
      for (size_t i = 0; i < K; ++i) s += double(x[m * K + i]) * w.ref[n * K + i];
      ASSERT_NEAR(y[m * N + n], s, 1e-5 * (1 + std::sqrt(double(K)))) << m << "," << n;
    }
}

TEST(Matmul, MatchesNaiveAllDtypesAndShapes) {
  k::ThreadPool pool(3);
  for (k::DType t : {k::DType::F32, k::DType::BF16, k::DType::F16})
    for (size_t M : {1, 3, 4, 37})
      for (size_t K : {1, 15, 16, 33, 64, 100})
        for (size_t N : {1, 5, 17, 70}) check_matmul(pool, M, K, N, t, (M + K + N) % 2 == 0);
}

TEST(Matmul, GenericPathMatchesNaive) {
  ASSERT_TRUE(k::set_simd_path("generic"));
  k::ThreadPool pool(2);
  for (k::DType t : {k::DType::F32, k::DType::BF16, k::DType::F16}) check_matmul(pool, 5, 47, 21, t, true);
  k::set_simd_path("avx512");  // back to the best path when available
}

TEST(Matmul, BitwiseIndependentOfThreadsAndTileConversion) {
  const size_t M = 70, K = 129, N = 83;
  const auto x = random_vec(M * K, 4);
  for (k::DType t : {k::DType::F32, k::DType::BF16, k::DType::F16}) {
    const auto w = make_weights(N * K, t, 5);
    std::vector<std::vector<float>> ys;
    for (int threads : {1, 2, 4}) {
      k::ThreadPool pool(threads);
      std::vector<float> y(M * N);
      k::matmul_nt(pool, x.data(), M, K, w.bytes.data(), t, N, nullptr, y.data());
      ys.push_back(y);
      // Row by row (M=1: in-register conversion) gives the same bits as the
      // converted-tile path used for M >= 16.
      std::vector<float> row(N);
      for (size_t m = 0; m < M; m += 13) {
        k::matmul_nt(pool, x.data() + m * K, 1, K, w.bytes.data(), t, N, nullptr, row.data());
        ASSERT_EQ(0, std::memcmp(row.data(), y.data() + m * N, N * 4)) << m;
      }
    }
    EXPECT_EQ(ys[0], ys[1]);
    EXPECT_EQ(ys[0], ys[2]);
  }
}

TEST(ThreadPool, RunsEveryTaskOnceAndPropagatesExceptions) {
  k::ThreadPool pool(3);
  EXPECT_EQ(pool.size(), 3);
  for (size_t n : {0, 1, 2, 5, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](size_t i, int w) {
      EXPECT_GE(w, 0);
      EXPECT_LT(w, 3);
      hits[i]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  EXPECT_THROW(pool.parallel_for(100, [](size_t i, int) {
    if (i == 42) throw std::runtime_error("boom");
  }),
               std::runtime_error);
  int count = 0;
  std::mutex mu;
  pool.parallel_for(10, [&](size_t, int) {
    std::lock_guard<std::mutex> l(mu);
    ++count;
  });
  EXPECT_EQ(count, 10);
}

TEST(Ops, RmsNormAndActivations) {
  const std::vector<float> x{1, -2, 3, 0.5f}, w{1, 2, 0.5f, 1};
  std::vector<float> out(4);
  k::rmsnorm(x.data(), w.data(), 4, 1e-6f, out.data());
  const double r = 1 / std::sqrt((1 + 4 + 9 + 0.25) / 4 + 1e-6);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] * r * w[i], 1e-6);
  std::vector<float> g{-1, 0, 2}, u{2, 3, 0.5f}, o(3);
  k::silu_mul(g.data(), u.data(), o.data(), 3);
  EXPECT_NEAR(o[0], -1 / (1 + std::exp(1.0)) * 2, 1e-6);
  EXPECT_NEAR(o[2], 2 / (1 + std::exp(-2.0)) * 0.5, 1e-6);
  k::gelu_tanh_mul(g.data(), u.data(), o.data(), 3);
  EXPECT_NEAR(o[2], 0.5 * 2 * (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (2 + 0.044715 * 8))) * 0.5, 1e-6);
}

TEST(Ops, Llama3InvFreq) {
  // Llama 3.1 8B: theta 500000, head_dim 128, factor 8, low 1, high 4, original 8192.
  k::RopeParams p;
  p.theta = 500000;
  p.scaling = k::RopeScaling::Llama3;
  p.factor = 8;
  p.low_freq_factor = 1;
  p.high_freq_factor = 4;
  p.original_max_position = 8192;
  std::vector<double> f(64), base(64);
  k::rope_inv_freq(p, 128, f.data());
  k::RopeParams plain = p;
  plain.scaling = k::RopeScaling::None;
  k::rope_inv_freq(plain, 128, base.data());
  for (int i = 0; i < 64; ++i) {
    const double wl = 2 * std::numbers::pi / base[i];
    if (wl < 8192.0 / 4) {
      EXPECT_DOUBLE_EQ(f[i], base[i]) << i;
    } else if (wl > 8192.0) {
      EXPECT_DOUBLE_EQ(f[i], base[i] / 8) << i;
    } else {
      EXPECT_LT(f[i], base[i]);
      EXPECT_GT(f[i], base[i] / 8);
    }
  }
  EXPECT_DOUBLE_EQ(f[0], 1.0);
}

TEST(Ops, PagedAttentionMatchesDense) {
  const int bs = 3, kvh = 2, hd = 8, n = 10, group = 2;
  const int32_t table[4] = {2, 0, 3, 1};
  std::vector<float> kc(4 * bs * kvh * hd), vc(kc.size());
  auto r = random_vec(kc.size() * 2, 9);
  std::copy(r.begin(), r.begin() + kc.size(), kc.begin());
  std::copy(r.begin() + kc.size(), r.end(), vc.begin());
  const auto q = random_vec(group * hd, 10);
  std::vector<float> scores(n), out(group * hd);
  k::PagedKV kv{kc.data(), vc.data(), bs, kvh, hd};
  const float scale = 1 / std::sqrt(float(hd));
  k::paged_attention(q.data(), group, kv, 1, table, n, scale, scores.data(), out.data());
  for (int g = 0; g < group; ++g) {
    std::vector<double> s(n);
    double mx = -1e30, sum = 0;
    for (int j = 0; j < n; ++j) {
      const float* kp = &kc[((table[j / bs] * bs + j % bs) * kvh + 1) * hd];
      double d = 0;
      for (int i = 0; i < hd; ++i) d += q[g * hd + i] * kp[i];
      s[j] = d * scale;
      mx = std::max(mx, s[j]);
    }
    for (auto& e : s) sum += (e = std::exp(e - mx));
    for (int i = 0; i < hd; ++i) {
      double o = 0;
      for (int j = 0; j < n; ++j) o += s[j] / sum * vc[((table[j / bs] * bs + j % bs) * kvh + 1) * hd + i];
      EXPECT_NEAR(out[g * hd + i], o, 1e-6);
    }
  }
}

}  // namespace
