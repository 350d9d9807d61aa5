// config.json / generation_config.json -> ModelConfig.
#include <cstring>

#include "model/hf_config.h"
#include "test_util.h"

namespace halo::model::testing {
namespace {

TEST(HfConfig, PkgChatSpecMatchesConfigJson) {
  const json j = read_json(pkgchat_dir() / "config.json");
  const ModelConfig c = load_model_config(pkgchat_dir());
  const halo_model_spec& s = c.spec;
  EXPECT_EQ(s.struct_size, sizeof(halo_model_spec));
  EXPECT_STREQ(s.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.architecture(), j["architectures"][0].get<std::string>());
  EXPECT_EQ(c.family, ModelFamily::kLlama);
  EXPECT_EQ(s.vocab_size, j["vocab_size"].get<int>());
  EXPECT_EQ(s.hidden_size, j["hidden_size"].get<int>());
  EXPECT_EQ(s.intermediate_size, j["intermediate_size"].get<int>());
  EXPECT_EQ(s.num_layers, j["num_hidden_layers"].get<int>());
  EXPECT_EQ(s.num_layers, 6);
  EXPECT_EQ(s.num_heads, j["num_attention_heads"].get<int>());
  EXPECT_EQ(s.num_kv_heads, j["num_key_value_heads"].get<int>());
  EXPECT_EQ(s.num_heads, 8);
  EXPECT_EQ(s.num_kv_heads, 4);
  EXPECT_EQ(s.head_dim, 32);
  EXPECT_EQ(s.max_position_embeddings, j["max_position_embeddings"].get<int>());
  EXPECT_EQ(c.max_position_embeddings, 512);
  EXPECT_FLOAT_EQ(s.rms_norm_eps, j["rms_norm_eps"].get<float>());
  EXPECT_FLOAT_EQ(s.rope_theta, j["rope_theta"].get<float>());
  EXPECT_EQ(s.rope_scaling, HALO_ROPE_SCALING_NONE);
  EXPECT_EQ(s.activation, HALO_ACTIVATION_SILU);
  EXPECT_EQ(s.flags, HALO_MODEL_TIED_EMBEDDINGS);
  EXPECT_TRUE(c.tied_embeddings());
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(c.torch_dtype, "bfloat16");
  EXPECT_EQ(c.generation.do_sample, true);
  EXPECT_FLOAT_EQ(c.generation.temperature.value(), 0.7f);
  EXPECT_FLOAT_EQ(c.generation.top_p.value(), 0.9f);
  EXPECT_EQ(c.generation.max_new_tokens, 256);
  EXPECT_FALSE(c.generation.top_k.has_value());
  EXPECT_FALSE(c.generation.repetition_penalty.has_value());
  EXPECT_FALSE(c.sliding_window.has_value());
}

TEST(HfConfig, CopiesAndMovesKeepArchitecturePointer) {
  ModelConfig a = load_model_config(pkgchat_dir());
  ModelConfig b = a;
  EXPECT_EQ(b.spec.architecture, b.architecture().c_str());
  EXPECT_STREQ(b.spec.architecture, "LlamaForCausalLM");
  ModelConfig c = std::move(b);
  EXPECT_EQ(c.spec.architecture, c.architecture().c_str());
  ModelConfig d;
  d = c;
  EXPECT_EQ(d.spec.architecture, d.architecture().c_str());
  ModelConfig e;
  e = std::move(d);
  EXPECT_EQ(e.spec.architecture, e.architecture().c_str());
  EXPECT_STREQ(e.spec.architecture, "LlamaForCausalLM");
}

json base_config() {
  return json::parse(R"({
    "architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 100, "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2})");
}

ModelConfig parse(const json& j, const json* gen = nullptr) { return parse_model_config(j, gen, "/m/config.json"); }

TEST(HfConfig, LlamaDefaultsFollowLlamaConfig) {
  json j = base_config();
  j.erase("num_key_value_heads");
  const ModelConfig c = parse(j);
  EXPECT_EQ(c.spec.num_kv_heads, 4);  // defaults to num_attention_heads
  EXPECT_EQ(c.spec.head_dim, 16);
  EXPECT_FLOAT_EQ(c.spec.rms_norm_eps, 1e-6f);
  EXPECT_FLOAT_EQ(c.spec.rope_theta, 10000.0f);
  EXPECT_EQ(c.spec.max_position_embeddings, 2048);
  EXPECT_FALSE(c.tied_embeddings());  // LlamaConfig: tie_word_embeddings=False
  EXPECT_TRUE(c.eos_token_ids.empty());
  EXPECT_FALSE(c.bos_token_id.has_value());
  EXPECT_EQ(c.torch_dtype, "");
}

TEST(HfConfig, ExplicitHeadDim) {
  json j = base_config();
  j["head_dim"] = 32;
  EXPECT_EQ(parse(j).spec.head_dim, 32);
  j["architectures"] = {"Qwen3ForCausalLM"};
  j.erase("head_dim");
  EXPECT_EQ(parse(j).spec.head_dim, 128);  // Qwen3Config default
  j["architectures"] = {"Phi3ForCausalLM"};
  j["head_dim"] = 32;                      // Phi3Config has no head_dim: ignored
  EXPECT_EQ(parse(j).spec.head_dim, 16);
}

TEST(HfConfig, FamilyFlags) {
  json j = base_config();
  j["architectures"] = {"Qwen2ForCausalLM"};
  EXPECT_EQ(parse(j).spec.flags, HALO_MODEL_QKV_BIAS);
  j["architectures"] = {"Qwen3ForCausalLM"};
  j["tie_word_embeddings"] = true;
  EXPECT_EQ(parse(j).spec.flags, HALO_MODEL_QK_NORM | HALO_MODEL_TIED_EMBEDDINGS);
  j["architectures"] = {"MistralForCausalLM"};
  j["tie_word_embeddings"] = false;
  EXPECT_EQ(parse(j).spec.flags, 0u);
  EXPECT_EQ(parse(j).family, ModelFamily::kMistral);
  j["architectures"] = {"Phi3ForCausalLM"};
  EXPECT_EQ(parse(j).family, ModelFamily::kPhi3);
  EXPECT_FLOAT_EQ(parse(j).spec.rms_norm_eps, 1e-5f);  // Phi3Config default
}

TEST(HfConfig, RopeScalingLlama3AndLinear) {
  json j = base_config();
  j["rope_theta"] = 500000.0;
  j["rope_scaling"] = json::parse(
      R"({"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
          "original_max_position_embeddings": 8192, "rope_type": "llama3"})");
  ModelConfig c = parse(j);
  EXPECT_EQ(c.spec.rope_scaling, HALO_ROPE_SCALING_LLAMA3);
  EXPECT_FLOAT_EQ(c.spec.rope_theta, 500000.0f);
  EXPECT_FLOAT_EQ(c.spec.rope_factor, 8.0f);
  EXPECT_FLOAT_EQ(c.spec.rope_low_freq_factor, 1.0f);
  EXPECT_FLOAT_EQ(c.spec.rope_high_freq_factor, 4.0f);
  EXPECT_EQ(c.spec.rope_original_max_position, 8192);

  j["rope_scaling"] = json::parse(R"({"type": "linear", "factor": 2.0})");
  c = parse(j);
  EXPECT_EQ(c.spec.rope_scaling, HALO_ROPE_SCALING_LINEAR);
  EXPECT_FLOAT_EQ(c.spec.rope_factor, 2.0f);

  j["rope_scaling"] = json::parse(R"({"rope_type": "default"})");
  EXPECT_EQ(parse(j).spec.rope_scaling, HALO_ROPE_SCALING_NONE);

  j["rope_scaling"] = json::parse(R"({"rope_type": "yarn", "factor": 4.0})");
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "rope_scaling", "yarn"}));

  j["rope_scaling"] = json::parse(R"({"rope_type": "llama3", "factor": 8.0})");
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "low_freq_factor"}));
}

TEST(HfConfig, Phi3Unsupported) {
  json j = base_config();
  j["architectures"] = {"Phi3ForCausalLM"};
  j["rope_scaling"] = json::parse(R"({"type": "longrope", "long_factor": [1.0], "short_factor": [1.0]})");
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "longrope", "Phi3ForCausalLM"}));
  j["rope_scaling"] = nullptr;
  j["partial_rotary_factor"] = 0.5;
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "partial_rotary_factor=0.5"}));
  j["partial_rotary_factor"] = 1.0;
  EXPECT_NO_THROW(parse(j));
}

TEST(HfConfig, SlidingWindow) {
  json j = base_config();
  j["architectures"] = {"MistralForCausalLM"};
  j["sliding_window"] = nullptr;
  EXPECT_FALSE(parse(j).sliding_window.has_value());
  j["sliding_window"] = 4096;
  EXPECT_EQ(parse(j).sliding_window, 4096);  // warned about, not applied
  j["architectures"] = {"Qwen2ForCausalLM"};
  j["use_sliding_window"] = false;
  EXPECT_FALSE(parse(j).sliding_window.has_value());
}

TEST(HfConfig, EosUnionGenerationFirst) {
  json j = base_config();
  j["eos_token_id"] = {2, 7};
  j["bos_token_id"] = 1;
  json g = json::parse(R"({"eos_token_id": 9, "bos_token_id": 3, "top_k": 40, "repetition_penalty": 1.1,
                          "max_new_tokens": 50})");
  ModelConfig c = parse(j, &g);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{9, 2, 7}));
  EXPECT_EQ(c.bos_token_id, 3);
  EXPECT_EQ(c.generation.top_k, 40);
  EXPECT_FLOAT_EQ(c.generation.repetition_penalty.value(), 1.1f);
  EXPECT_EQ(c.generation.max_new_tokens, 50);
  g["eos_token_id"] = {7, 2};
  c = parse(j, &g);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{7, 2}));
  j["eos_token_id"] = 2;
  c = parse(j);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{2}));
  EXPECT_EQ(c.bos_token_id, 1);
}

TEST(HfConfig, Errors) {
  json j = base_config();
  j["num_key_value_heads"] = 3;
  EXPECT_TRUE(throws_error([&] { parse(j); },
                           {"config.json", "num_key_value_heads=3 does not divide num_attention_heads=4"}));

  j = base_config();
  j["architectures"] = {"GPT2LMHeadModel"};
  EXPECT_TRUE(throws_error([&] { parse(j); },
                           {"config.json", "unsupported architecture 'GPT2LMHeadModel'", "LlamaForCausalLM",
                            "MistralForCausalLM", "Qwen2ForCausalLM", "Qwen3ForCausalLM", "Phi3ForCausalLM"}));

  j = base_config();
  j.erase("architectures");
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "architectures"}));

  j = base_config();
  j.erase("hidden_size");
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "missing required key 'hidden_size'"}));

  j = base_config();
  j["num_hidden_layers"] = 0;
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "num_hidden_layers=0 must be positive"}));

  j = base_config();
  j["vocab_size"] = -5;
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "vocab_size=-5"}));

  j = base_config();
  j["hidden_size"] = "big";
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "hidden_size=\"big\""}));

  j = base_config();
  j["hidden_size"] = 66;  // 4 heads do not divide 66 and no head_dim
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "num_attention_heads=4 does not divide hidden_size=66"}));

  j = base_config();
  j["hidden_act"] = "relu";
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "hidden_act='relu'"}));

  j = base_config();
  j["attention_bias"] = true;
  EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", "attention_bias"}));
}

// Size fields are bounded before anything is sized by them: a config.json
// saying num_hidden_layers=1e9 made the loader allocate without limit.
TEST(HfConfig, SizeFieldsOutOfBounds) {
  struct Case {
    const char* key;
    json value;
    std::string needle;
  };
  const Case cases[] = {
      {"num_hidden_layers", 1e9, "num_hidden_layers=1000000000 is beyond any real model (at most 4096"},
      {"num_hidden_layers", 3.5, "num_hidden_layers=3.5 is not an integer"},
      {"num_hidden_layers", -2, "num_hidden_layers=-2 must be positive"},
      {"num_hidden_layers", 1e30, "num_hidden_layers=1e+30 is not an integer"},
      {"num_hidden_layers", json::parse("18446744073709551615"), "num_hidden_layers=18446744073709551615 is out of range"},
      {"num_hidden_layers", "12", "num_hidden_layers=\"12\" is not an integer"},
      {"hidden_size", 1 << 21, "hidden_size=2097152 is beyond"},
      {"intermediate_size", int64_t{1} << 30, "intermediate_size=1073741824 is beyond"},
      {"num_attention_heads", 1 << 20, "num_attention_heads=1048576 is beyond"},
      {"num_key_value_heads", 1 << 20, "num_key_value_heads=1048576 is beyond"},
      {"vocab_size", int64_t{1} << 40, "vocab_size=1099511627776 is beyond"},
      {"head_dim", 1 << 20, "head_dim=1048576 is beyond"},
      {"max_position_embeddings", 1e12, "max_position_embeddings=1000000000000 is beyond"},
  };
  for (const auto& c : cases) {
    json j = base_config();
    j[c.key] = c.value;
    EXPECT_TRUE(throws_error([&] { parse(j); }, {"config.json", c.needle})) << c.key << "=" << c.value.dump();
  }
  // Real sizes pass (Llama 3.1 405B).
  json j = base_config();
  j["num_hidden_layers"] = 126;
  j["hidden_size"] = 16384;
  j["intermediate_size"] = 53248;
  j["num_attention_heads"] = 128;
  j["num_key_value_heads"] = 8;
  j["vocab_size"] = 128256;
  j["max_position_embeddings"] = 131072;
  EXPECT_NO_THROW(parse(j));
}

TEST(HfConfig, FileErrors) {
  TempDir dir;
  EXPECT_TRUE(throws_error([&] { load_model_config(dir.path()); }, {(dir / "config.json").string(), "not found"}));
  write_file(dir / "config.json", "{\"architectures\": [\"LlamaForCausalLM\"],");
  EXPECT_TRUE(throws_error([&] { load_model_config(dir.path()); }, {(dir / "config.json").string(), "malformed JSON"}));
  write_json(dir / "config.json", base_config());
  write_file(dir / "generation_config.json", "not json");
  EXPECT_TRUE(throws_error([&] { load_model_config(dir.path()); }, {"generation_config.json", "malformed JSON"}));
  write_file(dir / "generation_config.json", "{\"eos_token_id\": [1, \"x\"]}");
  EXPECT_TRUE(throws_error([&] { load_model_config(dir.path()); }, {"generation_config.json", "eos_token_id[1]"}));
}

}  // namespace
}  // namespace halo::model::testing
