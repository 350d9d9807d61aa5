#pragma once
// Hugging Face config.json (+ generation_config.json) -> ModelConfig.
//
// Supported families: LlamaForCausalLM (Llama 2/3/3.1, rope_scaling "linear"
// and "llama3"), MistralForCausalLM, Qwen2ForCausalLM, Qwen3ForCausalLM,
// Phi3ForCausalLM. Keys a family's HF config class gives a default for take
// that default; the keys that fix tensor shapes (vocab_size, hidden_size,
// intermediate_size, num_hidden_layers, num_attention_heads) are required.
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include <halo/device_abi.h>

namespace halo::model {

// The five model families whose weight layouts the loader knows.
enum class ModelFamily { kLlama, kMistral, kQwen2, kQwen3, kPhi3 };

// Sampling defaults from generation_config.json (all optional).
struct GenerationDefaults {
  std::optional<bool> do_sample;
  std::optional<float> temperature;
  std::optional<float> top_p;
  std::optional<int32_t> top_k;
  std::optional<float> repetition_penalty;
  std::optional<int32_t> max_new_tokens;
  std::optional<int32_t> max_length;
};

struct ModelConfig {
  ModelConfig();
  ModelConfig(const ModelConfig& other);
  ModelConfig(ModelConfig&& other) noexcept;
  ModelConfig& operator=(const ModelConfig& other);
  ModelConfig& operator=(ModelConfig&& other) noexcept;
  ~ModelConfig() = default;

  // e.g. "LlamaForCausalLM"; spec.architecture always points at this string
  // (kept right across copies and moves).
  const std::string& architecture() const { return architecture_; }
  void set_architecture(std::string name) {
    architecture_ = std::move(name);
    repoint();
  }

  std::string model_type;  // e.g. "llama" (informational)
  ModelFamily family = ModelFamily::kLlama;
  halo_model_spec spec{};

  std::optional<int32_t> bos_token_id;
  std::optional<int32_t> pad_token_id;
  // generation_config.json's ids first, then config.json's not yet listed.
  std::vector<int32_t> eos_token_ids;
  std::string torch_dtype;  // "bfloat16", "float16", "float32" or "" if absent
  int32_t max_position_embeddings = 0;
  // A sliding attention window the checkpoint declares but halo does not
  // apply (Mistral v0.1, Phi-3); a warning is logged when it is set.
  std::optional<int32_t> sliding_window;
  GenerationDefaults generation;

  // A model compiled ahead of time (halo compile): its directory and the
  // plugin it was compiled for; spec.compiled_model_dir / compiled_target
  // point at these strings (NULL when empty).
  const std::string& compiled_model_dir() const { return compiled_model_dir_; }
  const std::string& compiled_target() const { return compiled_target_; }
  bool is_compiled() const { return !compiled_model_dir_.empty(); }
  void set_compiled(std::string dir, std::string target) {
    compiled_model_dir_ = std::move(dir);
    compiled_target_ = std::move(target);
    repoint();
  }

  bool tied_embeddings() const { return (spec.flags & HALO_MODEL_TIED_EMBEDDINGS) != 0; }
  bool qkv_bias() const { return (spec.flags & HALO_MODEL_QKV_BIAS) != 0; }
  bool qk_norm() const { return (spec.flags & HALO_MODEL_QK_NORM) != 0; }

 private:
  void repoint() noexcept {
    spec.architecture = architecture_.c_str();
    spec.compiled_model_dir = compiled_model_dir_.empty() ? nullptr : compiled_model_dir_.c_str();
    spec.compiled_target = compiled_target_.empty() ? nullptr : compiled_target_.c_str();
  }
  std::string architecture_;
  std::string compiled_model_dir_;
  std::string compiled_target_;
};

// Architectures accepted, in the order they are listed in error messages.
const std::vector<std::string_view>& supported_architectures();

// Reads <model_dir>/config.json and, when present, generation_config.json.
ModelConfig load_model_config(const std::filesystem::path& model_dir);

// Same from already parsed JSON. `generation` may be null (absent). `source`
// names the config in error messages (usually the config.json path).
ModelConfig parse_model_config(const nlohmann::json& config, const nlohmann::json* generation,
                               const std::string& source);

}  // namespace halo::model
