#pragma once
// A GGUF model file (llama.cpp's format) as halo's model: the spec from its
// metadata and the weights under their canonical names (device_abi.h).
//
// Architectures: llama (Llama, Mistral) -> LlamaForCausalLM, qwen2, qwen3,
// phi3. The config is built as the equivalent config.json and goes through
// parse_model_config, so every check of a Hugging Face config applies.
// Weights: F32/F16/BF16 stay plain (in place in the mapping when aligned);
// Q8_0, Q4_0, Q4_K, Q5_K, Q6_K projections become ABI quantized tensors
// (model/ggml_blocks.h, exact); embed_tokens is dequantized to fp32 when
// quantized, and a tied lm_head is then given as the quantized token_embd
// (the spec's TIED flag cleared). llama files carry q_proj / k_proj rows
// permuted by llama.cpp's converter (interleaved rotary pairs); the
// permutation is undone so that halo's neox rotary layout applies.
#include <filesystem>
#include <memory>
#include <optional>

#include "model/gguf.h"
#include "model/hf_config.h"
#include "model/weight_store.h"

namespace halo::model {

// The GGUF file `path` names: a regular file ending in .gguf, or the one
// .gguf file of a directory; nothing for anything else (a Hugging Face
// directory). A directory with several .gguf files and no config.json is
// refused naming them.
std::optional<std::filesystem::path> find_gguf(const std::filesystem::path& path);

// The model config from the file's metadata (and token_embd's shape).
ModelConfig gguf_model_config(const GgufFile& file);

// Adds every weight `config` expects to `store`, in canonical order; may
// clear the spec's TIED flag (a quantized tied embedding). Keeps `file`
// alive in the store.
void load_gguf_weights(const std::shared_ptr<const GgufFile>& file, ModelConfig& config,
                       WeightStore& store);

}  // namespace halo::model
