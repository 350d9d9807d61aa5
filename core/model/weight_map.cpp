#include "model/weight_map.h"

#include <fmt/format.h>

namespace halo::model {

std::vector<WeightSource> expected_weights(const ModelConfig& config) {
  const halo_model_spec& s = config.spec;
  const int64_t hidden = s.hidden_size;
  const int64_t q_rows = int64_t{s.num_heads} * s.head_dim;
  const int64_t kv_rows = int64_t{s.num_kv_heads} * s.head_dim;
  const int64_t inter = s.intermediate_size;
  const bool phi3 = config.family == ModelFamily::kPhi3;

  std::vector<WeightSource> out;
  auto whole = [&](std::string canonical, std::string hf, std::vector<int64_t> shape) {
    out.push_back({std::move(canonical), std::move(hf), shape, shape, 0});
  };
  auto slice = [&](std::string canonical, std::string hf, std::vector<int64_t> hf_shape, int64_t row_begin,
                   int64_t rows) {
    std::vector<int64_t> shape = hf_shape;
    shape[0] = rows;
    out.push_back({std::move(canonical), std::move(hf), std::move(hf_shape), std::move(shape), row_begin});
  };

  whole("embed_tokens", "model.embed_tokens.weight", {s.vocab_size, hidden});
  for (int32_t i = 0; i < s.num_layers; ++i) {
    const std::string c = fmt::format("layers.{}.", i);
    const std::string h = fmt::format("model.layers.{}.", i);
    whole(c + "attn_norm", h + "input_layernorm.weight", {hidden});
    if (phi3) {
      const std::string qkv = h + "self_attn.qkv_proj.weight";
      const std::vector<int64_t> qkv_shape{q_rows + 2 * kv_rows, hidden};
      slice(c + "q_proj", qkv, qkv_shape, 0, q_rows);
      slice(c + "k_proj", qkv, qkv_shape, q_rows, kv_rows);
      slice(c + "v_proj", qkv, qkv_shape, q_rows + kv_rows, kv_rows);
    } else {
      whole(c + "q_proj", h + "self_attn.q_proj.weight", {q_rows, hidden});
      whole(c + "k_proj", h + "self_attn.k_proj.weight", {kv_rows, hidden});
      whole(c + "v_proj", h + "self_attn.v_proj.weight", {kv_rows, hidden});
    }
    if (config.qkv_bias()) {
      whole(c + "q_bias", h + "self_attn.q_proj.bias", {q_rows});
      whole(c + "k_bias", h + "self_attn.k_proj.bias", {kv_rows});
      whole(c + "v_bias", h + "self_attn.v_proj.bias", {kv_rows});
    }
    if (config.qk_norm()) {
      whole(c + "q_norm", h + "self_attn.q_norm.weight", {s.head_dim});
      whole(c + "k_norm", h + "self_attn.k_norm.weight", {s.head_dim});
    }
    whole(c + "o_proj", h + "self_attn.o_proj.weight", {hidden, q_rows});
    whole(c + "mlp_norm", h + "post_attention_layernorm.weight", {hidden});
    if (phi3) {
      // HF Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1): gate first.
      const std::string gu = h + "mlp.gate_up_proj.weight";
      const std::vector<int64_t> gu_shape{2 * inter, hidden};
      slice(c + "gate_proj", gu, gu_shape, 0, inter);
      slice(c + "up_proj", gu, gu_shape, inter, inter);
    } else {
      whole(c + "gate_proj", h + "mlp.gate_proj.weight", {inter, hidden});
      whole(c + "up_proj", h + "mlp.up_proj.weight", {inter, hidden});
    }
    whole(c + "down_proj", h + "mlp.down_proj.weight", {hidden, inter});
  }
  whole("final_norm", "model.norm.weight", {hidden});
  if (!config.tied_embeddings()) whole("lm_head", "lm_head.weight", {s.vocab_size, hidden});
  return out;
}

}  // namespace halo::model
