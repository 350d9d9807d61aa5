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
  // v1.6: the agreed limits.max_loras. execute's lora_slots (when the
  // caller's struct has the field and it is not NULL) must each be -1 or in
  // [0, max_loras) (OUT_OF_RANGE); with max_loras = 0 a slot >= 0 is refused
  // UNIMPLEMENTED, naming no_lora_reason (default: no HALO_CAP_LORA).
  int32_t max_loras = 0;
  const char* no_lora_reason = nullptr;
};
struct KvLimits {
  int32_t num_blocks = 0, block_size = 0;
};
void validate_execute(const halo_execute_args* a, const ExecLimits* exe, const KvLimits* kv);
// v1.5: the caller's hidden_states output, or NULL when it did not ask (or is
// older than v1.5). validate_execute has checked its shape when exe->hidden > 0.
DLTensor* hidden_states_out(const halo_execute_args* a);
// v1.6: the caller's lora_slots ([num_seqs]), or NULL when it passed none
// (or is older than v1.6). validate_execute has checked every entry.
const int32_t* lora_slots_in(const halo_execute_args* a);
// The lora_slots part of validate_execute, for a plugin with checks of its own
// (num_seqs already checked): each entry -1 or in [0, max_loras)
// (OUT_OF_RANGE); with max_loras = 0 an entry >= 0 is UNIMPLEMENTED, the
// message naming no_lora_reason (NULL: no HALO_CAP_LORA).
void check_lora_slots(const halo_execute_args* a, int32_t max_loras, const char* no_lora_reason);
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

// ------------------------------------------------------- v1.6: LoRA

// The projections an adapter may target, in the order plugins keep them.
enum LoraProj : int { kLoraQ, kLoraK, kLoraV, kLoraO, kLoraGate, kLoraUp, kLoraDown, kNumLoraProj };
const char* lora_proj_name(int proj);  // "q_proj", ...

// The shapes a slot's adapters must fit: a projection's W is [out, in].
struct LoraModel {
  int32_t num_layers = 0, hidden = 0, intermediate = 0, q_out = 0,
          kv_out = 0;  // q_out = heads*head_dim
  int64_t in(int proj) const;
  int64_t out(int proj) const;
};

// One projection's adapter as given: A [rank, in] and B [out, rank], each
// fp32, bf16 or fp16, contiguous host memory.
struct LoraWeight {
  int32_t layer = 0;
  int proj = 0;  // LoraProj
  int64_t rank = 0, in = 0, out = 0;
  const void* a = nullptr;
  const void* b = nullptr;
  kernels::DType a_dtype = kernels::DType::F32, b_dtype = kernels::DType::F32;
};

// lora_slot_set after its executable NULL check: the slot in [0, max_loras)
// and every rank <= max_lora_rank (OUT_OF_RANGE); a NULL weights array with
// num_weights > 0, a NULL name or tensor, a name twice, a name that is not
// "layers.{i}.{q,k,v,o,gate,up,down}_proj" HALO_LORA_A_SUFFIX / _B_SUFFIX
// with i < num_layers, an A without its B or a B without its A, a dtype other
// than fp32/bf16/fp16, a shape other than A [r, in], B [out, r] with r >= 1,
// or a strided, misaligned or non-host tensor (INVALID_ARGUMENT, naming the
// weight and, for a shape, expected against given). Checks everything before
// returning, so a plugin that validates first leaves a refused slot as it
// was. The adapters in (layer, projection) order; empty for num_weights = 0.
std::vector<LoraWeight> validate_lora_slot(const halo_lora_slot_args* a, const LoraModel& m,
                                           int32_t max_loras, int32_t max_lora_rank);

// prepare: the slots and largest rank the caller proposes, 0 and 0 when its
// limits struct ends before max_lora_rank (a v1.5 caller: on LP64 max_loras
// lies in the v1.5 struct's tail padding, so struct_size covering max_loras
// alone proves nothing); INVALID_ARGUMENT when negative.
struct LoraProposal {
  int32_t max_loras = 0, max_lora_rank = 0;
};
LoraProposal proposed_lora(const halo_limits* lim);
// Writes the answer back when the caller's struct has both fields.
void set_lora_limits(halo_limits* lim, int32_t max_loras, int32_t max_lora_rank);

size_t buffer_elem_size(const char* where, DLDataType t);
// buffer_to_host: INVALID_ARGUMENT naming `where` unless the host tensor has
// the buffer's dtype and shape.
void check_host_matches_buffer(const char* where, const DLTensor* t, DLDataType dtype,
                               const std::vector<int64_t>& shape);
size_t host_tensor_bytes(const char* where, const DLTensor* t);

}  // namespace halo::plugin
