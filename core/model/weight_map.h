#pragma once
// Canonical weight names (device_abi.h) -> the Hugging Face tensor each one
// comes from, per family. Phi-3's fused qkv_proj and gate_up_proj give
// row-slice views: several canonical weights share one HF tensor.
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/hf_config.h"

namespace halo::model {

struct WeightSource {
  std::string canonical;          // e.g. "layers.0.q_proj"
  std::string hf_name;            // e.g. "model.layers.0.self_attn.q_proj.weight"
  std::vector<int64_t> hf_shape;  // the whole HF tensor's expected shape
  std::vector<int64_t> shape;     // the canonical tensor's shape (rows [row_begin, row_begin+shape[0]))
  int64_t row_begin = 0;          // > 0 only for slices of fused tensors
};

// Every weight the config calls for, in canonical order: embed_tokens,
// layers.{i}.*, final_norm, lm_head (absent when tied).
std::vector<WeightSource> expected_weights(const ModelConfig& config);

// Whether a canonical weight is a projection matrix (q/k/v/o_proj,
// gate/up/down_proj, lm_head): the weights ABI v1.4 lets come quantized.
bool is_projection_weight(std::string_view canonical);

}  // namespace halo::model
