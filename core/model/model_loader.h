#pragma once
// A Hugging Face model directory loaded for a device plugin: the config as a
// halo_model_spec and every weight as a DLTensor under its canonical name,
// pointing straight into the memory-mapped safetensors files (no copies).
//
//   auto model = halo::model::LoadedModel::load("models/pkgchat-5m");
//   prepare_args.spec = &model.config().spec;
//   prepare_args.weights = model.weights().data();
//   prepare_args.num_weights = model.weights().size();
#include <halo/device_abi.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <nlohmann/json_fwd.hpp>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/hf_config.h"
#include "model/weight_store.h"

namespace halo::model {

// How to load: what vLLM's --quantization and halo's --quantization-group-size say.
struct LoadOptions {
  std::string quantization = "none";  // none | int8 | int4 (model/quantize.h)
  int32_t quantization_group_size = 0;
};

// The config of what LoadedModel::load(path) would load (config.json, or a
// GGUF file's metadata), without mapping the weights.
ModelConfig load_config(const std::filesystem::path& model_path);

class LoadedModel {
 public:
  // Reads config.json (+ generation_config.json) and maps model.safetensors,
  // or the shards model.safetensors.index.json names. Every expected tensor
  // must exist with its exact shape and an F32/BF16/F16 dtype; extra tensors
  // are ignored. Throws halo::Error naming the file and tensor.
  // A compiled model directory (halo compile: a manifest.json whose "format"
  // is "halo-compiled-model/1" next to config.json and the tokenizer files)
  // loads with no weights: config().compiled_model_dir() and the spec's
  // compiled_model_dir / compiled_target tell the plugin where to read it.
  // A GGUF model (model/gguf_model.h) loads from a path that is a .gguf
  // file or a directory holding exactly one.
  static LoadedModel load(const std::filesystem::path& model_dir);
  // Same, then quantized at load time as `options` ask (model/quantize.h).
  static LoadedModel load(const std::filesystem::path& model_dir, const LoadOptions& options);

  LoadedModel(LoadedModel&&) noexcept;
  LoadedModel& operator=(LoadedModel&&) noexcept;
  LoadedModel(const LoadedModel&) = delete;
  LoadedModel& operator=(const LoadedModel&) = delete;
  ~LoadedModel();

  const ModelConfig& config() const;
  // Canonical order (embed_tokens, layers.{i}.*, final_norm, lm_head). The
  // names, DLTensors, shapes and data stay valid, at the same addresses, for
  // as long as this object (or the one it is moved into) lives.
  std::span<const halo_named_tensor> weights() const;
  // ABI v1.4: the weights given quantized (same lifetime rules). A name is in
  // weights() or here, never both.
  std::span<const halo_quantized_tensor> quantized_weights() const;
  // The plain weight with this canonical name, or null.
  const DLTensor* find(std::string_view canonical_name) const;
  const WeightStore& store() const;
  // For loaders that transform a loaded model (quantization at load time):
  // the spans above are invalidated by changes.
  WeightStore& mutable_store();
  ModelConfig& mutable_config();
  bool is_compiled() const;
  // Bytes of all canonical weights as the device reads them (slices of fused
  // tensors counted once each; quantized weights with their scales).
  uint64_t weight_bytes() const;
  // The safetensors files mapped, in the order they were opened (or the
  // GGUF file).
  std::vector<std::filesystem::path> files() const;
  // A GGUF model's metadata, every key (tokenizer.ggml.* to build the
  // tokenizer from, tokenizer.chat_template); null for a Hugging Face model.
  const nlohmann::json* gguf_metadata() const;

 private:
  struct Impl;
  explicit LoadedModel(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace halo::model
