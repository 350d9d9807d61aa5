#pragma once
// A LoRA adapter as PEFT saves it: adapter_config.json and
// adapter_model.safetensors in one directory, over a base model.
//
// The adapter changes a projection W [out, in] into
//   y = x W^T + scale * (x A^T) B^T,
// with A [rank, in] and B [out, rank]. The scale is lora_alpha / rank, or
// lora_alpha / sqrt(rank) with use_rslora. rank_pattern and alpha_pattern
// give single modules their own rank and alpha.
//
// Everything PEFT can express that halo cannot apply is refused with an
// Error that names it:
//   - modules_to_save;
//   - DoRA (use_dora);
//   - a bias other than "none";
//   - fan_in_fan_out;
//   - embedding or lm_head targets;
//   - a module the base model does not have;
//   - a rank above max_rank (--max-lora-rank);
//   - a shape that is not the base's.
//
// Values only, no threads.
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "model/hf_config.h"
#include "text/guided/regex_dfa.h"

namespace halo::model {

// A regular expression of adapter_config.json, compiled once to halo's DFA
// (linear time on any module name: a pattern cannot make loading hang).
struct LoraPattern {
  std::string key;
  double value = 0;  // rank_pattern / alpha_pattern: the module's rank or alpha
  std::shared_ptr<const text::guided::ByteDfa> dfa;
  bool matches(const std::string& module) const { return dfa->matches(module); }
};

struct LoraConfig {
  int r = 8;
  double lora_alpha = 8;  // PEFT's default when the file has none
  bool use_rslora = false;
  // PEFT's target_modules, given as a list: module-name suffixes
  // ("q_proj", or "all-linear" for every projection).
  std::vector<std::string> target_modules;
  // target_modules given as one string: a regex that must match the whole
  // module name (dfa null otherwise).
  LoraPattern target_regex;
  // Keys match the whole module name or a dotted suffix of it, as PEFT's.
  std::vector<LoraPattern> rank_pattern, alpha_pattern;
  std::string base_model;  // base_model_name_or_path, informational
};

// adapter_config.json's text. Throws halo::Error naming the key.
LoraConfig parse_lora_config(const std::string& json_text);

// PEFT's module selection, on a Hugging Face module name
// ("model.layers.0.self_attn.q_proj").
bool lora_targets(const LoraConfig& c, const std::string& module);
int lora_rank_for(const LoraConfig& c, const std::string& module);
double lora_alpha_for(const LoraConfig& c, const std::string& module);

// One canonical projection's low-rank update (fp32).
struct LoraWeight {
  std::string canonical;  // e.g. "layers.3.q_proj"
  int rank = 0;
  float scale = 0;
  int64_t in = 0, out = 0;
  std::vector<float> a;  // [rank, in]
  std::vector<float> b;  // [out, rank]
};

struct LoraAdapter {
  std::filesystem::path dir;
  LoraConfig config;
  std::vector<LoraWeight> weights;  // in the base model's canonical order
  int max_rank() const;

  // Reads `dir` and checks it against `base`. max_rank > 0 refuses larger ranks.
  static LoraAdapter load(const std::filesystem::path& dir, const ModelConfig& base,
                          int max_rank = 0);
};

}  // namespace halo::model
