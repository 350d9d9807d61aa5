// The host half of the CUDA plugin's quantized upload (plugins/cuda/src/
// quant_upload.h: fused rows, tensor-parallel column shards, refusals naming
// the weight) run through the emulated kernels. (prepare itself needs a GPU, see cuda_plugin_test.cpp;
// the checks here need none.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "halo/kernels/dtype.h"
#include "halo/plugin_support/errors.h"
#include "halo/plugin_support/validate.h"
#include "kernels/emulate.h"
#include "quant_upload.h"

namespace hp = halo::plugin;

namespace {

constexpr uint32_t kBoth = HALO_DTYPE_BIT(HALO_QUANT_INT8) | HALO_DTYPE_BIT(HALO_QUANT_UINT4);

// A well-formed quantized [rows, cols] tensor with its storage.
struct Q {
  std::vector<uint8_t> values;
  std::vector<uint16_t> scales, offsets;
  int64_t vshape[2], sshape[2];
  DLTensor v{}, s{}, o{};
  halo_quantized_tensor t{};
  Q(const char* name, int32_t type, int64_t rows, int64_t cols, int32_t group) {
    const int64_t vc = type == HALO_QUANT_UINT4 ? cols / 2 : cols;
    values.resize(static_cast<size_t>(rows * vc));
    scales.resize(static_cast<size_t>(rows * (cols / group)));
    offsets = scales;
    vshape[0] = rows, vshape[1] = vc, sshape[0] = rows, sshape[1] = cols / group;
    v = dl(values.data(), vshape,
           type == HALO_QUANT_UINT4 ? DLDataType{kDLUInt, 8, 1} : DLDataType{kDLInt, 8, 1});
    s = dl(scales.data(), sshape, DLDataType{kDLFloat, 16, 1});
    o = dl(offsets.data(), sshape, DLDataType{kDLFloat, 16, 1});
    t = {name, type, group, rows, cols, &v, &s, &o};
  }
  Q& random(uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> sd(0.01f, 0.05f), od(-0.1f, 0.1f);
    for (auto& b : values) b = static_cast<uint8_t>(byte(rng));
    for (auto& x : scales) x = halo::kernels::f32_to_f16(sd(rng));
    for (auto& x : offsets) x = halo::kernels::f32_to_f16(od(rng));
    return *this;
  }
  static DLTensor dl(void* data, int64_t* shape, DLDataType dt) {
    DLTensor d{};
    d.data = data;
    d.device = {kDLCPU, 0};
    d.ndim = 2;
    d.dtype = dt;
    d.shape = shape;
    return d;
  }
};

// The message of the INVALID_ARGUMENT `f` throws ("" if it does not).
template <class F>
std::string refusal(F f) {
  try {
    f();
  } catch (const hp::PluginError& e) {
    EXPECT_EQ(e.code(), HALO_STATUS_INVALID_ARGUMENT) << e.what();
    return e.what();
  }
  ADD_FAILURE() << "not refused";
  return "";
}

// The generic checks (validate_quantized, QuantizedSet) are tested for every
// plugin by the conformance suite's Quantized.* cases.

// ------------------------------------------- prepare's upload, emulated

namespace k = halo::cuda::k;
using halo::cuda::HostProj;
using halo::cuda::Part;

HostProj host_proj(const Q& q) {
  HostProj p;
  p.name = q.t.name;
  p.q = hp::validate_quantized(q.t, kBoth);
  return p;
}

// y [M, N] = x [M, K] W^T through the emulated GEMV, W as gather_quant made it.
template <int QT>
std::vector<float> gemv(const halo::cuda::QuantHost& h, const HostProj& like,
                        const std::vector<float>& x, int M, int N, int K) {
  k::QuantWeight w = halo::cuda::quant_view(like.q);
  w.values = h.values.data();
  w.scales = h.scales.data();
  w.offsets = h.offsets.empty() ? nullptr : h.offsets.data();
  std::vector<float> y(static_cast<size_t>(M) * N);
  using G = k::QuantGemvKernel<float, QT>;
  k::emulate<G>({x.data(), w, y.data(), M, N, K}, {k::ceil_div(N, 4), 1, 1}, 128,
                G::smem_floats(128));
  return y;
}

std::vector<float> columns(const std::vector<float>& x, int M, int K, int c0, int c1) {
  std::vector<float> out;
  for (int m = 0; m < M; ++m) out.insert(out.end(), x.begin() + m * K + c0, x.begin() + m * K + c1);
  return out;
}

// A row-parallel projection (o/down) split over 2 GPUs by whole groups: the
// two partial products sum to the unsplit one.
TEST(CudaQuantUpload, TensorParallelShardsSumToTheFullProduct) {
  const int N = 6, K = 128, M = 3;
  Q q("layers.0.o_proj", HALO_QUANT_UINT4, N, K, 32);
  q.random(5);
  const HostProj p = host_proj(q);
  std::vector<float> x(static_cast<size_t>(M) * K);
  std::mt19937 rng(6);
  std::normal_distribution<float> nd;
  for (auto& v : x) v = nd(rng);
  using halo::cuda::gather_quant;
  const auto full = gemv<k::kQuantUint4>(gather_quant({{&p, K, 0, N, 0, K}}, 1), p, x, M, N, K);
  const auto y0 = gemv<k::kQuantUint4>(gather_quant({{&p, K, 0, N, 0, 64}}, 2), p,
                                       columns(x, M, K, 0, 64), M, N, 64);
  const auto y1 = gemv<k::kQuantUint4>(gather_quant({{&p, K, 0, N, 64, K}}, 2), p,
                                       columns(x, M, K, 64, K), M, N, 64);
  for (size_t i = 0; i < full.size(); ++i)
    EXPECT_NEAR(y0[i] + y1[i], full[i], 1e-5 * (1 + std::fabs(full[i]))) << i;
  // A shard boundary inside a group is refused, naming the weight.
  try {
    gather_quant({{&p, K, 0, N, 0, 48}}, 3);
    ADD_FAILURE() << "not refused";
  } catch (const hp::PluginError& e) {
    EXPECT_EQ(e.code(), HALO_STATUS_UNIMPLEMENTED);
    EXPECT_NE(std::string(e.what()).find("'layers.0.o_proj' inside a group"), std::string::npos)
        << e.what();
  }
}

// q and k stacked by rows give q's and k's products side by side; parts
// quantized differently are refused naming both.
TEST(CudaQuantUpload, FusedRowsStackAndMustMatch) {
  const int K = 64, M = 2;
  Q a("layers.0.q_proj", HALO_QUANT_INT8, 4, K, 32),
      b("layers.0.k_proj", HALO_QUANT_INT8, 2, K, 32);
  a.random(7), b.random(8);
  const HostProj pa = host_proj(a), pb = host_proj(b);
  std::vector<float> x(static_cast<size_t>(M) * K);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * static_cast<float>(i));
  using halo::cuda::gather_quant;
  const auto fused = gemv<k::kQuantInt8>(
      gather_quant({{&pa, K, 0, 4, 0, K}, {&pb, K, 0, 2, 0, K}}, 1), pa, x, M, 6, K);
  const auto ya = gemv<k::kQuantInt8>(gather_quant({{&pa, K, 0, 4, 0, K}}, 1), pa, x, M, 4, K);
  const auto yb = gemv<k::kQuantInt8>(gather_quant({{&pb, K, 0, 2, 0, K}}, 1), pb, x, M, 2, K);
  for (int m = 0; m < M; ++m) {
    for (int n = 0; n < 4; ++n) EXPECT_EQ(fused[m * 6 + n], ya[m * 4 + n]);
    for (int n = 0; n < 2; ++n) EXPECT_EQ(fused[m * 6 + 4 + n], yb[m * 2 + n]);
  }
  Q c("layers.0.v_proj", HALO_QUANT_INT8, 2, K, 64);
  const HostProj pc = host_proj(c);
  try {
    gather_quant({{&pa, K, 0, 4, 0, K}, {&pc, K, 0, 2, 0, K}}, 1);
    ADD_FAILURE() << "not refused";
  } catch (const hp::PluginError& e) {
    EXPECT_EQ(e.code(), HALO_STATUS_UNIMPLEMENTED);
    EXPECT_NE(
        std::string(e.what()).find("'layers.0.v_proj' is fused on the GPU with 'layers.0.q_proj'"),
        std::string::npos)
        << e.what();
  }
}

}  // namespace
