#pragma once
// The engine's flags and the limits a model runs with: what the core proposes
// to the device's prepare (ABI halo_limits) and the checks on the device's
// answer. One rule for LLMEngine and `halo bench latency`. Pure functions.
#include <cstdint>
#include <string>

#include "device/plugin.h"
#include "model/model_loader.h"

namespace halo::engine {

// Engine flags, named as vLLM names them. 0 means "the device's choice"; a
// value set explicitly that the device cannot honour is an error.
struct EngineConfig {
  std::string device = "cpu";
  int device_index = 0;
  int max_num_seqs = 0;            // CPU: 256
  int max_model_len = 0;           // CPU: the model's max_position_embeddings
  int max_num_batched_tokens = 0;  // CPU: max(2048, max_model_len)
  int block_size = 0;              // CPU: 16
  uint64_t kv_cache_memory = 0;    // bytes for KV; wins over the fraction
  float device_memory_utilization = 0.9f;
  int64_t max_kv_tokens = 0;  // like TensorRT-LLM's max_tokens_in_paged_kv_cache
  bool enable_chunked_prefill = true;
  bool enable_prefix_caching = false;  // reuse KV blocks of shared prompt prefixes
  // Prefix-cache block hashes chain from block_hash_root(seed, model name)
  // (engine/block_hash.h), so that a router can compute them from a prompt.
  std::string prefix_hash_seed;
  std::string served_model_name;
  bool enable_kv_cache_events = false;  // record KvCacheEvents (LLMEngine::take_kv_events)
  uint64_t seed = 0;
  int threads = 0;  // plugin option "threads"; 0 = all cores
  std::string kv_cache_dtype =
      "auto";  // auto | fp32 | bf16 | fp16 (ABI v1.2 limits.kv_cache_dtype)
  device::Options plugin_options;
  // Weight quantization at load (vLLM's --quantization): none | int8 | int4;
  // group size 0 = the method's default (model/quantize.h).
  std::string quantization = "none";
  int quantization_group_size = 0;
  // vLLM's --speculative-config JSON (engine/spec_decode/speculative_config.h); empty = off.
  std::string speculative_config;
  // LoRA adapters (vLLM's --enable-lora, --max-loras, --max-lora-rank,
  // --max-cpu-loras; 0 = as many host copies as adapters).
  bool enable_lora = false;
  int max_loras = 1;
  int max_lora_rank = 16;
  int max_cpu_loras = 0;
};

// What LoadedModel::load needs of the flags.
model::LoadOptions load_options(const EngineConfig& flags);

// --kv-cache-dtype as the ABI's halo_kv_dtype; throws halo::Error naming the
// accepted spellings (auto, fp32/float32, bf16/bfloat16, fp16/float16/half).
int32_t parse_kv_cache_dtype(const std::string& s);

// The limits prepare is asked for: each flag of `flags`, or `fallback`'s
// value where the flag is 0; the KV element type asked. Throws when a flag
// needs a newer plugin (--kv-cache-dtype before ABI v1.2).
halo_limits propose_limits(const EngineConfig& flags, const device::Plugin& plugin,
                           const halo_limits& fallback = {});

// Checks the device's answer: every flag set explicitly is what the device
// agreed (else an Error naming both values, never a silent change), and the
// answer is complete (positive limits and KV bytes per block).
void check_agreed_limits(const EngineConfig& flags, const halo_limits& agreed,
                         const device::Plugin& plugin);

}  // namespace halo::engine
