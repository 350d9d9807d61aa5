#include "engine/engine_config.h"

#include <fmt/format.h>

#include <cctype>

#include "common/error.h"

namespace halo::engine {

int32_t parse_kv_cache_dtype(const std::string& s) {
  std::string v;
  for (char c : s) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v.empty() || v == "auto") return HALO_KV_DTYPE_AUTO;
  if (v == "fp32" || v == "float32" || v == "float") return HALO_KV_DTYPE_FP32;
  if (v == "bf16" || v == "bfloat16") return HALO_KV_DTYPE_BF16;
  if (v == "fp16" || v == "float16" || v == "half") return HALO_KV_DTYPE_FP16;
  throw Error(fmt::format(
      "--kv-cache-dtype={}: expected auto, fp32 (float32), bf16 (bfloat16) or fp16 (float16, half)",
      s));
}

halo_limits propose_limits(const EngineConfig& flags, const device::Plugin& plugin,
                           const halo_limits& fallback) {
  auto pick = [](int flag, int32_t otherwise) { return flag > 0 ? flag : otherwise; };
  halo_limits lim{};
  lim.struct_size = sizeof(lim);
  lim.max_num_seqs = pick(flags.max_num_seqs, fallback.max_num_seqs);
  lim.max_model_len = pick(flags.max_model_len, fallback.max_model_len);
  lim.max_num_batched_tokens = pick(flags.max_num_batched_tokens, fallback.max_num_batched_tokens);
  lim.block_size = pick(flags.block_size, fallback.block_size);
  lim.kv_cache_dtype = parse_kv_cache_dtype(flags.kv_cache_dtype);
  if (flags.enable_lora) {
    if (flags.max_loras < 1 || flags.max_lora_rank < 1)
      throw Error(fmt::format("--max-loras={} and --max-lora-rank={} must be at least 1",
                              flags.max_loras, flags.max_lora_rank));
    lim.max_loras = flags.max_loras;
    lim.max_lora_rank = flags.max_lora_rank;
  }
  if (lim.kv_cache_dtype != HALO_KV_DTYPE_AUTO && plugin.api().abi_minor < 2)
    throw Error(fmt::format(
        "--kv-cache-dtype={} needs a plugin of ABI v1.2 or later; plugin '{}' is v{}.{}",
        flags.kv_cache_dtype, plugin.name(), plugin.api().abi_major, plugin.api().abi_minor));
  return lim;
}

void check_agreed_limits(const EngineConfig& flags, const halo_limits& lim,
                         const device::Plugin& plugin) {
  auto agree = [&](const char* flag, int asked, int agreed) {
    if (asked > 0 && asked != agreed)
      throw Error(
          fmt::format("{}={} contradicts the device: plugin '{}' runs this model with {}={}", flag,
                      asked, plugin.name(), flag + 2, agreed));
  };
  agree("--max-num-seqs", flags.max_num_seqs, lim.max_num_seqs);
  agree("--max-model-len", flags.max_model_len, lim.max_model_len);
  agree("--max-num-batched-tokens", flags.max_num_batched_tokens, lim.max_num_batched_tokens);
  agree("--block-size", flags.block_size, lim.block_size);
  const int32_t kv_asked = parse_kv_cache_dtype(flags.kv_cache_dtype);
  if (kv_asked != HALO_KV_DTYPE_AUTO && lim.kv_cache_dtype != kv_asked)
    throw Error(fmt::format(
        "--kv-cache-dtype={} contradicts the device: plugin '{}' stores the KV cache as {}",
        halo_kv_dtype_name(kv_asked), plugin.name(), halo_kv_dtype_name(lim.kv_cache_dtype)));
  if (flags.enable_lora &&
      (lim.max_loras < flags.max_loras || lim.max_lora_rank < flags.max_lora_rank))
    throw Error(fmt::format(
        "--enable-lora: plugin '{}' runs {} adapter slots of rank up to {}, not the asked "
        "--max-loras={} --max-lora-rank={}{}",
        plugin.name(), lim.max_loras, lim.max_lora_rank, flags.max_loras, flags.max_lora_rank,
        lim.max_loras == 0 ? " (it has no LoRA slots: ABI v1.6 HALO_CAP_LORA)" : ""));
  if (lim.max_num_seqs <= 0 || lim.max_model_len <= 0 || lim.max_num_batched_tokens <= 0 ||
      lim.block_size <= 0 || lim.kv_bytes_per_block == 0)
    throw Error(
        fmt::format("plugin '{}' returned incomplete limits: max_num_seqs={} max_model_len={} "
                    "max_num_batched_tokens={} block_size={} kv_bytes_per_block={}",
                    plugin.name(), lim.max_num_seqs, lim.max_model_len, lim.max_num_batched_tokens,
                    lim.block_size, lim.kv_bytes_per_block));
}

model::LoadOptions load_options(const EngineConfig& flags) {
  return model::LoadOptions{flags.quantization, flags.quantization_group_size};
}

}  // namespace halo::engine
