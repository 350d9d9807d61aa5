// Tests of the CPU fast-path attention and fused elementwise kernels
// (halo/kernels/attention.h): accuracy against a dense double-precision
// attention and the scalar reference, bitwise batch invariance of the tiled
// kernel, the bf16 KV store, and the fused elementwise kernels against the
// scalar reference kernels of kernels.h, on both SIMD paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "halo/kernels/attention.h"
#include "halo/kernels/kernels.h"

namespace k = halo::kernels;

namespace {

// Restores the SIMD path a test switched.
struct PathGuard {
  std::string saved = k::simd_name();
  ~PathGuard() { k::set_simd_path(saved.c_str()); }
};

std::vector<const char*> paths() {
  std::vector<const char*> out;
  PathGuard g;
  for (const char* p : {"avx512", "generic"})
    if (k::set_simd_path(p)) out.push_back(p);
  return out;
}

// A paged cache of one layer with a shuffled block table; slots nobody wrote
// hold NaN so a kernel reading past a query's context is caught.
struct Cache {
  k::DType dtype;
  int32_t bs, kv_heads, hd;
  size_t num_blocks;
  std::vector<uint8_t> kbuf, vbuf;
  std::vector<int32_t> table;
  k::KvLayer kv;

  Cache(k::DType dt, int32_t block_size, int32_t heads, int32_t head_dim, size_t ctx, uint32_t seed)
      : dtype(dt), bs(block_size), kv_heads(heads), hd(head_dim) {
    const size_t used = (ctx + bs - 1) / bs;
    num_blocks = used + 3;
    const size_t elems = num_blocks * bs * kv_heads * hd;
    const size_t es = k::dtype_size(dt);
    kbuf.resize(elems * es);
    vbuf.resize(elems * es);
    if (dt == k::DType::F32) {
      std::vector<float> nan(elems, std::numeric_limits<float>::quiet_NaN());
      std::memcpy(kbuf.data(), nan.data(), kbuf.size());
      std::memcpy(vbuf.data(), nan.data(), vbuf.size());
    } else {
      std::vector<uint16_t> nan(elems, 0x7fc0);
      std::memcpy(kbuf.data(), nan.data(), kbuf.size());
      std::memcpy(vbuf.data(), nan.data(), vbuf.size());
    }
    std::vector<int32_t> perm(num_blocks);
    std::iota(perm.begin(), perm.end(), 0);
    std::mt19937 rng(seed);
    std::shuffle(perm.begin(), perm.end(), rng);
    table.assign(perm.begin(), perm.begin() + static_cast<std::ptrdiff_t>(used));
    kv = k::KvLayer{kbuf.data(), vbuf.data(), dt, bs, kv_heads, hd};
    std::normal_distribution<float> nd(0.f, 1.f);
    const size_t n = static_cast<size_t>(kv_heads) * hd;
    std::vector<float> kt(n), vt(n);
    for (size_t p = 0; p < ctx; ++p) {
      for (auto& x : kt) x = nd(rng);
      for (auto& x : vt) x = nd(rng);
      k::kv_store(kv, slot(p), kt.data(), vt.data());
    }
  }
  int64_t slot(size_t pos) const {
    return static_cast<int64_t>(table[pos / bs]) * bs + static_cast<int64_t>(pos % bs);
  }
  double read(const std::vector<uint8_t>& buf, size_t pos, int head, int d) const {
    const size_t e =
        static_cast<size_t>(slot(pos)) * kv_heads * hd + static_cast<size_t>(head) * hd + d;
    if (dtype == k::DType::F32) {
      float f;
      std::memcpy(&f, buf.data() + e * 4, 4);
      return f;
    }
    uint16_t h;
    std::memcpy(&h, buf.data() + e * 2, 2);
    return k::bf16_to_f32(h);
  }
};

// Dense softmax attention in double over the values stored in the cache.
void dense_attention(const Cache& c, const float* q, size_t q_stride, size_t n_q, size_t group,
                     int kv_head, int32_t ctx0, double scale, std::vector<double>& out) {
  const size_t hd = static_cast<size_t>(c.hd);
  out.assign(n_q * group * hd, 0.0);
  for (size_t i = 0; i < n_q; ++i) {
    const size_t lim = static_cast<size_t>(ctx0) + i;
    for (size_t g = 0; g < group; ++g) {
      const float* qh = q + i * q_stride + g * hd;
      std::vector<double> s(lim);
      double mx = -INFINITY;
      for (size_t j = 0; j < lim; ++j) {
        double acc = 0;
        for (size_t d = 0; d < hd; ++d)
          acc += qh[d] * c.read(c.kbuf, j, kv_head, static_cast<int>(d));
        s[j] = acc * scale;
        mx = std::max(mx, s[j]);
      }
      double sum = 0;
      for (auto& x : s) sum += (x = std::exp(x - mx));
      double* o = &out[(i * group + g) * hd];
      for (size_t j = 0; j < lim; ++j)
        for (size_t d = 0; d < hd; ++d)
          o[d] += s[j] / sum * c.read(c.vbuf, j, kv_head, static_cast<int>(d));
    }
  }
}

struct Shape {
  k::DType dtype;
  int32_t hd, bs, group;
  int32_t kv_heads;
  size_t ctx0, n_q;
  float qscale;
};

std::string name(const Shape& s) {
  return std::string(k::dtype_name(s.dtype)) + " hd=" + std::to_string(s.hd) +
         " bs=" + std::to_string(s.bs) + " group=" + std::to_string(s.group) +
         " ctx0=" + std::to_string(s.ctx0) + " n_q=" + std::to_string(s.n_q);
}

std::vector<float> random_q(size_t n, uint32_t seed, float scale) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, scale);
  std::vector<float> q(n);
  for (auto& x : q) x = nd(rng);
  return q;
}

void check_accuracy(const Shape& sh) {
  SCOPED_TRACE(name(sh));
  const size_t total = sh.ctx0 + sh.n_q - 1;
  Cache c(sh.dtype, sh.bs, sh.kv_heads, sh.hd, total, 17u + static_cast<uint32_t>(total));
  const size_t hd = static_cast<size_t>(sh.hd), group = static_cast<size_t>(sh.group);
  // q rows hold all query heads of the token (padding after them) like the engine.
  const size_t q_stride = group * hd * static_cast<size_t>(sh.kv_heads) + 3;
  const int kv_head = sh.kv_heads - 1;
  std::vector<float> q = random_q(sh.n_q * q_stride, 5u, sh.qscale);
  const float* qh = q.data() + static_cast<size_t>(kv_head) * group * hd;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<double> dense;
  dense_attention(c, qh, q_stride, sh.n_q, group, kv_head, static_cast<int32_t>(sh.ctx0), scale,
                  dense);

  const size_t out_stride = group * hd + 5;
  std::vector<float> ref(sh.n_q * out_stride, -7.f);
  k::paged_attention_reference(qh, q_stride, sh.n_q, group, c.kv, kv_head, c.table.data(),
                               static_cast<int32_t>(sh.ctx0), scale, ref.data(), out_stride);
  for (const char* p : paths()) {
    SCOPED_TRACE(p);
    PathGuard guard;
    k::set_simd_path(p);
    std::vector<float> out(sh.n_q * out_stride, -7.f);
    std::vector<float> scratch(k::attention_scratch_floats(sh.n_q, group, hd, sh.bs));
    k::paged_attention_tile(qh, q_stride, sh.n_q, group, c.kv, kv_head, c.table.data(),
                            static_cast<int32_t>(sh.ctx0), scale, out.data(), out_stride,
                            scratch.data());
    double worst = 0, worst_ref = 0;
    for (size_t i = 0; i < sh.n_q; ++i) {
      for (size_t j = group * hd; j < out_stride; ++j) ASSERT_EQ(out[i * out_stride + j], -7.f);
      for (size_t g = 0; g < group; ++g)
        for (size_t d = 0; d < hd; ++d) {
          const double want = dense[(i * group + g) * hd + d];
          const float got = out[i * out_stride + g * hd + d];
          const float r = ref[i * out_stride + g * hd + d];
          ASSERT_TRUE(std::isfinite(got)) << i << " " << g << " " << d;
          worst = std::max(worst, std::abs(got - want));
          worst_ref = std::max(worst_ref, std::abs(static_cast<double>(r) - want));
        }
    }
    EXPECT_LT(worst, 2e-5);
    EXPECT_LT(worst_ref, 2e-5);
  }
}

TEST(Attention, TileMatchesDenseAndReference) {
  for (k::DType dt : {k::DType::F32, k::DType::BF16}) {
    for (int32_t hd : {64, 128, 80, 34}) {
      for (int32_t bs : {16, 32, 7}) {
        for (int32_t group : {1, 4, 8}) {
          // decode at a few context lengths, including 1 and block boundaries
          for (size_t ctx : {size_t{1}, size_t(bs), size_t(bs) + 1, size_t{3} * bs - 1, size_t{50}})
            check_accuracy({dt, hd, bs, group, 2, ctx, 1, 1.f});
          // prefill from the start and a chunk in the middle
          check_accuracy({dt, hd, bs, group, 2, 1, 37, 1.f});
          check_accuracy({dt, hd, bs, group, 2, 23, 20, 2.f});
        }
      }
    }
  }
}

TEST(Attention, LongContext) {
  for (k::DType dt : {k::DType::F32, k::DType::BF16}) {
    check_accuracy({dt, 64, 16, 8, 4, 2100, 1, 1.f});
    check_accuracy({dt, 128, 32, 4, 2, 2049, 1, 3.f});
    check_accuracy({dt, 64, 16, 4, 2, 2030, 40, 1.f});
  }
}

TEST(Attention, PeakedSoftmax) {
  // Large scores: the running max changes often and exp underflows.
  for (k::DType dt : {k::DType::F32, k::DType::BF16}) {
    check_accuracy({dt, 64, 16, 4, 1, 1, 70, 8.f});
    check_accuracy({dt, 96, 16, 2, 1, 300, 1, 10.f});
  }
}

// Every query token gives bitwise the same result alone (decode) as inside
// any tile or chunk of a chunked prefill.
void check_invariance(k::DType dt, int32_t hd_i, int32_t bs, int32_t group_i) {
  SCOPED_TRACE(std::string(k::dtype_name(dt)) + " hd=" + std::to_string(hd_i) +
               " bs=" + std::to_string(bs) + " group=" + std::to_string(group_i));
  const size_t T = 75;
  const size_t hd = static_cast<size_t>(hd_i), group = static_cast<size_t>(group_i);
  Cache c(dt, bs, 1, hd_i, T, 99u);
  const size_t stride = group * hd;
  std::vector<float> q = random_q(T * stride, 7u, 2.f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<float> scratch(k::attention_scratch_floats(T, group, hd, bs));
  auto run = [&](size_t start, size_t n, float* out) {
    k::paged_attention_tile(q.data() + start * stride, stride, n, group, c.kv, 0, c.table.data(),
                            static_cast<int32_t>(start + 1), scale, out + start * stride, stride,
                            scratch.data());
  };
  for (const char* p : paths()) {
    SCOPED_TRACE(p);
    PathGuard guard;
    k::set_simd_path(p);
    std::vector<float> alone(T * stride);
    for (size_t t = 0; t < T; ++t) run(t, 1, alone.data());
    const std::vector<std::vector<size_t>> splits = {{0, T},
                                                     {0, 1, T},
                                                     {0, 16, 32, 48, 64, T},
                                                     {0, 17, 40, 41, 75},
                                                     {0, 5, 21, 22, 53, T},
                                                     {0, 3, 6, 9, 12, 15, 18, 30, 31, 63, T}};
    for (const auto& sp : splits) {
      std::vector<float> got(T * stride, 0.f);
      for (size_t s = 0; s + 1 < sp.size(); ++s) run(sp[s], sp[s + 1] - sp[s], got.data());
      for (size_t t = 0; t < T; ++t)
        ASSERT_EQ(std::memcmp(&got[t * stride], &alone[t * stride], stride * sizeof(float)), 0)
            << "token " << t << " split #" << (&sp - splits.data());
    }
  }
}

TEST(Attention, BatchInvariance) {
  for (k::DType dt : {k::DType::F32, k::DType::BF16})
    for (int32_t hd : {64, 80, 34})
      for (int32_t bs : {16, 32, 7})
        for (int32_t group : {1, 3, 8}) check_invariance(dt, hd, bs, group);
}

TEST(Attention, KvStoreRoundTrip) {
  const int32_t heads = 3, hd = 40, bs = 4;
  const size_t n = static_cast<size_t>(heads) * hd;
  std::vector<float> kt(n), vt(n);
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> bits;
  for (size_t i = 0; i < n; ++i) {
    kt[i] = k::bits_to_f32(bits(rng));
    vt[i] = std::ldexp(1.0f + static_cast<float>(i % 7) / 256.f, static_cast<int>(i % 40) - 20);
  }
  kt[0] = 1.0f + std::ldexp(1.0f, -8);  // ties
  kt[1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  kt[2] = INFINITY;
  kt[3] = -0.0f;
  kt[4] = std::ldexp(1.0f, -140);  // subnormal
  kt[5] = std::numeric_limits<float>::quiet_NaN();
  for (k::DType dt : {k::DType::F32, k::DType::BF16}) {
    const size_t es = k::dtype_size(dt);
    std::vector<uint8_t> kb(5 * bs * n * es, 0), vb(5 * bs * n * es, 0);
    const k::KvLayer kv{kb.data(), vb.data(), dt, bs, heads, hd};
    const int64_t slot = 2 * bs + 3;
    k::kv_store(kv, slot, kt.data(), vt.data());
    for (size_t i = 0; i < n; ++i) {
      const size_t e = static_cast<size_t>(slot) * n + i;
      if (dt == k::DType::F32) {
        EXPECT_EQ(std::memcmp(kb.data() + e * 4, &kt[i], 4), 0) << i;
        EXPECT_EQ(std::memcmp(vb.data() + e * 4, &vt[i], 4), 0) << i;
      } else {
        uint16_t hk, hv;
        std::memcpy(&hk, kb.data() + e * 2, 2);
        std::memcpy(&hv, vb.data() + e * 2, 2);
        EXPECT_EQ(hk, k::f32_to_bf16(kt[i])) << i;
        EXPECT_EQ(hv, k::f32_to_bf16(vt[i])) << i;
      }
    }
    // Nothing outside the slot is touched.
    size_t nonzero = 0;
    for (uint8_t b : kb) nonzero += b != 0;
    EXPECT_LE(nonzero, n * es);
  }
}

bool close(float got, float want, float rel, float abs_tol = 0.f) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= rel * std::abs(want) + abs_tol;
}

TEST(Elementwise, AddRmsnorm) {
  std::mt19937 rng(11);
  std::normal_distribution<float> nd(0.f, 2.f);
  for (const char* p : paths()) {
    SCOPED_TRACE(p);
    PathGuard guard;
    k::set_simd_path(p);
    for (size_t n : {size_t{1}, size_t{15}, size_t{16}, size_t{17}, size_t{33}, size_t{2048},
                     size_t{5632}, size_t{4099}}) {
      std::vector<float> x(n), delta(n), w(n);
      for (size_t i = 0; i < n; ++i) x[i] = nd(rng), delta[i] = nd(rng), w[i] = nd(rng);
      std::vector<float> want_x(x), want(n);
      for (size_t i = 0; i < n; ++i) want_x[i] += delta[i];
      k::rmsnorm(want_x.data(), w.data(), n, 1e-5f, want.data());
      std::vector<float> got_x(x), got(n);
      k::add_rmsnorm(got_x.data(), delta.data(), w.data(), n, 1e-5f, got.data());
      for (size_t i = 0; i < n; ++i) {
        ASSERT_EQ(got_x[i], want_x[i]) << n << " " << i;
        ASSERT_TRUE(close(got[i], want[i], 2e-6f))
            << n << " " << i << " " << got[i] << " " << want[i];
      }
      // no delta, in place
      std::vector<float> y(x), want2(n);
      k::rmsnorm(x.data(), w.data(), n, 1e-6f, want2.data());
      k::add_rmsnorm(y.data(), nullptr, w.data(), n, 1e-6f, y.data());
      for (size_t i = 0; i < n; ++i) ASSERT_TRUE(close(y[i], want2[i], 2e-6f)) << n << " " << i;
    }
  }
}

TEST(Elementwise, SiluMul) {
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> ud(-30.f, 30.f);
  std::vector<float> gate;
  for (int i = 0; i < 5000; ++i) gate.push_back(ud(rng));
  for (float x : {0.f,
                  -0.f,
                  1e-30f,
                  -1e-30f,
                  1e-3f,
                  -1e-3f,
                  0.5f,
                  -0.5f,
                  15.9f,
                  -15.9f,
                  80.f,
                  -80.f,
                  87.f,
                  -87.f,
                  88.5f,
                  -88.5f,
                  89.f,
                  -89.f,
                  100.f,
                  -100.f,
                  104.f,
                  -104.f,
                  1e4f,
                  -1e4f,
                  1e30f,
                  -1e30f,
                  std::numeric_limits<float>::max(),
                  -std::numeric_limits<float>::max()})
    gate.push_back(x);
  const size_t n = gate.size();
  std::vector<float> up(n);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (auto& u : up) u = nd(rng);
  up[n - 2] = 1.f;
  std::vector<float> want(n);
  k::silu_mul(gate.data(), up.data(), want.data(), n);
  for (const char* p : paths()) {
    SCOPED_TRACE(p);
    PathGuard guard;
    k::set_simd_path(p);
    for (size_t len : {n, size_t{7}, size_t{16}, size_t{31}}) {
      std::vector<float> got(len);
      k::silu_mul_fast(gate.data() + (n - len), up.data() + (n - len), got.data(), len);
      for (size_t i = 0; i < len; ++i) {
        const float w = want[n - len + i];
        ASSERT_TRUE(close(got[i], w, 5e-7f, 1e-37f))
            << "x=" << gate[n - len + i] << " got " << got[i] << " want " << w;
      }
    }
    // out aliasing gate; silu(100) = 100, silu(-100) = -0 (tiny)
    std::vector<float> g2 = {100.f, -100.f, 0.f, 1.f};
    std::vector<float> u2 = {1.f, 1.f, 1.f, 1.f};
    k::silu_mul_fast(g2.data(), u2.data(), g2.data(), g2.size());
    EXPECT_FLOAT_EQ(g2[0], 100.f);
    EXPECT_LE(std::abs(g2[1]), 1e-30f);
    EXPECT_EQ(g2[2], 0.f);
    EXPECT_NEAR(g2[3], 0.7310585786f, 1e-7f);
  }
}

TEST(Elementwise, RopeNeox) {
  std::mt19937 rng(13);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (const char* p : paths()) {
    SCOPED_TRACE(p);
    PathGuard guard;
    k::set_simd_path(p);
    for (size_t hd : {size_t{64}, size_t{128}, size_t{80}, size_t{34}, size_t{2}}) {
      const size_t heads = 5, half = hd / 2;
      std::vector<double> inv(half);
      k::rope_inv_freq(k::RopeParams{}, hd, inv.data());
      std::vector<float> cs(half), sn(half);
      k::rope_cos_sin(1234.0, inv.data(), half, cs.data(), sn.data());
      std::vector<float> x(heads * hd);
      for (auto& v : x) v = nd(rng);
      std::vector<float> want(x), got(x);
      k::rope_neox(want.data(), heads, hd, cs.data(), sn.data());
      k::rope_neox_fast(got.data(), heads, hd, cs.data(), sn.data());
      for (size_t i = 0; i < x.size(); ++i)
        ASSERT_TRUE(close(got[i], want[i], 1e-6f, 1e-7f)) << hd << " " << i;
    }
  }
}

}  // namespace
