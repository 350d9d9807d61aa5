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

  whole(HALO_WEIGHT_EMBED_TOKENS, "model.embed_tokens.weight", {s.vocab_size, hidden});
  for (int32_t i = 0; i < s.num_layers; ++i) {
    const std::string c = fmt::format(HALO_WEIGHT_LAYER_PREFIX "{}.", i);
    const std::string h = fmt::format("model.layers.{}.", i);
    whole(c + HALO_WEIGHT_ATTN_NORM, h + "input_layernorm.weight", {hidden});
    if (phi3) {
      const std::string qkv = h + "self_attn.qkv_proj.weight";
      const std::vector<int64_t> qkv_shape{q_rows + 2 * kv_rows, hidden};
      slice(c + HALO_WEIGHT_Q_PROJ, qkv, qkv_shape, 0, q_rows);
      slice(c + HALO_WEIGHT_K_PROJ, qkv, qkv_shape, q_rows, kv_rows);
      slice(c + HALO_WEIGHT_V_PROJ, qkv, qkv_shape, q_rows + kv_rows, kv_rows);
    } else {
      whole(c + HALO_WEIGHT_Q_PROJ, h + "self_attn.q_proj.weight", {q_rows, hidden});
      whole(c + HALO_WEIGHT_K_PROJ, h + "self_attn.k_proj.weight", {kv_rows, hidden});
      whole(c + HALO_WEIGHT_V_PROJ, h + "self_attn.v_proj.weight", {kv_rows, hidden});
    }
    if (config.qkv_bias()) {
      whole(c + HALO_WEIGHT_Q_BIAS, h + "self_attn.q_proj.bias", {q_rows});
      whole(c + HALO_WEIGHT_K_BIAS, h + "self_attn.k_proj.bias", {kv_rows});
      whole(c + HALO_WEIGHT_V_BIAS, h + "self_attn.v_proj.bias", {kv_rows});
    }
    if (config.qk_norm()) {
      whole(c + HALO_WEIGHT_Q_NORM, h + "self_attn.q_norm.weight", {s.head_dim});
      whole(c + HALO_WEIGHT_K_NORM, h + "self_attn.k_norm.weight", {s.head_dim});
    }
    whole(c + HALO_WEIGHT_O_PROJ, h + "self_attn.o_proj.weight", {hidden, q_rows});
    whole(c + HALO_WEIGHT_MLP_NORM, h + "post_attention_layernorm.weight", {hidden});
    if (phi3) {
      // HF Phi3MLP: gate, up = gate_up_proj(x).chunk(2, dim=-1): gate first.
      const std::string gu = h + "mlp.gate_up_proj.weight";
      const std::vector<int64_t> gu_shape{2 * inter, hidden};
      slice(c + HALO_WEIGHT_GATE_PROJ, gu, gu_shape, 0, inter);
      slice(c + HALO_WEIGHT_UP_PROJ, gu, gu_shape, inter, inter);
    } else {
      whole(c + HALO_WEIGHT_GATE_PROJ, h + "mlp.gate_proj.weight", {inter, hidden});
      whole(c + HALO_WEIGHT_UP_PROJ, h + "mlp.up_proj.weight", {inter, hidden});
    }
    whole(c + HALO_WEIGHT_DOWN_PROJ, h + "mlp.down_proj.weight", {hidden, inter});
  }
  whole(HALO_WEIGHT_FINAL_NORM, "model.norm.weight", {hidden});
  if (!config.tied_embeddings())
    whole(HALO_WEIGHT_LM_HEAD, "lm_head.weight", {s.vocab_size, hidden});
  return out;
}

bool is_projection_weight(std::string_view canonical) {
  if (canonical == HALO_WEIGHT_LM_HEAD) return true;
  if (!canonical.starts_with(HALO_WEIGHT_LAYER_PREFIX)) return false;
  const std::string_view suffix = canonical.substr(canonical.rfind('.') + 1);
  for (std::string_view p :
       {HALO_WEIGHT_Q_PROJ, HALO_WEIGHT_K_PROJ, HALO_WEIGHT_V_PROJ, HALO_WEIGHT_O_PROJ,
        HALO_WEIGHT_GATE_PROJ, HALO_WEIGHT_UP_PROJ, HALO_WEIGHT_DOWN_PROJ})
    if (suffix == p) return true;
  return false;
}

}  // namespace halo::model
