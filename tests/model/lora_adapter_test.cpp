// PEFT LoRA adapters (model/lora_adapter.h), as tools/make_test_lora.py writes
// them in PEFT's layout: per-module ranks and scales, fused Phi-3 modules cut
// into their canonical projections, and every adapter halo cannot apply
// refused with a message that names the problem.
#include "model/lora_adapter.h"

#include <cmath>
#include <cstring>

#include "model/model_loader.h"
#include "model/safetensors.h"
#include "test_util.h"

namespace halo::model {
namespace {

namespace fs = std::filesystem;
using namespace halo::model::testing;

std::string make_lora(const fs::path& base, const fs::path& out, const std::string& args) {
  const std::string cmd = shell_quote(HALO_PYTHON_EXE) + " " + shell_quote(HALO_MAKE_TEST_LORA) +
                          " --base " + shell_quote(base.string()) + " --out " +
                          shell_quote(out.string()) + " " + args + " > /dev/null 2>&1";
  return std::system(cmd.c_str()) == 0 ? "" : "failed: " + cmd;
}

#define MAKE_LORA(base, out, args)                                        \
  do {                                                                    \
    if (!have_python()) GTEST_SKIP() << "no python3 (HALO_PYTHON) found"; \
    const std::string why = make_lora(base, out, args);                   \
    ASSERT_TRUE(why.empty()) << why;                                      \
  } while (0)

std::string load_error(const fs::path& dir, const ModelConfig& base, int max_rank = 0) {
  try {
    LoraAdapter::load(dir, base, max_rank);
  } catch (const Error& e) {
    return e.what();
  }
  return "(loaded)";
}

ModelConfig pkgchat() { return load_config(pkgchat_dir()); }

TEST(LoraAdapter, EveryProjectionWithRankAndScalePerModule) {
  TempDir t;
  MAKE_LORA(pkgchat_dir(), t / "a",
            "--rank 4 --alpha 16 --targets all-linear --rank-pattern layers.1.self_attn.q_proj=2");
  const ModelConfig base = pkgchat();
  const LoraAdapter ad = LoraAdapter::load(t / "a", base);
  ASSERT_EQ(ad.weights.size(), 7u * static_cast<size_t>(base.spec.num_layers));
  EXPECT_EQ(ad.max_rank(), 4);
  const int64_t h = base.spec.hidden_size;
  for (const auto& w : ad.weights) {
    SCOPED_TRACE(w.canonical);
    const bool q1 = w.canonical == "layers.1.q_proj";
    EXPECT_EQ(w.rank, q1 ? 2 : 4);
    EXPECT_FLOAT_EQ(w.scale, q1 ? 8.0f : 4.0f);  // lora_alpha / rank
    EXPECT_EQ(w.a.size(), static_cast<size_t>(w.rank * w.in));
    EXPECT_EQ(w.b.size(), static_cast<size_t>(w.out * w.rank));
    if (w.canonical.ends_with("down_proj")) {
      EXPECT_EQ(w.out, h);
    }
    if (w.canonical.ends_with("q_proj")) {
      EXPECT_EQ(w.in, h);
    }
  }
  EXPECT_EQ(ad.weights.front().canonical, "layers.0.q_proj") << "canonical order";
}

TEST(LoraAdapter, RsLoraAndBf16Weights) {
  TempDir t;
  MAKE_LORA(pkgchat_dir(), t / "f32", "--rank 4 --alpha 8 --rslora --seed 5");
  MAKE_LORA(pkgchat_dir(), t / "bf16", "--rank 4 --alpha 8 --rslora --seed 5 --dtype bf16");
  const LoraAdapter f = LoraAdapter::load(t / "f32", pkgchat());
  const LoraAdapter b = LoraAdapter::load(t / "bf16", pkgchat());
  ASSERT_EQ(f.weights.size(), b.weights.size());
  EXPECT_FLOAT_EQ(f.weights[0].scale, 4.0f);  // 8 / sqrt(4)
  for (size_t i = 0; i < f.weights[0].a.size(); ++i)
    ASSERT_NEAR(b.weights[0].a[i], f.weights[0].a[i], std::fabs(f.weights[0].a[i]) / 128 + 1e-12)
        << i;
}

// Phi-3's qkv_proj and gate_up_proj: one adapter module, cut into q/k/v and
// gate/up, each with lora_B's rows of its slice and the shared lora_A.
TEST(LoraAdapter, FusedModulesAreCutIntoCanonicalProjections) {
  TempDir t;
  HALO_GENERATE("phi3", t / "phi3", "--dtype fp32");
  MAKE_LORA(t / "phi3", t / "a", "--rank 3 --targets qkv_proj,gate_up_proj --layers 0");
  const ModelConfig base = load_config(t / "phi3");
  const LoraAdapter ad = LoraAdapter::load(t / "a", base);
  std::vector<std::string> names;
  for (const auto& w : ad.weights) names.push_back(w.canonical);
  EXPECT_EQ(names,
            (std::vector<std::string>{"layers.0.q_proj", "layers.0.k_proj", "layers.0.v_proj",
                                      "layers.0.gate_proj", "layers.0.up_proj"}));
  const SafetensorsFile file(t / "a" / "adapter_model.safetensors");
  const TensorInfo* b =
      file.find("base_model.model.model.layers.0.self_attn.qkv_proj.lora_B.weight");
  ASSERT_NE(b, nullptr);
  std::vector<float> whole(b->nbytes / 4);
  std::memcpy(whole.data(), file.tensor_data(*b), b->nbytes);
  std::vector<float> joined;
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(ad.weights[i].a, ad.weights[0].a);
    joined.insert(joined.end(), ad.weights[i].b.begin(), ad.weights[i].b.end());
  }
  EXPECT_EQ(joined, whole);
}

// adapter_config.json nested 100,000 deep crashed POST /v1/load_lora_adapter (issue 42).
TEST(LoraAdapter, ADeeplyNestedConfigIsRefused) {
  const std::string deep =
      R"({"r": 8, "target_modules": )" + std::string(100000, '[') + std::string(100000, ']') + "}";
  try {
    parse_lora_config(deep);
    ADD_FAILURE() << "accepted";
  } catch (const halo::Error& e) {
    EXPECT_STREQ(e.what(), "adapter_config.json: nested deeper than 16 levels");
  }
}

// NaN/Inf weights and a scale that overflows loaded and gave NaN logits (issue 42).
TEST(LoraAdapter, NonFiniteWeightsAndScalesAreRefused) {
  TempDir t;
  const ModelConfig base = pkgchat();
  MAKE_LORA(pkgchat_dir(), t / "alpha", "");
  std::ofstream(t / "alpha" / "adapter_config.json")
      << R"({"r": 8, "lora_alpha": 1e308, "target_modules": ["q_proj", "v_proj"]})";
  EXPECT_NE(load_error(t / "alpha", base).find("is not a finite scale"), std::string::npos)
      << load_error(t / "alpha", base);
  // The first tensor's first element set to all-ones bits: NaN in fp32, bf16 and fp16.
  MAKE_LORA(pkgchat_dir(), t / "nan", "");
  const auto st = t / "nan" / "adapter_model.safetensors";
  std::fstream io(st, std::ios::in | std::ios::out | std::ios::binary);
  uint64_t header = 0;
  io.read(reinterpret_cast<char*>(&header), 8);
  io.seekp(static_cast<std::streamoff>(8 + header));
  io.write("\xff\xff\xff\xff", 4);
  io.close();
  EXPECT_NE(load_error(t / "nan", base).find("holds NaN or Inf"), std::string::npos)
      << load_error(t / "nan", base);
}

TEST(LoraAdapter, RefusedByName) {
  TempDir t;
  const ModelConfig base = pkgchat();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"dora", "DoRA"},
      {"modules_to_save", "modules_to_save"},
      {"embedding", "embedding adapters"},
      {"wrong_shape", "do not fit"},
      {"unknown_module", "r_proj is not a projection"},
      {"bin", "safe_serialization"},
  };
  for (const auto& [brk, needle] : cases) {
    SCOPED_TRACE(brk);
    MAKE_LORA(pkgchat_dir(), t / brk, "--break " + brk);
    EXPECT_NE(load_error(t / brk, base).find(needle), std::string::npos)
        << load_error(t / brk, base);
  }
  MAKE_LORA(pkgchat_dir(), t / "r16", "--rank 16");
  EXPECT_NE(load_error(t / "r16", base, 8).find("above --max-lora-rank 8"), std::string::npos);
  EXPECT_EQ(load_error(t / "r16", base, 16), "(loaded)");
  EXPECT_NE(load_error(t / "missing", base).find("no adapter_config.json"), std::string::npos);
  // Weights for a module the config does not target.
  MAKE_LORA(pkgchat_dir(), t / "v", "--targets v_proj");
  std::ofstream(t / "v" / "adapter_config.json") << R"({"r": 8, "target_modules": ["q_proj"]})";
  EXPECT_NE(load_error(t / "v", base).find("not in target_modules"), std::string::npos);
  // An adapter trained on another shape.
  HALO_GENERATE("llama", t / "other", "--hidden 96");
  MAKE_LORA(t / "other", t / "o", "");
  EXPECT_NE(load_error(t / "o", base).find("do not fit"), std::string::npos)
      << load_error(t / "o", base);
}

TEST(LoraConfig, ParsesPeftFieldsAndRefusesTheRest) {
  auto c = parse_lora_config(R"({"r": 16, "lora_alpha": 32, "target_modules": ".*\\.(q|v)_proj",
                                  "alpha_pattern": {"layers.0.self_attn.q_proj": 4}})");
  EXPECT_TRUE(lora_targets(c, "model.layers.3.self_attn.q_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.3.self_attn.k_proj"));
  EXPECT_EQ(lora_alpha_for(c, "model.layers.0.self_attn.q_proj"), 4);
  EXPECT_EQ(lora_alpha_for(c, "model.layers.10.self_attn.q_proj"), 32);
  EXPECT_EQ(lora_rank_for(c, "model.layers.0.self_attn.q_proj"), 16);
  c = parse_lora_config(R"({"r": 4, "target_modules": ["q_proj"]})");
  EXPECT_EQ(c.lora_alpha, 8) << "PEFT's default lora_alpha";
  EXPECT_TRUE(lora_targets(c, "model.layers.0.self_attn.q_proj"));
  EXPECT_FALSE(lora_targets(c, "model.layers.0.self_attn.qq_proj"));
  auto error = [](const char* text) {
    try {
      parse_lora_config(text);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(parsed)");
  };
  EXPECT_NE(error(R"({"target_modules": ["q_proj"]})").find("r must be"), std::string::npos);
  EXPECT_NE(error(R"({"r": 4})").find("target_modules"), std::string::npos);
  EXPECT_NE(error(R"({"r": 4, "target_modules": "(("})").find("regular expression"),
            std::string::npos);
  EXPECT_NE(error(R"({"peft_type": "PREFIX_TUNING", "r": 4, "target_modules": ["q_proj"]})")
                .find("PREFIX_TUNING"),
            std::string::npos);
  EXPECT_NE(error(R"({"r": 4, "target_modules": ["q_proj"], "bias": "all"})").find("bias"),
            std::string::npos);
  EXPECT_NE(error(R"({"r": 4, "target_modules": ["q_proj"], "rank_pattern": {"q_proj": 2.5}})")
                .find("integer"),
            std::string::npos);
  EXPECT_NE(error("[").find("not valid JSON"), std::string::npos);
}

}  // namespace
}  // namespace halo::model
