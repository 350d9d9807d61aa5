// The CPU plugin's objects behind the opaque ABI handles.
//
// KV cache layout (fp32): for every layer one K and one V array of
// [num_blocks, block_size, kv_heads, head_dim], so flat slot
// s = block * block_size + offset starts at element s * kv_heads * head_dim.
//
// Thread-safety: a device owns one thread pool; execute() calls on
// executables of the same device are serialized by a device mutex, so
// concurrent calls are safe but do not run in parallel. kv_cache_copy_blocks
// must not run concurrently with an execute() on the same cache.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "halo/device_abi.h"
#include "halo/plugin_support/validate.h"
#include "halo/kernels/kernels.h"

namespace halo::cpu {

struct DeviceState {
  explicit DeviceState(int threads) : pool(threads) {}
  kernels::ThreadPool pool;
  std::mutex exec_mu;  // one step at a time per device (the pool's scratch is shared)
};

using Matrix = halo::plugin::Matrix;  // a host weight as given to prepare

struct Layer {
  Matrix q, k, v, o, gate, up, down;
  std::vector<float> attn_norm, mlp_norm;  // fp32 copies of the small vectors
  std::vector<float> q_bias, k_bias, v_bias;
  std::vector<float> q_norm, k_norm;
};

struct FreeDeleter {
  void operator()(float* p) const noexcept { std::free(p); }
};
using FloatArray = std::unique_ptr<float, FreeDeleter>;

}  // namespace halo::cpu

struct halo_device {
  int device_index = 0;
  int threads = 1;
  std::shared_ptr<halo::cpu::DeviceState> state;
};

struct halo_executable {
  std::shared_ptr<halo::cpu::DeviceState> device;
  // Spec (validated).
  std::string architecture;
  int32_t vocab = 0, hidden = 0, inter = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float eps = 0.f;
  uint32_t flags = 0;
  halo_activation activation = HALO_ACTIVATION_SILU;
  std::vector<double> inv_freq;  // [head_dim / 2], scaling applied
  // Agreed limits.
  int32_t max_num_seqs = 0, max_model_len = 0, max_num_batched_tokens = 0, block_size = 0;
  uint64_t kv_bytes_per_block = 0;
  // Weights, used in place.
  halo::cpu::Matrix embed, lm_head;
  std::vector<halo::cpu::Layer> layer;
  std::vector<float> final_norm;
  // Step scratch, grown on demand and reused.
  struct Scratch {
    std::vector<float> x, h, q, k, v, attn, tmp, gate, up, cos, sin, final_rows;
    std::vector<int32_t> tok_seq, tok_ctx;
  } scratch;
};

struct halo_kv_cache {
  const halo_executable* owner = nullptr;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  size_t block_floats = 0;  // floats of one block of one layer (K or V)
  std::vector<halo::cpu::FloatArray> k, v;  // [layers]
};

struct halo_buffer {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<uint8_t> bytes;
};

namespace halo::cpu {

void prepare(halo_prepare_args* args);
void kv_cache_create(halo_kv_cache_create_args* args);
void kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* args);
void execute(halo_execute_args* args);

}  // namespace halo::cpu
