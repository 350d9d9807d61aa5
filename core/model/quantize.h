#pragma once
// Weight-only quantization at load time (--quantization int8 | int4), as
// vLLM's on-the-fly options: the projection matrices of a loaded fp32/bf16/
// fp16 model are replaced by quantized copies in ABI v1.4's layout
// (halo_quantized_tensor); embeddings, norms and biases stay as they are.
//  - int8: symmetric, one fp32 scale per output channel (group = in);
//  - int4: asymmetric, uint4 values with an fp16 scale and offset per group
//    of `group_size` inputs (32 by default; 128 as GPTQ/AWQ checkpoints use).
// A tied lm_head is untied (embed_tokens stays plain, lm_head is quantized).
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "model/model_loader.h"

namespace halo::model {

struct QuantizationOptions {
  std::string method = "none";  // none | int8 | int4
  int32_t group_size = 0;       // 0: the method's default (int8: per channel, int4: 32)
};

// Throws halo::Error for an unknown method, a group size the model's
// matrices cannot be cut into, or a model whose weights are already quantized.
void quantize_model(LoadedModel& model, const QuantizationOptions& options);

// The same on a bare store and spec (a generated model, halo bench latency);
// the spec loses HALO_MODEL_TIED_EMBEDDINGS when lm_head is untied.
void quantize_weights(WeightStore& store, halo_model_spec& spec,
                      const QuantizationOptions& options);

// The methods (none, int8, int4): the one list every option parser checks
// against, and the same joined for help texts and messages.
const std::vector<std::string>& quantization_method_names();
std::string quantization_methods();
bool is_quantization_method(std::string_view method);

}  // namespace halo::model
