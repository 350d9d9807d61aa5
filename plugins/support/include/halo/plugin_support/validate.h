// Argument validation shared by the in-tree plugins (cpu, cuda): the spec,
// named weights and execute arguments, with the same codes and messages
// everywhere (what the conformance suite checks).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <string>
#include <vector>

#include "halo/device_abi.h"
#include "halo/kernels/dtype.h"
#include "halo/kernels/kernels.h"

namespace halo::plugin {

std::string shape_str(const int64_t* shape, int ndim);
std::string dtype_str(DLDataType t);
// Data pointer of a contiguous row-major host tensor (byte_offset applied).
const void* contiguous_data(const char* where, const std::string& name, const DLTensor* t);
kernels::DType weight_dtype(const std::string& name, DLDataType t);

// A host weight as given to prepare.
struct Matrix {
  const void* data = nullptr;
  kernels::DType dtype = kernels::DType::F32;
};

class WeightSet {
 public:
  WeightSet(const halo_named_tensor* weights, size_t n);
  // Validates a weight of the expected shape and returns its data and dtype.
  Matrix get(const std::string& name, std::initializer_list<int64_t> shape) const;
  std::vector<float> vec(const std::string& name, int64_t n) const;
  bool has(const std::string& name) const { return map_.count(name) != 0; }

 private:
  std::map<std::string, const DLTensor*, std::less<>> map_;
};

// v1.4: a quantized weight's host data, validated.
struct QuantMatrix {
  int32_t type = HALO_QUANT_NONE;  // halo_quant_type
  int32_t group_size = 0;
  int64_t rows = 0, cols = 0;
  const uint8_t* values = nullptr;  // int8 [rows, cols] or uint4 nibbles [rows, cols / 2]
  const void* scales = nullptr;     // [rows, cols / group_size] of scale_dtype
  const void* offsets = nullptr;    // nullable, as scales
  kernels::DType scale_dtype = kernels::DType::F32;
};

// Checks one halo_quantized_tensor against the ABI's rules (device_abi.h):
// a type among `accepted` (HALO_DTYPE_BIT(halo_quant_type) bits), rows x cols
// equal to `shape` ({out, in}), group_size a positive multiple of 16 dividing
// cols, values int8 [rows, cols] / uint8 [rows, cols / 2], scales and offsets
// (offsets nullable) of one dtype among fp32/bf16/fp16 and shape [rows, cols /
// group_size], all dense host tensors. INVALID_ARGUMENT naming the weight.
QuantMatrix check_quantized_tensor(const halo_quantized_tensor& q,
                                   std::initializer_list<int64_t> shape, uint32_t accepted);

// The quantized weights of prepare (none when the caller's struct predates
// v1.4), by name; a name given twice, or also as a plain weight, is refused.
class QuantizedSet {
 public:
  QuantizedSet(const halo_prepare_args* args, const WeightSet& plain);
  // NULL when `name` is not quantized.
  const halo_quantized_tensor* find(const std::string& name) const;
  size_t size() const { return map_.size(); }

 private:
  std::map<std::string, const halo_quantized_tensor*, std::less<>> map_;
};

// `plugin` names the plugin in the refusal of a compiled model (v1.1 field).
void validate_spec(const halo_model_spec* s, const char* plugin);

struct ExecLimits {
  int32_t vocab = 0, max_num_seqs = 0, max_model_len = 0, max_num_batched_tokens = 0,
          block_size = 0;
};
struct KvLimits {
  int32_t num_blocks = 0, block_size = 0;
};
void validate_execute(const halo_execute_args* a, const ExecLimits* exe, const KvLimits* kv);
// kv_cache_copy_blocks after its kv_cache NULL check: pointers, num_pairs, every
// index in [0, num_blocks) (OUT_OF_RANGE), and no destination repeated or also
// a source (INVALID_ARGUMENT: the result would depend on the copy order).
// False for num_pairs = 0, the no-op.
bool validate_copy_blocks(const halo_kv_cache_copy_blocks_args* a, int32_t num_blocks);

// The kernels' RoPE parameters for a (validated) spec.
kernels::RopeParams rope_params(const halo_model_spec& s);

// Buffers (HALO_CAP_BUFFERS): the element size of a supported dtype (fp32,
// bf16, fp16, int32, int64, uint8) and the bytes of a contiguous host tensor;
// both throw INVALID_ARGUMENT naming `where` for anything else.
// v1.2 KV cache dtype negotiation. The type a caller proposed (AUTO when the
// caller is older than v1.2).
int32_t proposed_kv_dtype(const halo_limits* lim);
// Fails prepare with INVALID_ARGUMENT naming the plugin and the type unless
// `proposed` is AUTO or one of `supported`.
void check_kv_dtype(const char* plugin, int32_t proposed, std::initializer_list<int32_t> supported);
// Writes the agreed type back when the caller's struct has the field.
void set_kv_dtype(halo_limits* lim, int32_t agreed);
// v1.3: reports the prepared model's halo_compute_dtype when the caller's
// struct has the field.
void set_compute_dtype(halo_limits* lim, int32_t dtype);

size_t buffer_elem_size(const char* where, DLDataType t);
// buffer_to_host: INVALID_ARGUMENT naming `where` unless the host tensor has
// the buffer's dtype and shape.
void check_host_matches_buffer(const char* where, const DLTensor* t, DLDataType dtype,
                               const std::vector<int64_t>& shape);
size_t host_tensor_bytes(const char* where, const DLTensor* t);

}  // namespace halo::plugin
