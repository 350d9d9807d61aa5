// plugins/support's check_quantized_tensor and QuantizedSet, as the CUDA
// plugin's prepare uses them: every refusal is INVALID_ARGUMENT naming the
// weight. (prepare itself needs a GPU, see cuda_plugin_test.cpp; the checks
// here need none.)
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "halo/plugin_support/errors.h"
#include "halo/plugin_support/validate.h"

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

TEST(CudaQuantValidate, AcceptsBothTypes) {
  Q a("layers.0.q_proj", HALO_QUANT_INT8, 8, 64, 64);
  const hp::QuantMatrix m = hp::check_quantized_tensor(a.t, {8, 64}, kBoth);
  EXPECT_EQ(m.values, a.values.data());
  EXPECT_EQ(m.scale_dtype, halo::kernels::DType::F16);
  EXPECT_NE(m.offsets, nullptr);
  Q b("layers.0.down_proj", HALO_QUANT_UINT4, 8, 256, 128);
  b.t.offsets = nullptr;
  EXPECT_EQ(hp::check_quantized_tensor(b.t, {8, 256}, kBoth).offsets, nullptr);
}

TEST(CudaQuantValidate, RefusalsNameTheWeight) {
  const char* name = "layers.1.up_proj";
  struct Bad {
    const char* what;
    void (*edit)(Q&);
  };
  const Bad bad[] = {
      {"type", [](Q& q) { q.t.type = 3; }},
      {"group_size", [](Q& q) { q.t.group_size = 24; }},  // not a multiple of 16
      {"group_size", [](Q& q) { q.t.group_size = 0; }},
      {"is [", [](Q& q) { q.t.rows = 9; }},  // not the expected shape
      {"values of dtype",
       [](Q& q) {
         q.v.dtype = {kDLUInt, 8, 1};
       }},
      {"values of shape", [](Q& q) { q.vshape[1] = 32; }},
      {"scales of shape", [](Q& q) { q.sshape[1] = 4; }},
      {"scales of dtype",
       [](Q& q) {
         q.s.dtype = {kDLInt, 16, 1};
       }},
      {"offsets of dtype",
       [](Q& q) {
         q.o.dtype = {kDLBfloat, 16, 1};
       }},
      {"values=NULL", [](Q& q) { q.t.values = nullptr; }},
  };
  for (const Bad& b : bad) {
    Q q(name, HALO_QUANT_INT8, 8, 64, 32);
    b.edit(q);
    const std::string msg = refusal([&] { hp::check_quantized_tensor(q.t, {8, 64}, kBoth); });
    EXPECT_NE(msg.find(std::string("'") + name + "'"), std::string::npos) << msg;
    EXPECT_NE(msg.find(b.what), std::string::npos) << msg;
  }
  Q u(name, HALO_QUANT_UINT4, 8, 64, 32);
  const std::string msg = refusal([&] {
    hp::check_quantized_tensor(u.t, {8, 64}, HALO_DTYPE_BIT(HALO_QUANT_INT8));
  });
  EXPECT_NE(msg.find("uint4"), std::string::npos) << msg;
}

TEST(CudaQuantValidate, SetRefusesDuplicatesAndPlainTwins) {
  Q a("layers.0.k_proj", HALO_QUANT_INT8, 8, 64, 64);
  std::vector<halo_quantized_tensor> qs{a.t};
  halo_prepare_args args{};
  args.struct_size = sizeof args;
  args.quantized_weights = qs.data();
  args.num_quantized_weights = qs.size();
  const hp::WeightSet none(nullptr, 0);
  const hp::QuantizedSet set(&args, none);
  EXPECT_EQ(set.find("layers.0.k_proj"), &qs[0]);
  EXPECT_EQ(set.find("layers.0.q_proj"), nullptr);
  // A caller older than v1.4 has no quantized weights, whatever lies beyond its struct.
  args.struct_size = HALO_STRUCT_SIZE(halo_prepare_args, executable);
  EXPECT_EQ(hp::QuantizedSet(&args, none).size(), 0u);
  args.struct_size = sizeof args;
  qs.push_back(a.t);
  args.num_quantized_weights = qs.size();
  args.quantized_weights = qs.data();
  EXPECT_NE(
      refusal([&] { hp::QuantizedSet(&args, none); }).find("'layers.0.k_proj' is given twice"),
      std::string::npos);
  qs.pop_back();
  args.num_quantized_weights = 1;
  int64_t shape[2] = {8, 64};
  std::vector<float> data(8 * 64);
  DLTensor plain = Q::dl(data.data(), shape, DLDataType{kDLFloat, 32, 1});
  const halo_named_tensor named{"layers.0.k_proj", &plain};
  const hp::WeightSet w(&named, 1);
  EXPECT_NE(refusal([&] {
              hp::QuantizedSet(&args, w);
            }).find("'layers.0.k_proj' is given both plain and quantized"),
            std::string::npos);
}

}  // namespace
