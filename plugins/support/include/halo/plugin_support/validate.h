// Argument validation shared by the in-tree plugins (cpu, cuda): the spec,
// named weights and execute arguments, with the same codes and messages
// everywhere (what the conformance suite checks).
#pragma once

#include <cstdint>
#include <initializer_list>
#include <map>
#include <set>
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
// v1.4: the layout rules of a halo_quantized_tensor (device_abi.h), whatever
// the device: a known type, 0 < group_size dividing cols and a multiple of 16
// (or == cols), values int8 [rows, cols] / uint8 [rows, cols/2], scales (and
// offsets, if any) fp32/fp16/bf16 [rows, cols/group_size] of one dtype, all
// contiguous on the host. INVALID_ARGUMENT naming `where` and the weight.
void check_quantized_tensor(const char* where, const halo_quantized_tensor& q);

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

// v1.4: a quantized weight (halo_quantized_tensor) with its generic checks
// passed: type, group size, and values/scales/offsets of the documented dtype
// and shape, dense, in host memory. rows/cols are the tensor's own; whether
// they are the model's is the caller's check (QuantizedSet::get).
struct QuantMatrix {
  std::string name;
  int32_t type = 0;  // halo_quant_type
  int64_t group = 0, rows = 0, cols = 0;
  const void* values = nullptr;
  const void* scales = nullptr;
  const void* offsets = nullptr;  // NULL: symmetric
  kernels::DType scale_dtype = kernels::DType::F32;
  size_t bytes() const;  // values + scales + offsets as given
};

// Checks one halo_quantized_tensor; INVALID_ARGUMENT naming the weight for a
// type outside `accepted` (HALO_DTYPE_BIT mask, the device's quant_types), a
// group size that is not a positive multiple of 16 dividing cols, or a
// values/scales/offsets tensor of another dtype or shape, strided or not in
// host memory.
QuantMatrix validate_quantized(const halo_quantized_tensor& q, uint32_t accepted);

// The quantized weights of a prepare (v1.4), read only when the caller's
// struct reaches num_quantized_weights. Each is validated on construction and
// refused when `plain` has the same name. get() hands out those the model
// uses; check_all_used() then refuses any other (not a projection of this
// model: embed_tokens, a norm, a name the architecture lacks).
class QuantizedSet {
 public:
  QuantizedSet(const halo_prepare_args* args, uint32_t accepted, const WeightSet& plain);
  // The weight `name` when given quantized (else nullptr), checked to be [rows, cols].
  const QuantMatrix* get(const std::string& name, int64_t rows, int64_t cols) const;
  void check_all_used() const;
  // check_all_used's refusal for one name now, if it was given (a weight
  // that is never quantized and is read before the projections: embed_tokens).
  void refuse_if_given(const std::string& name) const;
  bool empty() const { return map_.empty(); }

 private:
  std::map<std::string, QuantMatrix, std::less<>> map_;
  mutable std::set<std::string, std::less<>> used_;
};

// `plugin` names the plugin in the refusal of a compiled model (v1.1 field).
void validate_spec(const halo_model_spec* s, const char* plugin);

struct ExecLimits {
  int32_t vocab = 0, max_num_seqs = 0, max_model_len = 0, max_num_batched_tokens = 0,
          block_size = 0;
  // v1.5: the width of halo_execute_args.hidden_states rows; 0 = the plugin
  // does not fill them (no HALO_CAP_HIDDEN_STATES), so they are not checked.
  int32_t hidden = 0;
};
struct KvLimits {
  int32_t num_blocks = 0, block_size = 0;
};
void validate_execute(const halo_execute_args* a, const ExecLimits* exe, const KvLimits* kv);
// v1.5: the caller's hidden_states output, or NULL when it did not ask (or is
// older than v1.5). validate_execute has checked its shape when exe->hidden > 0.
DLTensor* hidden_states_out(const halo_execute_args* a);
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
// v1.5: the proposed tokens per sequence the caller wants verified in a
// decode step (0 from a caller older than v1.5; INVALID_ARGUMENT when
// negative), and the plugin's answer, written back when the caller's struct
// has the field.
int32_t proposed_spec_tokens(const halo_limits* lim);
void set_spec_tokens(halo_limits* lim, int32_t agreed);

size_t buffer_elem_size(const char* where, DLDataType t);
// buffer_to_host: INVALID_ARGUMENT naming `where` unless the host tensor has
// the buffer's dtype and shape.
void check_host_matches_buffer(const char* where, const DLTensor* t, DLDataType dtype,
                               const std::vector<int64_t>& shape);
size_t host_tensor_bytes(const char* where, const DLTensor* t);

}  // namespace halo::plugin
