// Tests of the quantized matmul (gemm_q) against a double-precision reference
// written here from the formulas of device_abi.h (weights) and gemm_q.h
// (activation quantization), on the VNNI and the portable path.
#include "halo/kernels/gemm_q.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace k = halo::kernels;

namespace {

// One quantized source [rows, K] with its bytes as the ABI gives them.
struct QSrc {
  k::QType type;
  size_t group, rows, K;
  k::DType sdt;
  std::vector<uint8_t> values, scales, offsets;  // offsets empty: symmetric
  k::QuantSource view() const {
    k::QuantSource s;
    s.type = type;
    s.group = group;
    s.rows = rows;
    s.values = values.data();
    s.scales = scales.data();
    s.offsets = offsets.empty() ? nullptr : offsets.data();
    s.scale_dtype = sdt;
    return s;
  }
  // Element (n, k) by the device_abi.h formula, in double; with f16 = true,
  // the scales and offsets rounded to fp16 as the packer may (gemm_q.h).
  double w(size_t n, size_t kk, bool f16 = false) const {
    auto r = [f16](double v) {
      return f16 ? k::f16_to_f32(k::f32_to_f16(static_cast<float>(v))) : v;
    };
    const size_t gi = n * (K / group) + kk / group;
    double q;
    if (type == k::QType::INT8) {
      q = static_cast<int8_t>(values[n * K + kk]);
    } else {
      q = (values[n * K / 2 + kk / 2] >> (4 * (kk & 1))) & 15;
    }
    const double o = offsets.empty() ? 0.0 : r(scale_at(offsets, gi));
    return r(scale_at(scales, gi)) * q + o;
  }
  double scale_at(const std::vector<uint8_t>& a, size_t i) const {
    if (sdt == k::DType::F32) {
      float f;
      std::memcpy(&f, &a[4 * i], 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, &a[2 * i], 2);
    return sdt == k::DType::F16 ? k::f16_to_f32(h) : k::bf16_to_f32(h);
  }
};

void put_scale(std::vector<uint8_t>& a, k::DType t, size_t i, float v) {
  if (t == k::DType::F32) {
    std::memcpy(&a[4 * i], &v, 4);
  } else {
    const uint16_t h = t == k::DType::F16 ? k::f32_to_f16(v) : k::f32_to_bf16(v);
    std::memcpy(&a[2 * i], &h, 2);
  }
}

QSrc make_src(k::QType type, size_t group, size_t rows, size_t K, k::DType sdt, bool offsets,
              uint32_t seed) {
  std::mt19937 rng(seed);
  QSrc s{type, group, rows, K, sdt, {}, {}, {}};
  if (type == k::QType::INT8) {
    s.values.resize(rows * K);
    std::uniform_int_distribution<int> d(-128, 127);
    for (auto& v : s.values) v = static_cast<uint8_t>(static_cast<int8_t>(d(rng)));
  } else {
    s.values.resize(rows * K / 2);
    std::uniform_int_distribution<int> d(0, 255);
    for (auto& v : s.values) v = static_cast<uint8_t>(d(rng));
  }
  const size_t ng = rows * (K / group);
  std::uniform_real_distribution<float> sd(0.002f, 0.03f), od(-0.1f, 0.1f);
  s.scales.resize(ng * k::dtype_size(sdt));
  for (size_t i = 0; i < ng; ++i) put_scale(s.scales, sdt, i, sd(rng));
  if (offsets) {
    s.offsets.resize(ng * k::dtype_size(sdt));
    for (size_t i = 0; i < ng; ++i) put_scale(s.offsets, sdt, i, od(rng));
  }
  return s;
}

k::PackedQWeight pack(const std::vector<QSrc>& srcs) {
  std::vector<k::QuantSource> v;
  for (const auto& s : srcs) v.push_back(s.view());
  return k::PackedQWeight::pack(v, srcs.at(0).K);
}

std::vector<float> random_x(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& e : v) e = d(rng);
  return v;
}

// The activation quantization as documented in gemm_q.h, written independently.
struct QuantRow {
  std::vector<double> deq;   // xs * xq per element
  std::vector<double> half;  // xs / 2 per element: the bound of |x - deq|
};
QuantRow quantize_ref(const float* x, size_t K, size_t B) {
  QuantRow r{std::vector<double>(K), std::vector<double>(K)};
  for (size_t b = 0; b < K / B; ++b) {
    float amax = 0.f;
    for (size_t i = 0; i < B; ++i) amax = std::max(amax, std::fabs(x[b * B + i]));
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    for (size_t i = 0; i < B; ++i) {
      float v = std::nearbyint(x[b * B + i] * id);
      v = std::min(127.f, std::max(-127.f, v));
      r.deq[b * B + i] = static_cast<double>(d) * v;
      r.half[b * B + i] = d / 2.0;
    }
  }
  return r;
}

// Whether packing rounds the sources' scales and offsets to fp16 (gemm_q.h):
// groups of at most 128, not every value exact in fp16 or in bf16, every one 0
// or a normal fp16 magnitude.
bool packs_rounded(const std::vector<QSrc>& srcs) {
  bool f16 = true, bf16 = true, normal = true;
  for (const auto& s : srcs)
    for (const auto* a : {&s.scales, &s.offsets})
      for (size_t i = 0; i < a->size() / k::dtype_size(s.sdt); ++i) {
        const auto v = static_cast<float>(s.scale_at(*a, i));
        f16 = f16 && k::f16_to_f32(k::f32_to_f16(v)) == v;
        bf16 = bf16 && k::bf16_to_f32(k::f32_to_bf16(v)) == v;
        normal = normal && (v == 0.f || (std::fabs(v) >= 0x1p-14f && std::fabs(v) <= 65504.f));
      }
  return srcs.at(0).group <= 128 && !f16 && !bf16 && normal;
}

// Every path this machine can run.
std::vector<const char*> paths() {
  std::vector<const char*> p{"portable", "portable-baseline"};
  if (k::cpu_has_avx512_vnni()) p.insert(p.end(), {"vnni", "vnni-nogfni"});
  return p;
}

struct PathGuard {
  explicit PathGuard(const char* name) { ok = k::set_gemm_q_path(name); }
  ~PathGuard() { k::set_gemm_q_path(k::cpu_has_avx512_vnni() ? "vnni" : "portable"); }
  bool ok;
};

struct Case {
  k::QType type;
  size_t group, K;
  k::DType sdt;
  bool offsets;
};

std::string name(const Case& c) {
  return std::string(c.type == k::QType::INT8 ? "int8" : "uint4") + " g" + std::to_string(c.group) +
         " K" + std::to_string(c.K) + " " + k::dtype_name(c.sdt) + (c.offsets ? " +offsets" : "");
}

// y from gemm_q (strided x and y, bias) vs the references, for one path.
std::vector<float> run_and_check(const Case& c, size_t M, const char* path, int threads) {
  PathGuard g(path);
  EXPECT_TRUE(g.ok) << path;
  // Three sources side by side, N = 37 (not a multiple of 16).
  std::vector<QSrc> srcs;
  uint32_t seed = static_cast<uint32_t>(c.K * 7 + c.group + (c.offsets ? 1000 : 0));
  for (size_t rows : {20, 13, 4})
    srcs.push_back(make_src(c.type, c.group, rows, c.K, c.sdt, c.offsets, seed++));
  const auto w = pack(srcs);
  const size_t N = w.N(), K = c.K, ldx = K + 3, ldy = N + 5;
  EXPECT_EQ(N, 37u);
  EXPECT_EQ(w.K(), K);
  EXPECT_EQ(w.type(), c.type);
  EXPECT_EQ(w.group(), c.group);
  const auto x = random_x(M * ldx, static_cast<uint32_t>(M + K));
  const auto bias = random_x(N, 99);
  std::vector<float> y(M * ldy, -7.f);
  k::ThreadPool pool(threads);
  k::GemmQScratch scratch;
  k::gemm_q(pool, x.data(), M, ldx, w, bias.data(), y.data(), ldy, scratch);

  const size_t B = c.group % 32 == 0 ? 32 : 16;
  const bool rounded = packs_rounded(srcs);
  std::vector<std::pair<const QSrc*, size_t>> col;
  for (const auto& s : srcs)
    for (size_t r = 0; r < s.rows; ++r) col.push_back({&s, r});
  for (size_t m = 0; m < M; ++m) {
    const QuantRow q = quantize_ref(x.data() + m * ldx, K, B);
    for (size_t n = 0; n < N; ++n) {
      double ref = bias[n], abs_terms = std::fabs(bias[n]), ref_f = bias[n], abs_f = 0, bound = 0;
      for (size_t kk = 0; kk < K; ++kk) {
        const double wv = col[n].first->w(col[n].second, kk, rounded);
        ref += wv * q.deq[kk];
        abs_terms += std::fabs(wv * q.deq[kk]);
        ref_f += wv * x[m * ldx + kk];
        abs_f += std::fabs(wv * x[m * ldx + kk]);
        bound += std::fabs(wv) * q.half[kk];
      }
      const double got = y[m * ldy + n];
      const std::string where = name(c) + " path " + path + " M " + std::to_string(M) + " m " +
                                std::to_string(m) + " n " + std::to_string(n);
      // Same int8 activations: only fp32 summation order differs.
      if (std::fabs(got - ref) > 1e-5 * abs_terms + 1e-6) {
        ADD_FAILURE() << where << ": got " << got << " want " << ref;
        return {};
      }
      // Unquantized fp32 activations: within the rounding bound of x.
      if (std::fabs(got - ref_f) > 1.001 * bound + 1e-5 * abs_f + 1e-6) {
        ADD_FAILURE() << where << ": got " << got << " fp32 reference " << ref_f;
        return {};
      }
    }
    for (size_t n = N; n < ldy; ++n)
      if (y[m * ldy + n] != -7.f) {
        ADD_FAILURE() << "wrote past N";
        return {};
      }
  }
  // Dense copy of the result rows.
  std::vector<float> out(M * N);
  for (size_t m = 0; m < M; ++m) std::memcpy(&out[m * N], &y[m * ldy], N * sizeof(float));
  return out;
}

const Case kCases[] = {
    {k::QType::INT8, 256, 256, k::DType::F32, false},  // per channel, fp32 scales
    {k::QType::INT8, 32, 256, k::DType::F16, false},
    {k::QType::INT8, 32, 192, k::DType::BF16, true},
    {k::QType::INT8, 16, 128, k::DType::F32, true},  // B = 16
    {k::QType::UINT4, 32, 256, k::DType::F16, true},
    {k::QType::UINT4, 32, 256, k::DType::BF16, false},
    {k::QType::UINT4, 128, 512, k::DType::F32, true},
    {k::QType::UINT4, 128, 384, k::DType::F16, false},
    {k::QType::UINT4, 16, 96, k::DType::BF16, true},  // B = 16
    {k::QType::INT8, 48, 96, k::DType::F16, true},    // B = 16: 32 does not divide 48
    {k::QType::UINT4, 80, 80, k::DType::F32, false},  // per channel, K = 80
};

TEST(GemmQ, MatchesReferenceOnEveryPath) {
  if (!k::cpu_has_avx512_vnni()) std::printf("note: the CPU lacks avx512_vnni, portable only\n");
  for (const Case& c : kCases)
    for (size_t M : {1, 3, 17, 64})
      for (const char* p : paths()) {
        SCOPED_TRACE(name(c) + " M " + std::to_string(M) + " " + p);
        run_and_check(c, M, p, 2);
        if (HasFailure()) return;
      }
}

TEST(GemmQ, PathsGiveTheSameBits) {
  if (!k::cpu_has_avx512_vnni()) GTEST_SKIP() << "CPU lacks avx512_vnni";  // all paths below
  for (const Case& c : kCases)
    for (size_t M : {1, 5, 17}) {
      const auto a = run_and_check(c, M, "portable", 2);
      for (const char* p : {"portable-baseline", "vnni", "vnni-nogfni"}) {
        const auto b = run_and_check(c, M, p, 2);
        ASSERT_FALSE(HasFailure());
        ASSERT_EQ(a.size(), b.size());
        ASSERT_EQ(0, std::memcmp(a.data(), b.data(), a.size() * sizeof(float)))
            << name(c) << " M " << M << " " << p;
      }
    }
}

// Row results do not depend on M, the row's place or the number of threads.
TEST(GemmQ, BatchInvariant) {
  for (const char* p : paths()) {
    PathGuard g(p);
    for (const Case& c : {kCases[1], kCases[4], kCases[6]}) {
      std::vector<QSrc> srcs{make_src(c.type, c.group, 70, c.K, c.sdt, c.offsets, 5)};
      const auto w = pack(srcs);
      const size_t N = w.N(), K = c.K;
      k::ThreadPool pool1(1), pool2(2);
      k::GemmQScratch s1, s2;
      for (size_t M : {2, 4, 5, 17, 64}) {
        const auto x = random_x(M * K, static_cast<uint32_t>(M));
        std::vector<float> yb(M * N), yb1(M * N), yr(N);
        k::gemm_q(pool2, x.data(), M, K, w, nullptr, yb.data(), N, s2);
        k::gemm_q(pool1, x.data(), M, K, w, nullptr, yb1.data(), N, s1);
        ASSERT_EQ(0, std::memcmp(yb.data(), yb1.data(), yb.size() * sizeof(float)))
            << p << " threads 1 vs 2, M " << M;
        for (size_t m = 0; m < M; ++m) {
          k::gemm_q(pool2, x.data() + m * K, 1, K, w, nullptr, yr.data(), N, s2);
          ASSERT_EQ(0, std::memcmp(yr.data(), yb.data() + m * N, N * sizeof(float)))
              << p << " " << name(c) << " row " << m << " of " << M;
        }
      }
    }
  }
}

// fp32 scales that are fp16 values are packed as fp16: fewer bytes, same results.
TEST(GemmQ, Fp16ExactScalesPackSmaller) {
  auto a = make_src(k::QType::UINT4, 32, 32, 256, k::DType::F16, true, 3);
  QSrc b = a;
  b.sdt = k::DType::F32;
  b.scales.resize(a.scales.size() * 2);
  b.offsets.resize(a.offsets.size() * 2);
  for (size_t i = 0; i < a.scales.size() / 2; ++i) {
    put_scale(b.scales, k::DType::F32, i, static_cast<float>(a.scale_at(a.scales, i)));
    put_scale(b.offsets, k::DType::F32, i, static_cast<float>(a.scale_at(a.offsets, i)));
  }
  const auto wa = pack({a}), wb = pack({b});
  EXPECT_EQ(wa.bytes(), wb.bytes());
  // 32 x 256 4-bit values + fp16 scale and offset per group of 32.
  EXPECT_EQ(wa.bytes(), 32u * 128 + 32u * 8 * 4);
  const auto x = random_x(3 * 256, 1);
  std::vector<float> ya(3 * 32), yb(3 * 32);
  k::ThreadPool pool(2);
  k::GemmQScratch s;
  k::gemm_q(pool, x.data(), 3, 256, wa, nullptr, ya.data(), 32, s);
  k::gemm_q(pool, x.data(), 3, 256, wb, nullptr, yb.data(), 32, s);
  EXPECT_EQ(0, std::memcmp(ya.data(), yb.data(), ya.size() * sizeof(float)));
}

// Groups of up to 128 with fp32 scales that are no fp16 values: rounded to
// fp16 (the same bits as an fp16 source of the rounded values), unless one
// lies outside fp16's normal range; larger groups keep fp32.
TEST(GemmQ, SmallGroupScalesRoundToFp16) {
  const auto c = make_src(k::QType::UINT4, 32, 32, 256, k::DType::F32, true, 3);
  QSrc h = c;  // the same values rounded to fp16
  h.sdt = k::DType::F16;
  h.scales.resize(c.scales.size() / 2);
  h.offsets.resize(c.offsets.size() / 2);
  for (size_t i = 0; i < h.scales.size() / 2; ++i) {
    put_scale(h.scales, k::DType::F16, i, static_cast<float>(c.scale_at(c.scales, i)));
    put_scale(h.offsets, k::DType::F16, i, static_cast<float>(c.scale_at(c.offsets, i)));
  }
  ASSERT_TRUE(packs_rounded({c}));
  const auto wc = pack({c}), wh = pack({h});
  EXPECT_EQ(wc.bytes(), 32u * 128 + 32u * 8 * 4);
  EXPECT_EQ(wc.bytes(), wh.bytes());
  const auto x = random_x(5 * 256, 2);
  std::vector<float> yc(5 * 32), yh(5 * 32);
  k::ThreadPool pool(2);
  k::GemmQScratch s;
  k::gemm_q(pool, x.data(), 5, 256, wc, nullptr, yc.data(), 32, s);
  k::gemm_q(pool, x.data(), 5, 256, wh, nullptr, yh.data(), 32, s);
  EXPECT_EQ(0, std::memcmp(yc.data(), yh.data(), yc.size() * sizeof(float)));

  QSrc tiny = c;  // one scale below fp16's normal range: fp32 kept
  put_scale(tiny.scales, k::DType::F32, 17, 1e-6f);
  EXPECT_FALSE(packs_rounded({tiny}));
  EXPECT_EQ(pack({tiny}).bytes(), 32u * 128 + 32u * 8 * 8);
  const auto big = make_src(k::QType::UINT4, 256, 32, 256, k::DType::F32, true, 3);
  EXPECT_FALSE(packs_rounded({big}));  // group 256: fp32 metadata is small already
  EXPECT_EQ(pack({big}).bytes(), 32u * 128 + 32u * 1 * 8);
}

TEST(GemmQ, ZeroBlocksAndZeroRows) {
  for (const char* p : paths()) {
    PathGuard g(p);
    auto s = make_src(k::QType::INT8, 32, 16, 64, k::DType::F16, true, 8);
    const auto w = pack({s});
    std::vector<float> x(2 * 64, 0.f), y(2 * 16, 1.f);
    for (size_t i = 32; i < 64; ++i) x[i] = 0.5f;  // row 0: a zero block, then a constant one
    k::ThreadPool pool(2);
    k::GemmQScratch sc;
    k::gemm_q(pool, x.data(), 2, 64, w, nullptr, y.data(), 16, sc);
    for (size_t n = 0; n < 16; ++n) {
      double ref = 0;
      for (size_t kk = 32; kk < 64; ++kk) ref += 0.5 * s.w(n, kk);
      EXPECT_NEAR(y[n], ref, 1e-5) << p;
      EXPECT_EQ(y[16 + n], 0.f) << p;
    }
  }
}

TEST(GemmQ, Dequantize) {
  for (const Case& c : kCases) {
    const auto s = make_src(c.type, c.group, 5, c.K, c.sdt, c.offsets, 21);
    std::vector<float> d(5 * c.K);
    k::dequantize(s.view(), c.K, d.data());
    for (size_t n = 0; n < 5; ++n)
      for (size_t kk = 0; kk < c.K; ++kk)
        ASSERT_NEAR(d[n * c.K + kk], s.w(n, kk), 1e-6 * (1 + std::fabs(s.w(n, kk)))) << name(c);
  }
}

TEST(GemmQ, PackErrors) {
  const auto a = make_src(k::QType::INT8, 32, 4, 64, k::DType::F16, false, 1);
  const auto u = make_src(k::QType::UINT4, 32, 4, 64, k::DType::F16, false, 1);
  const auto g16 = make_src(k::QType::INT8, 16, 4, 64, k::DType::F16, false, 1);
  EXPECT_THROW(pack({a, u}), std::invalid_argument);    // mixed types
  EXPECT_THROW(pack({a, g16}), std::invalid_argument);  // mixed groups
  auto bad = a.view();
  bad.group = 24;  // not a multiple of 16
  EXPECT_THROW(k::PackedQWeight::pack({bad}, 48), std::invalid_argument);
  bad.group = 0;
  EXPECT_THROW(k::PackedQWeight::pack({bad}, 64), std::invalid_argument);
  EXPECT_THROW(k::PackedQWeight::pack({a.view()}, 48), std::invalid_argument);  // 32 !| 48
  EXPECT_THROW(k::PackedQWeight::pack({a.view()}, 0), std::invalid_argument);
  EXPECT_THROW(k::PackedQWeight::pack({}, 64), std::invalid_argument);
  auto null_vals = a.view();
  null_vals.values = nullptr;
  EXPECT_THROW(k::PackedQWeight::pack({null_vals}, 64), std::invalid_argument);
  auto bad_type = a.view();
  bad_type.type = static_cast<k::QType>(3);
  EXPECT_THROW(k::PackedQWeight::pack({bad_type}, 64), std::invalid_argument);
  EXPECT_NO_THROW(pack({a, a}));
}

TEST(GemmQ, PathSelection) {
  EXPECT_FALSE(k::set_gemm_q_path("nonsense"));
  EXPECT_TRUE(k::set_gemm_q_path("portable"));
  EXPECT_STREQ(k::gemm_q_path(), "portable");
  EXPECT_EQ(k::set_gemm_q_path("vnni"), k::cpu_has_avx512_vnni());
  EXPECT_STREQ(k::gemm_q_path(), k::cpu_has_avx512_vnni() ? "vnni" : "portable");
  EXPECT_TRUE(k::set_gemm_q_path("portable-baseline"));
  EXPECT_STREQ(k::gemm_q_path(), "portable-baseline");
  EXPECT_EQ(k::set_gemm_q_path("vnni-nogfni"), k::cpu_has_avx512_vnni());
  if (k::cpu_has_avx512_vnni()) {
    EXPECT_STREQ(k::gemm_q_path(), "vnni-nogfni");
  }
  k::set_gemm_q_path(k::cpu_has_avx512_vnni() ? "vnni" : "portable");
}

}  // namespace
