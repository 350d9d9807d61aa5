// Host emulation of the CUDA plugin's weight-only quantized matmuls
// (plugins/cuda/src/kernels/quant_matmul.cuh) against a double-precision
// reference that dequantizes by ABI v1.4's formula
//   w[n][k] = scales[n][k / group] * q[n][k] + offsets[n][k / group]
// then multiplies. Scales are decoded for the reference with halo_kernels'
// conversions, not the kernels' own.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>
#include <vector>

#include "halo/kernels/dtype.h"
#include "kernels/emulate.h"
#include "kernels/quant_matmul.cuh"

namespace hk = halo::kernels;
namespace k = halo::cuda::k;

namespace {

struct Case {
  int qtype = k::kQuantInt8;
  int group = 0;  // 0: per channel (group = K)
  int scale_dtype = k::kScaleF32;
  bool offsets = false;
};

std::string describe(const Case& c, int M, int N, int K) {
  return std::string(c.qtype == k::kQuantInt8 ? "int8" : "uint4") + " group " +
         std::to_string(c.group ? c.group : K) +
         (c.scale_dtype == k::kScaleF32   ? " fp32"
          : c.scale_dtype == k::kScaleF16 ? " fp16"
                                          : " bf16") +
         " scales" + (c.offsets ? " + offsets" : "") + ", M=" + std::to_string(M) +
         " N=" + std::to_string(N) + " K=" + std::to_string(K);
}

// Scales or offsets stored in the case's dtype (bytes) and decoded back.
struct Stored {
  std::vector<uint8_t> bytes;
  std::vector<double> value;
};

Stored store(const std::vector<float>& f, int dtype) {
  Stored s;
  const size_t es = dtype == k::kScaleF32 ? 4 : 2;
  s.bytes.resize(f.size() * es);
  for (size_t i = 0; i < f.size(); ++i) {
    if (dtype == k::kScaleF32) {
      std::memcpy(&s.bytes[i * 4], &f[i], 4);
    } else {
      const uint16_t h = dtype == k::kScaleF16 ? hk::f32_to_f16(f[i]) : hk::f32_to_bf16(f[i]);
      std::memcpy(&s.bytes[i * 2], &h, 2);
    }
  }
  std::vector<float> back(f.size());
  const hk::DType dt = dtype == k::kScaleF32   ? hk::DType::F32
                       : dtype == k::kScaleF16 ? hk::DType::F16
                                               : hk::DType::BF16;
  hk::to_f32(s.bytes.data(), dt, back.data(), back.size());
  s.value.assign(back.begin(), back.end());
  return s;
}

// A random quantized [N, K] matrix and its dequantized values (double).
struct QMatrix {
  std::vector<uint8_t> values;
  Stored scales, offsets;
  std::vector<double> w;  // [N, K]
  k::QuantWeight view(const Case& c, int K) const {
    return {values.data(), scales.bytes.data(), c.offsets ? offsets.bytes.data() : nullptr,
            c.scale_dtype, c.group ? c.group : K};
  }
};

QMatrix make_weight(const Case& c, int N, int K, uint32_t seed) {
  std::mt19937 rng(seed);
  const int group = c.group ? c.group : K, G = K / group;
  const bool nib = c.qtype == k::kQuantUint4;
  QMatrix q;
  q.values.resize(static_cast<size_t>(N) * (nib ? K / 2 : K));
  std::uniform_int_distribution<int> byte(0, 255);
  for (auto& b : q.values) b = static_cast<uint8_t>(byte(rng));
  std::uniform_real_distribution<float> sd(0.002f, 0.05f), od(-0.2f, 0.2f);
  std::vector<float> s(static_cast<size_t>(N) * G), o(s.size());
  for (auto& v : s) v = sd(rng);
  for (auto& v : o) v = od(rng);
  q.scales = store(s, c.scale_dtype);
  q.offsets = store(o, c.scale_dtype);
  q.w.resize(static_cast<size_t>(N) * K);
  for (int n = 0; n < N; ++n)
    for (int kk = 0; kk < K; ++kk) {
      const size_t i = static_cast<size_t>(n) * K + kk, g = static_cast<size_t>(n) * G + kk / group;
      const int qv =
          nib ? (q.values[i / 2] >> (4 * (kk % 2))) & 0xf : static_cast<int8_t>(q.values[i]);
      q.w[i] = q.scales.value[g] * qv + (c.offsets ? q.offsets.value[g] : 0.0);
    }
  return q;
}

// Activations in T and their values as double.
template <class T>
void make_x(int M, int K, uint32_t seed, std::vector<T>& x, std::vector<double>& xd) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  x.resize(static_cast<size_t>(M) * K);
  xd.resize(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    x[i] = k::from_float<T>(d(rng));
    std::vector<float> f(1);
    if constexpr (std::is_same_v<T, float>) {
      f[0] = x[i];
    } else {
      hk::to_f32(&x[i].bits, hk::DType::BF16, f.data(), 1);
    }
    xd[i] = f[0];
  }
}

// y against the reference; error bound relative to sum_k |x w| (fp32
// accumulation of K products).
void check(const std::vector<float>& y, const std::vector<double>& xd, const std::vector<double>& w,
           int M, int N, int K, const std::string& what) {
  double worst = 0;
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) {
      double ref = 0, mag = 0;
      for (int kk = 0; kk < K; ++kk) {
        const double p = xd[static_cast<size_t>(m) * K + kk] * w[static_cast<size_t>(n) * K + kk];
        ref += p, mag += std::fabs(p);
      }
      const float got = y[static_cast<size_t>(m) * N + n];
      ASSERT_FALSE(std::isnan(got)) << what << ": NaN at (" << m << ", " << n << ")";
      worst = std::max(worst, std::fabs(got - ref) / (mag + 1e-30));
    }
  EXPECT_LE(worst, 2e-6) << what;
}

template <class T, int Q>
void run_both(const Case& c, int M, int N, int K, uint32_t seed) {
  const std::string what = describe(c, M, N, K);
  SCOPED_TRACE(what);
  const QMatrix q = make_weight(c, N, K, seed);
  std::vector<T> x;
  std::vector<double> xd;
  make_x(M, K, seed + 1, x, xd);
  using Tiled = k::QuantTiledKernel<T, Q>;
  std::vector<float> y(static_cast<size_t>(M) * N, -7.f);
  k::emulate<Tiled>({x.data(), q.view(c, K), y.data(), M, N, K},
                    {k::ceil_div(N, Tiled::BN), k::ceil_div(M, Tiled::BM), 1}, Tiled::kThreads,
                    Tiled::smem_floats(), seed);
  check(y, xd, q.w, M, N, K, "tiled " + what);
  if (M > k::kQuantGemvMaxM) return;
  using Gemv = k::QuantGemvKernel<T, Q>;
  std::fill(y.begin(), y.end(), -7.f);
  k::emulate<Gemv>({x.data(), q.view(c, K), y.data(), M, N, K}, {k::ceil_div(N, 4), 1, 1}, 128,
                   Gemv::smem_floats(128), seed);
  check(y, xd, q.w, M, N, K, "gemv " + what);
}

template <class T>
void run_case(const Case& c, int M, int N, int K, uint32_t seed) {
  if (c.qtype == k::kQuantInt8)
    run_both<T, k::kQuantInt8>(c, M, N, K, seed);
  else
    run_both<T, k::kQuantUint4>(c, M, N, K, seed);
}

const Case kCases[] = {
    {k::kQuantInt8, 0, k::kScaleF32, false},     // per output channel
    {k::kQuantInt8, 32, k::kScaleF16, false},    //
    {k::kQuantInt8, 32, k::kScaleBf16, true},    //
    {k::kQuantUint4, 32, k::kScaleF16, false},   //
    {k::kQuantUint4, 32, k::kScaleF16, true},    // GPTQ / AWQ / Q4_K-like
    {k::kQuantUint4, 128, k::kScaleF32, false},  //
    {k::kQuantUint4, 128, k::kScaleF32, true},   //
    {k::kQuantUint4, 128, k::kScaleBf16, true},
};

TEST(CudaQuantMatmulEmulated, Fp32ActivationsEveryLayout) {
  uint32_t seed = 10;
  for (const Case& c : kCases)
    for (int M : {1, 7, 64}) run_case<float>(c, M, 101, 256, seed++);
}

TEST(CudaQuantMatmulEmulated, Bf16Activations) {
  uint32_t seed = 50;
  for (const Case& c : kCases)
    for (int M : {1, 7, 33}) run_case<k::bf16>(c, M, 70, 384, seed++);
}

// Group 16 and K not a multiple of the tiled kernel's K step (48 = 32 + 16):
// a K step spans two groups and ends past the matrix.
TEST(CudaQuantMatmulEmulated, SmallGroupsAndShortK) {
  run_case<float>({k::kQuantInt8, 16, k::kScaleF16, true}, 5, 67, 48, 90);
  run_case<float>({k::kQuantUint4, 16, k::kScaleF32, true}, 40, 3, 48, 91);
  run_case<float>({k::kQuantUint4, 0, k::kScaleF16, false}, 8, 129, 16, 92);
}

// Extreme codes: int8 -128 and 127, uint4 0 and 15, with the element order
// of the nibbles (2j low, 2j + 1 high) visible in the result.
TEST(CudaQuantMatmulEmulated, ExtremeCodesAndNibbleOrder) {
  const int K = 32, N = 2, M = 1;
  std::vector<float> x(K, 0.f);
  x[0] = 1.f, x[1] = 1000.f;
  const float s = 0.5f;
  std::vector<uint8_t> q8(static_cast<size_t>(N) * K, 0), q4(static_cast<size_t>(N) * K / 2, 0);
  q8[0] = 0x80, q8[1] = 0x7f;      // row 0: -128, 127
  q8[K] = 0x7f, q8[K + 1] = 0x80;  // row 1: 127, -128
  q4[0] = 0xf0;                    // row 0: elements 0 = 0, 1 = 15
  q4[K / 2] = 0x0f;                // row 1: elements 0 = 15, 1 = 0
  std::vector<float> scales(N, s), y(N);
  k::QuantWeight w{q8.data(), scales.data(), nullptr, k::kScaleF32, K};
  using G8 = k::QuantGemvKernel<float, k::kQuantInt8>;
  k::emulate<G8>({x.data(), w, y.data(), M, N, K}, {1, 1, 1}, 64, G8::smem_floats(64));
  EXPECT_EQ(y[0], s * (-128.f + 127.f * 1000.f));
  EXPECT_EQ(y[1], s * (127.f - 128.f * 1000.f));
  w.values = q4.data();
  using G4 = k::QuantGemvKernel<float, k::kQuantUint4>;
  k::emulate<G4>({x.data(), w, y.data(), M, N, K}, {1, 1, 1}, 64, G4::smem_floats(64));
  EXPECT_EQ(y[0], s * 15.f * 1000.f);
  EXPECT_EQ(y[1], s * 15.f);
}

}  // namespace
