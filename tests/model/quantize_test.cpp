// --quantization int8 / int4 at load time: which weights are replaced, the
// ABI v1.4 layout of each, and the rounding error against the weights read
// from the file (bounded by half a quantization step, from the layout's
// definition in device_abi.h, not from the quantizer's code).
#include "model/quantize.h"

#include <cmath>
#include <cstring>
#include <set>
#include <string>

#include "common/half.h"
#include "model/checkpoint_quant.h"
#include "model/model_loader.h"
#include "model/safetensors.h"
#include "model/weight_map.h"
#include "test_util.h"

namespace halo::model::testing {
namespace {

float element(const DLTensor& t, int64_t i) {
  const auto* base = static_cast<const std::byte*>(t.data) + t.byte_offset;
  if (t.dtype.bits == 32) {
    float f;
    std::memcpy(&f, base + i * 4, 4);
    return f;
  }
  uint16_t h;
  std::memcpy(&h, base + i * 2, 2);
  return t.dtype.code == kDLBfloat ? bf16_to_float(h) : fp16_to_float(h);
}

// w[r][c] by the ABI's formula.
float dequantized(const halo_quantized_tensor& q, int64_t r, int64_t c) {
  const int64_t groups = q.cols / q.group_size, g = r * groups + c / q.group_size;
  const int64_t e = r * q.cols + c;
  float v;
  if (q.type == HALO_QUANT_INT8) {
    v = static_cast<float>(static_cast<const int8_t*>(q.values->data)[e]);
  } else {
    const uint8_t b = static_cast<const uint8_t*>(q.values->data)[e / 2];
    v = static_cast<float>(e % 2 ? b >> 4 : b & 15);
  }
  const float s = element(*q.scales, g), o = q.offsets ? element(*q.offsets, g) : 0.f;
  return s * v + o;
}

struct Loaded {
  LoadedModel plain = LoadedModel::load(pkgchat_dir());
  LoadedModel quant;
  explicit Loaded(const std::string& method, int group = 0)
      : quant(LoadedModel::load(pkgchat_dir(), LoadOptions{method, group})) {}
};

TEST(Quantize, Int8PerChannelWithinHalfAStep) {
  Loaded m("int8");
  // Every projection is quantized, lm_head included (untied); nothing else is.
  std::set<std::string> quantized;
  for (const auto& q : m.quant.quantized_weights()) {
    quantized.insert(q.name);
    EXPECT_TRUE(is_projection_weight(q.name)) << q.name;
    EXPECT_EQ(q.type, HALO_QUANT_INT8);
    EXPECT_EQ(q.group_size, q.cols) << "int8 is per output channel";
    EXPECT_EQ(m.quant.find(q.name), nullptr) << q.name << " is also plain";
  }
  for (const auto& w : m.plain.weights()) {
    if (is_projection_weight(w.name)) {
      EXPECT_TRUE(quantized.count(w.name)) << w.name;
    }
  }
  EXPECT_TRUE(quantized.count(HALO_WEIGHT_LM_HEAD));
  EXPECT_FALSE(m.quant.config().tied_embeddings());
  ASSERT_NE(m.quant.find(HALO_WEIGHT_EMBED_TOKENS), nullptr) << "embed_tokens stays plain";

  for (const auto& q : m.quant.quantized_weights()) {
    const std::string src =
        q.name == std::string(HALO_WEIGHT_LM_HEAD) ? HALO_WEIGHT_EMBED_TOKENS : q.name;
    const DLTensor& w = *m.plain.find(src);
    for (int64_t r = 0; r < q.rows; r += 7) {
      float amax = 0;
      for (int64_t c = 0; c < q.cols; ++c)
        amax = std::max(amax, std::fabs(element(w, r * q.cols + c)));
      const float half_step = amax / 127.f / 2.f;
      for (int64_t c = 0; c < q.cols; ++c)
        ASSERT_LE(std::fabs(dequantized(q, r, c) - element(w, r * q.cols + c)),
                  half_step * 1.0001f + 1e-12f)
            << q.name << " [" << r << ", " << c << "]";
    }
  }
  EXPECT_LT(m.quant.weight_bytes(), m.plain.weight_bytes());
}

TEST(Quantize, Int4GroupsWithinHalfAStep) {
  for (int group : {32, 64}) {
    Loaded m("int4", group);
    ASSERT_FALSE(m.quant.quantized_weights().empty());
    for (const auto& q : m.quant.quantized_weights()) {
      EXPECT_EQ(q.type, HALO_QUANT_UINT4);
      EXPECT_EQ(q.group_size, group);
      ASSERT_NE(q.offsets, nullptr);
      EXPECT_EQ(q.values->shape[1], q.cols / 2);
      const std::string src =
          q.name == std::string(HALO_WEIGHT_LM_HEAD) ? HALO_WEIGHT_EMBED_TOKENS : q.name;
      const DLTensor& w = *m.plain.find(src);
      for (int64_t r = 0; r < q.rows; r += 5) {
        for (int64_t g0 = 0; g0 < q.cols; g0 += group) {
          float lo = INFINITY, hi = -INFINITY;
          for (int64_t c = g0; c < g0 + group; ++c) {
            lo = std::min(lo, element(w, r * q.cols + c));
            hi = std::max(hi, element(w, r * q.cols + c));
          }
          // Half a step of (hi - lo) / 15, plus the fp16 rounding of scale and offset.
          const float tol = (hi - lo) / 15.f * 0.5f * 1.01f + std::fabs(lo) * 1e-3f + 1e-6f;
          for (int64_t c = g0; c < g0 + group; ++c)
            ASSERT_LE(std::fabs(dequantized(q, r, c) - element(w, r * q.cols + c)), tol)
                << q.name << " [" << r << ", " << c << "] group " << group;
        }
      }
    }
    // Bytes: the plain model's, less its 16-bit projections (lm_head was the
    // tied embedding, not counted there), plus 4-bit values and an fp16 scale
    // and offset per group.
    const halo_model_spec& spec = m.quant.config().spec;
    uint64_t projection_elems = 0, qbytes = 0;
    for (const auto& q : m.quant.quantized_weights()) {
      projection_elems += uint64_t(q.rows * q.cols);
      qbytes += uint64_t(q.rows * q.cols / 2) + 2 * 2 * uint64_t(q.rows * (q.cols / group));
    }
    const uint64_t untied = uint64_t(spec.vocab_size) * uint64_t(spec.hidden_size);
    EXPECT_EQ(m.quant.weight_bytes(),
              m.plain.weight_bytes() - (projection_elems - untied) * 2 + qbytes);
    EXPECT_LE(8.0 * double(qbytes) / double(projection_elems), 4.0 + 32.0 / group + 1e-9);
  }
}

TEST(Quantize, BadRequestsAreRefusedByName) {
  EXPECT_TRUE(throws_error([] { (void)LoadedModel::load(pkgchat_dir(), LoadOptions{"int3"}); },
                           {"int3: unknown method"}));
  EXPECT_TRUE(throws_error(
      [] {
        (void)LoadedModel::load(pkgchat_dir(), LoadOptions{"int4", 24});
      },
      {"multiple of 16"}));
  EXPECT_TRUE(throws_error(
      [] {
        (void)LoadedModel::load(pkgchat_dir(), LoadOptions{"int8", 32});
      },
      {"per output channel"}));
  LoadedModel once = LoadedModel::load(pkgchat_dir(), LoadOptions{"int8"});
  EXPECT_TRUE(throws_error([&] { quantize_model(once, {"int4", 0}); }, {"already quantized"}));
  // none changes nothing.
  LoadedModel none = LoadedModel::load(pkgchat_dir(), LoadOptions{"none"});
  EXPECT_TRUE(none.quantized_weights().empty());
  EXPECT_TRUE(none.config().tied_embeddings());
}

TEST(WeightStore, ReplacingKeepsOrderAndOneKind) {
  WeightStore s;
  float a[4] = {1, 2, 3, 4};
  int8_t q[4] = {1, 2, 3, 4};
  float sc[2] = {0.5f, 0.25f};
  s.add("x", TensorView{a, 0, {kDLFloat, 32, 1}, {2, 2}});
  s.add("y", TensorView{a, 0, {kDLFloat, 32, 1}, {4}});
  s.add_quantized("x", QuantizedView{HALO_QUANT_INT8, 2, 2, 2, q, sc, nullptr, {kDLFloat, 32, 1}});
  ASSERT_EQ(s.plain().size(), 1u);
  EXPECT_STREQ(s.plain()[0].name, "y");
  ASSERT_EQ(s.quantized().size(), 1u);
  EXPECT_EQ(s.find("x"), nullptr);
  ASSERT_NE(s.find_quantized("x"), nullptr);
  EXPECT_EQ(s.bytes(), 4u * 4 + 4 + 2 * 4);
  EXPECT_THROW(
      s.add_quantized("z",
                      QuantizedView{HALO_QUANT_UINT4, 3, 2, 4, q, sc, nullptr, {kDLFloat, 32, 1}}),
      Error);
  s.remove("x");
  EXPECT_TRUE(s.quantized().empty());
}

// Pre-quantized checkpoints (GPTQ, compressed-tensors) written by
// make_quantized_checkpoint.py, which also dequantizes every projection with
// numpy from the stored tensors: halo's weights must equal that reading.
class Checkpoint : public ::testing::TestWithParam<const char*> {};

TEST_P(Checkpoint, DequantizesAsTheFormatSays) {
  if (!have_python()) GTEST_SKIP() << "no Python with numpy (HALO_PYTHON) to write the checkpoint";
  TempDir dir;
  const fs::path out = dir.path() / "model";
  const std::string cmd =
      shell_quote(HALO_PYTHON_EXE) + " " + shell_quote(HALO_MAKE_QUANTIZED_CHECKPOINT) + " " +
      shell_quote(pkgchat_dir().string()) + " " + shell_quote(out.string()) + " " + GetParam();
  ASSERT_EQ(std::system(cmd.c_str()), 0) << cmd;
  const LoadedModel m = LoadedModel::load(out);
  const SafetensorsFile ref(out / "reference.safetensors");
  ASSERT_EQ(m.quantized_weights().size(), ref.tensors().size());
  const std::string param = GetParam();
  const int32_t want_type =
      param == "gptq8" || param == "ct-w8a8" ? HALO_QUANT_INT8 : HALO_QUANT_UINT4;
  for (const auto& q : m.quantized_weights()) {
    EXPECT_EQ(q.type, want_type) << q.name;
    const std::string layer = std::string(q.name).substr(7, std::string(q.name).find('.', 7) - 7);
    std::string suffix = std::string(q.name).substr(std::string(q.name).rfind('.') + 1);
    const std::string module =
        suffix == "gate_proj" || suffix == "up_proj" || suffix == "down_proj" ? "mlp" : "self_attn";
    const TensorInfo* info =
        ref.find("model.layers." + layer + "." + module + "." + suffix + ".weight");
    ASSERT_NE(info, nullptr) << q.name;
    const auto* r = reinterpret_cast<const float*>(ref.tensor_data(*info));
    float amax = 0;
    for (int64_t i = 0; i < q.rows * q.cols; ++i) amax = std::max(amax, std::fabs(r[i]));
    for (int64_t row = 0; row < q.rows; ++row)
      for (int64_t c = 0; c < q.cols; ++c)
        ASSERT_NEAR(dequantized(q, row, c), r[row * q.cols + c], amax * 1e-6f)
            << q.name << " [" << row << ", " << c << "]";
  }
  EXPECT_NE(m.find(HALO_WEIGHT_EMBED_TOKENS), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Formats, Checkpoint,
                         ::testing::Values("gptq4", "gptq4-asym", "gptq8", "ct-w4a16",
                                           "ct-w4a16-asym", "ct-w8a8"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

TEST(CheckpointConfig, UnsupportedSettingsAreRefusedByName) {
  TempDir dir;
  for (
      const auto& [qc, needle] : std::vector<std::pair<std::string, std::string>>{
          {R"({"quant_method":"awq","bits":4})", "quant_method \"awq\""},
          {R"({"quant_method":"gptq","bits":4,"group_size":128,"desc_act":true})", "desc_act true"},
          {R"({"quant_method":"gptq","bits":3,"group_size":128})", "GPTQ with 3 bits"},
          {R"({"quant_method":"compressed-tensors","format":"float-quantized","config_groups":{}})",
           "float-quantized"}}) {
    nlohmann::json j = nlohmann::json::parse(qc);
    EXPECT_TRUE(throws_error(
        [&] {
          (void)parse_checkpoint_quantization(nlohmann::json{{"quantization_config", j}}, "cfg");
        },
        {needle}))
        << qc;
  }
}

}  // namespace
}  // namespace halo::model::testing
