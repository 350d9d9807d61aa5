// The CUDA plugin's objects behind the opaque ABI handles.
//
// One halo device = tensor_parallel_size GPUs (ranks). Every rank holds a
// shard of each layer (column-parallel q/k/v and gate/up by heads and
// intermediate rows, row-parallel o/down by columns; embeddings, norms and
// lm_head replicated), its kv_heads / tp share of the paged KV cache, its own
// stream and cuBLAS handle; partial o/down outputs are summed with an NCCL
// all-reduce. The residual stream is fp32, GEMM inputs and the KV cache are
// the checkpoint's 16-bit type (bf16 for fp32 checkpoints).
//
// KV cache per rank: one allocation [layers][K|V][num_blocks, block_size,
// kv_heads/tp, head_dim].
//
// LoRA (ABI v1.6, HALO_CAP_LORA). prepare agrees max_loras slots of rank up
// to max_lora_rank and reserves them on every GPU at once (a pool of
// max_loras x the largest adapter, so loading an adapter never allocates and
// the KV cache is sized after it), plus a table LoraMat [layers][7
// projections][slots] that the kernels read at run time. lora_slot_set
// validates everything first (plugins/support), then converts each A [rank,
// in] and B [out, rank] to bf16 (B transposed to [rank, out]), takes this
// GPU's shard (q/k/v/gate/up: B's rows, o/down: A's columns, so the NCCL sum
// of o/down adds the partial updates too), uploads them into the slot's part
// of the pool and rewrites the table; num_weights 0 sets every rank of the
// slot to 0. A step groups its rows by slot (step_plan.h, plan_lora) and,
// after each projection's GEMM, runs kernels/lora.cuh's shrink (xa = x A^T,
// fp32) and expand (y += xa B^T into the fp32 GEMM output, at the
// projection's columns of q|k|v or gate|up) over tiles of one slot; rows of
// the base model are in no tile. Steps with no LoRA row launch nothing more
// (and replay graphs without LoRA kernels); a graph with them keeps working
// when a slot is refilled, since it reads the table, not the weights.
//
// Thread-safety: execute, kv_cache_copy_blocks and lora_slot_set on objects
// of one device are serialized by a device mutex.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "halo/device_abi.h"
#include "halo/plugin_support/validate.h"
#include "kernels/lora.cuh"
#include "kernels/quant_matmul.cuh"
#include "step_plan.h"

#if HALO_CUDA_HAVE_NCCL
#include <nccl.h>
#endif

namespace halo::cuda {

enum class Dt { BF16, F16 };

// Returns the number of visible GPUs or throws FAILED_PRECONDITION with the
// runtime's reason ("no device (driver not found)" and the like).
int visible_devices(const char* where);

struct DeviceState {
  std::vector<int> ordinals;  // GPUs of this halo device, rank order
  bool graphs = true;
  std::mutex mu;
#if HALO_CUDA_HAVE_NCCL
  std::vector<ncclComm_t> comms;
#endif
  ~DeviceState();
};

// A projection on one GPU: a 16-bit matrix [N, K] for cuBLAS, or (qtype set)
// a quantized one for the kernels of kernels/quant_matmul.cuh.
struct Proj {
  void* w16 = nullptr;
  int qtype = HALO_QUANT_NONE;
  k::QuantWeight q;
};

struct LayerW {
  Proj qkv, o, gate_up, down;
  float *qkv_bias = nullptr, *attn_norm = nullptr, *mlp_norm = nullptr, *q_norm = nullptr, *k_norm = nullptr;
};

struct Rank {
  int device = 0;
  cudaStream_t stream = nullptr;
  cublasHandle_t blas = nullptr;
  std::vector<void*> allocs;
  ~Rank();
  void* alloc(size_t bytes);  // throws OUT_OF_MEMORY naming the size
  // Weights.
  void* embed = nullptr;
  Proj lm_head;
  float* final_norm = nullptr;
  double* inv_freq = nullptr;
  std::vector<LayerW> layer;
  // Step buffers (capacity: max_num_batched_tokens rows).
  char* inputs = nullptr;
  size_t inputs_cap = 0;
  float *x = nullptr, *qkv = nullptr, *delta = nullptr, *gu = nullptr, *logits = nullptr;
  float *tmp_out = nullptr, *tmp_ml = nullptr;
  void *h = nullptr, *attn = nullptr, *act = nullptr, *hf = nullptr;
  // v1.6: LoRA slots (see the top of this file): the pool, the device table
  // [layers][kNumLoraProj][max_loras] and its host copy, the shrink output
  // xa [max_num_batched_tokens, 3 max_lora_rank].
  k::bf16* lora_pool = nullptr;
  k::LoraMat<k::bf16>* lora_table = nullptr;
  std::vector<k::LoraMat<k::bf16>> lora_host;
  float* lora_xa = nullptr;
  // Decode and verify graphs by (padded batch, rows per sequence), valid for
  // one KV cache (step_plan.h).
  std::map<GraphShape, cudaGraphExec_t> graphs;
  uint64_t graph_kv_id = 0;
  void drop_graphs();
};

}  // namespace halo::cuda

struct halo_device {
  int device_index = 0;
  std::shared_ptr<halo::cuda::DeviceState> state;
};

struct halo_executable {
  std::shared_ptr<halo::cuda::DeviceState> device;
  halo::plugin::ExecLimits lim;
  int32_t vocab = 0, hidden = 0, inter = 0, layers = 0, heads = 0, kv_heads = 0, head_dim = 0;
  int32_t tp = 1;
  float eps = 0.f;
  uint32_t flags = 0;
  halo_activation activation = HALO_ACTIVATION_SILU;
  halo::cuda::Dt dt = halo::cuda::Dt::BF16;
  int32_t max_num_seqs = 0, max_model_len = 0, max_num_batched_tokens = 0, block_size = 0;
  uint64_t kv_bytes_per_block = 0;
  int32_t part_size = 512, max_parts = 1, q_tile = 1, kv_tile = 16, logits_chunk = 256, max_graph_batch = 0;
  // v1.5: the proposed tokens per sequence a decode step verifies (agreed at
  // prepare); verify graphs have 1 + spec_tokens rows per sequence.
  int32_t spec_tokens = 0;
  // v1.6: LoRA slots agreed at prepare, which are filled, and where
  // projection p of layer l of a slot lies in its part of a rank's pool
  // (lora_off[2 (l * kNumLoraProj + p)] A, [... + 1] B^T; elements).
  int32_t max_loras = 0, max_lora_rank = 0;
  std::vector<uint8_t> lora_filled;
  std::vector<size_t> lora_off;
  size_t lora_slot_elems = 0;
  std::vector<std::unique_ptr<halo::cuda::Rank>> ranks;
  // Pinned host staging of the packed step inputs.
  char* host_inputs = nullptr;
  size_t host_inputs_cap = 0;
  // Pinned host staging of the 16-bit hidden_states rows (v1.5).
  char* host_hidden = nullptr;
  size_t host_hidden_cap = 0;
  ~halo_executable();
};

struct halo_kv_cache {
  const halo_executable* owner = nullptr;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  uint64_t id = 0;
  size_t array_elems = 0;      // elements of one K or V array of one layer on one rank
  std::vector<void*> base;     // per rank
  ~halo_kv_cache();
};

struct halo_buffer {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  int device = 0;
  void* data = nullptr;
  size_t bytes = 0;
  ~halo_buffer();
};

namespace halo::cuda {

void prepare(halo_prepare_args* args);
void kv_cache_create(halo_kv_cache_create_args* args);
void kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* args);
void execute(halo_execute_args* args);
void lora_slot_set(halo_lora_slot_args* args);

}  // namespace halo::cuda
