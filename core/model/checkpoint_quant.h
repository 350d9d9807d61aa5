#pragma once
// Pre-quantized Hugging Face checkpoints: config.json's quantization_config
// of GPTQ (4- or 8-bit, desc_act false) and compressed-tensors
// (pack-quantized W4A16, int-/naive-quantized W8A16 and W8A8). Each
// quantized projection becomes one ABI v1.4 quantized tensor:
//  - GPTQ: qweight int32 [in/8, out] (8 nibbles along the input), qzeros
//    int32 [groups, out/8], scales fp16 [groups, out]; w = s * (q - z - 1)
//    (checkpoint_format "gptq"; "gptq_v2" has no +1). Transposed into uint4
//    [out, in/2] with fp32 scales and offsets -s * (z + 1).
//  - compressed-tensors pack-quantized: weight_packed int32 [out, in/8] holds
//    q + 8 as nibbles in the ABI's order already (used in place);
//    weight_scale [out, groups]; weight_zero_point (asymmetric) packed along
//    the output dim; w = s * (q - zp).
//  - compressed-tensors int-/naive-quantized: weight int8 [out, in] (used in
//    place), weight_scale [out, 1] (channel), [out, groups] or [1] (tensor).
// Activation order (g_idx that is not k / group_size) is refused.
#include <cstdint>
#include <filesystem>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <string>

#include "model/safetensors.h"
#include "model/weight_map.h"
#include "model/weight_store.h"

namespace halo::model {

struct CheckpointQuantization {
  enum class Method { kNone, kGptq, kCompressedTensors } method = Method::kNone;
  int32_t bits = 0;
  int32_t group_size = 0;  // -1 / 0: per output channel
  bool symmetric = true;
  bool gptq_v1_zeros = true;  // GPTQ "gptq" format stores zero - 1
  std::string format;         // compressed-tensors "pack-quantized", "int-quantized", ...
  std::string source;         // the config.json, for messages
};

// Reads quantization_config from a parsed config.json; kNone when absent.
// Throws halo::Error for a method or setting halo cannot load, naming it.
CheckpointQuantization parse_checkpoint_quantization(const nlohmann::json& config,
                                                     const std::string& source);

// A tensor of the checkpoint by its Hugging Face name (null when absent), and
// its bytes aligned for use in place.
struct FoundTensor {
  const SafetensorsFile* file = nullptr;
  const TensorInfo* info = nullptr;
  const std::byte* data = nullptr;
};
using TensorLookup = std::function<FoundTensor(const std::string& hf_name)>;

// Adds projection `w` to the store as a quantized tensor when the checkpoint
// holds it quantized; false when it holds it plain (e.g. lm_head in the
// ignore list). Throws halo::Error naming the tensor for bad shapes/dtypes.
bool load_quantized_projection(const CheckpointQuantization& q, const WeightSource& w,
                               const TensorLookup& find, WeightStore& store);

}  // namespace halo::model
