// The CPU plugin's objects behind the opaque ABI handles.
//
// Two kernel paths, chosen at prepare (HALO_CPU_KERNELS=fast|reference):
//  - fast (default): bf16 weights pre-packed for the vdpbf16ps GEMM (fp16
//    converted to bf16 at load; fp32 kept fp32), q/k/v and gate/up fused into
//    one matmul each, vectorized paged attention with online softmax, fused
//    residual+RMSNorm. Activations are rounded to bf16 at each matmul input;
//    quantized weights (ABI v1.4) run the int8 GEMM (gemm_q), activations
//    rounded to int8 in blocks of up to 32.
//  - reference: fp32 activations, weights read in place and converted in
//    registers (quantized weights dequantized to fp32 at load), scalar
//    two-pass attention: the numerical reference.
// Both are batch invariant: a row's result does not depend on its batch.
//
// KV cache layout: for every layer one K and one V array of
// [num_blocks, block_size, kv_heads, head_dim] elements of kv_dtype (fp32 or
// bf16), so flat slot s = block * block_size + offset starts at element
// s * kv_heads * head_dim.
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
#include "halo/kernels/attention.h"
#include "halo/kernels/gemm_bf16.h"
#include "halo/kernels/gemm_q.h"
#include "halo/kernels/kernels.h"
#include "halo/plugin_support/validate.h"
#include "lora.h"
#ifdef HALO_HAVE_ONEDNN
#include "halo/onednn/onednn.h"
#endif

namespace halo::cpu {

// The halo_quant_types prepare takes (ABI v1.4 halo_device_properties.quant_types).
inline constexpr uint32_t kQuantTypes =
    HALO_DTYPE_BIT(HALO_QUANT_INT8) | HALO_DTYPE_BIT(HALO_QUANT_UINT4);

struct DeviceState {
  explicit DeviceState(int threads) : pool(threads) {}
  kernels::ThreadPool pool;
  std::mutex exec_mu;  // one step at a time per device (the pool's scratch is shared)
};

using Matrix = halo::plugin::Matrix;  // a host weight as given to prepare

// One projection, possibly several checkpoint matrices fused along N (q|k|v,
// gate|up), run as a list of segments, each writing its own range of output
// columns. Parts of one format are fused into one segment; a projection whose
// parts differ (GGUF Q4_K_M: q, k uint4 and v int8; or some parts plain, some
// quantized, ABI v1.4) runs one segment per run of equal formats. A segment
// is read in place (reference; fp32 weights: kF32), packed for the bf16 GEMM,
// run by oneDNN (HALO_CPU_MATMUL=onednn) or packed for the int8 GEMM
// (quantized weights, kQuant). The reference path and dtype float32
// dequantize quantized parts to fp32 at load (`dequantized` owns them).
struct Linear {
  enum class Kind { kReference, kPackedBf16, kF32, kOneDnn, kQuant };
  struct Segment {
    size_t col = 0, n = 0;  // output columns [col, col + n)
    Kind kind = Kind::kReference;
    std::vector<kernels::WeightSource> parts;  // plain parts, rows of each in column order
    kernels::PackedWeight packed;
    kernels::PackedQWeight qpacked;
#ifdef HALO_HAVE_ONEDNN
    std::unique_ptr<onednn::Linear> dnnl;
#endif
  };
  std::vector<Segment> segments;
  size_t N = 0, K = 0;
  std::vector<float> bias;                      // [N] or empty
  std::vector<std::vector<float>> dequantized;  // fp32 copies of quantized parts (reference)
};

struct Layer {
  Linear qkv, o_proj, gate_up, down_proj;  // as run
  std::vector<float> attn_norm, mlp_norm;  // fp32 copies of the small vectors
  std::vector<float> q_norm, k_norm;
};

// Attention work item of one step: a chunk [q0, q1) of one sequence's query
// tokens against one kv head.
struct AttnItem {
  int32_t seq, head, q0, q1;
};

struct FreeDeleter {
  void operator()(void* p) const noexcept { std::free(p); }
};
using ByteArray = std::unique_ptr<char, FreeDeleter>;

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
  bool fast = true;  // kernel path (see the top of this file)
  halo::kernels::DType kv_dtype = halo::kernels::DType::F32;
  // Weights, used in place (reference) or packed (fast).
  halo::cpu::Matrix embed;
  halo::cpu::Linear lm_head_run;
  std::vector<halo::cpu::Layer> layer;
  std::vector<float> final_norm;
  // v1.6: LoRA adapter slots (lora.h); filled by lora_slot_set.
  halo::cpu::LoraSlots lora;
  // Step scratch, grown on demand and reused.
  struct Scratch {
    std::vector<float> x, h, q, k, v, attn, tmp, gate, up, cos, sin, final_rows, qkv, gu;
    std::vector<int32_t> tok_seq, tok_ctx;
    halo::kernels::GemmScratch gemm;
    halo::kernels::GemmQScratch gemm_q;
    std::vector<halo::cpu::AttnItem> attn_items;
  } scratch;
};

struct halo_kv_cache {
  const halo_executable* owner = nullptr;
  int32_t num_blocks = 0;
  int32_t block_size = 0;
  halo::kernels::DType dtype = halo::kernels::DType::F32;
  size_t block_bytes = 0;                  // bytes of one block of one layer (K or V)
  std::vector<halo::cpu::ByteArray> k, v;  // [layers]
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
void lora_slot_set(halo_lora_slot_args* args);
// The forward pass of one validated step (forward.cpp).
void forward_reference(halo_executable& exe, const halo_kv_cache& kv, const halo_execute_args& a);
void forward_fast(halo_executable& exe, const halo_kv_cache& kv, const halo_execute_args& a);

}  // namespace halo::cpu
