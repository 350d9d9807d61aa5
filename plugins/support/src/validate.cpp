// Validation of the CUDA plugin, copied from the CPU plugin
// (plugins/cpu/src/model.cpp) so that both devices refuse the same inputs with
// the same codes and messages.
#include "halo/plugin_support/validate.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <string_view>
#include <type_traits>

#include "halo/plugin_support/errors.h"

namespace halo::plugin {

using kernels::DType;

std::string shape_str(const int64_t* shape, int ndim) {
  std::string s = "[";
  for (int i = 0; i < ndim; ++i) s += (i ? ", " : "") + std::to_string(shape ? shape[i] : -1);
  return s + "]";
}

std::string dtype_str(DLDataType t) {
  const char* code = t.code == kDLFloat    ? "float"
                     : t.code == kDLBfloat ? "bfloat"
                     : t.code == kDLInt    ? "int"
                     : t.code == kDLUInt   ? "uint"
                                           : "code";
  std::string s = cat(code, static_cast<int>(t.bits));
  if (t.lanes != 1) s += cat("x", t.lanes);
  return s;
}

// Data pointer of a contiguous row-major host tensor (byte_offset applied).
const void* contiguous_data(const char* where, const std::string& name, const DLTensor* t) {
  if (t->device.device_type != kDLCPU)
    invalid(where, ": ", name, " is on device_type=", static_cast<int>(t->device.device_type),
            ", expected kDLCPU (1)");
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr))
    invalid(where, ": ", name, " has ndim=", t->ndim, " and shape=", t->shape ? "set" : "NULL");
  if (t->strides != nullptr) {
    int64_t expect = 1;
    for (int i = t->ndim - 1; i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expect)
        invalid(where, ": ", name, " is not contiguous: strides[", i, "]=", t->strides[i],
                ", expected ", expect, " for shape ", shape_str(t->shape, t->ndim));
      expect *= t->shape[i];
    }
  }
  int64_t numel = 1;
  for (int i = 0; i < t->ndim; ++i) numel *= t->shape[i];
  if (numel > 0 && t->data == nullptr) invalid(where, ": ", name, " has data=NULL");
  return static_cast<const char*>(t->data) + t->byte_offset;
}

DType weight_dtype(const std::string& name, DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::F32;
    if (t.code == kDLBfloat && t.bits == 16) return DType::BF16;
    if (t.code == kDLFloat && t.bits == 16) return DType::F16;
  }
  invalid("prepare: weight '", name, "' has dtype ", dtype_str(t),
          ", expected float32, bfloat16 or float16");
}

namespace {

// `want` NULL: any of fp32, fp16, bf16.
void check_quant_part(const char* where, const std::string& what, const DLTensor* t,
                      const DLDataType* want, int64_t rows, int64_t cols) {
  contiguous_data(where, what, t);
  const DLDataType d = t->dtype;
  const bool ok = d.lanes == 1 && (want ? d.code == want->code && d.bits == want->bits
                                        : (d.code == kDLFloat && (d.bits == 32 || d.bits == 16)) ||
                                              (d.code == kDLBfloat && d.bits == 16));
  if (!ok)
    invalid(where, ": ", what, " has dtype ", dtype_str(d), ", expected ",
            want ? dtype_str(*want) : std::string("float32, float16 or bfloat16"));
  if (t->ndim != 2 || t->shape[0] != rows || t->shape[1] != cols)
    invalid(where, ": ", what, " has shape ", shape_str(t->shape, t->ndim), ", expected [", rows,
            ", ", cols, "]");
}

}  // namespace

void check_quantized_tensor(const char* where, const halo_quantized_tensor& q) {
  const std::string name = q.name ? q.name : "(NULL name)";
  if (!q.name || !q.values || !q.scales)
    invalid(where, ": quantized weight '", name, "' has a NULL name, values or scales");
  if (q.type != HALO_QUANT_INT8 && q.type != HALO_QUANT_UINT4)
    invalid(where, ": quantized weight '", name, "' has an unknown type ", q.type);
  if (q.rows <= 0 || q.cols <= 0 || q.group_size <= 0 || q.cols % q.group_size != 0 ||
      (q.group_size != q.cols && q.group_size % 16 != 0))
    invalid(where, ": quantized weight '", name, "' [", q.rows, ", ", q.cols,
            "] has group_size=", q.group_size,
            " (it must divide the input dimension and be a multiple of 16 or equal it)");
  const bool int8 = q.type == HALO_QUANT_INT8;
  if (!int8 && q.cols % 2 != 0)
    invalid(where, ": uint4 weight '", name, "' has an odd input dimension ", q.cols);
  const DLDataType values{static_cast<uint8_t>(int8 ? kDLInt : kDLUInt), 8, 1};
  check_quant_part(where, name + " values", q.values, &values, q.rows, int8 ? q.cols : q.cols / 2);
  const int64_t groups = q.cols / q.group_size;
  check_quant_part(where, name + " scales", q.scales, nullptr, q.rows, groups);
  if (q.offsets) {
    check_quant_part(where, name + " offsets", q.offsets, nullptr, q.rows, groups);
    if (q.offsets->dtype.code != q.scales->dtype.code ||
        q.offsets->dtype.bits != q.scales->dtype.bits)
      invalid(where, ": quantized weight '", name,
              "' has offsets of another dtype than its scales");
  }
}

WeightSet::WeightSet(const halo_named_tensor* weights, size_t n) {
  if (n > 0 && weights == nullptr) invalid("prepare: weights=NULL with num_weights=", n);
  for (size_t i = 0; i < n; ++i) {
    if (weights[i].name == nullptr) invalid("prepare: weights[", i, "].name is NULL");
    if (!map_.emplace(weights[i].name, weights[i].tensor).second)
      invalid("prepare: weight '", weights[i].name, "' is given twice");
  }
}

// Validates a weight of the expected shape and returns its data and dtype.
Matrix WeightSet::get(const std::string& name, std::initializer_list<int64_t> shape) const {
  auto it = map_.find(name);
  if (it == map_.end()) invalid("prepare: weight '", name, "' is missing");
  const DLTensor* t = it->second;
  if (t == nullptr) invalid("prepare: weight '", name, "' has tensor=NULL");
  const std::vector<int64_t> want(shape);
  const DType dt = weight_dtype(name, t->dtype);
  bool ok = t->ndim == static_cast<int>(want.size()) && t->shape != nullptr;
  for (size_t i = 0; ok && i < want.size(); ++i) ok = t->shape[i] == want[i];
  if (!ok)
    invalid("prepare: weight '", name, "' has shape ", shape_str(t->shape, t->ndim), ", expected ",
            shape_str(want.data(), static_cast<int>(want.size())));
  const void* data = contiguous_data("prepare", "weight '" + name + "'", t);
  if (reinterpret_cast<uintptr_t>(data) % kernels::dtype_size(dt) != 0)
    invalid("prepare: weight '", name, "' data + byte_offset is not aligned to its ",
            kernels::dtype_size(dt), "-byte elements");
  return {data, dt};
}

std::vector<float> WeightSet::vec(const std::string& name, int64_t n) const {
  const Matrix m = get(name, {n});
  std::vector<float> out(static_cast<size_t>(n));
  kernels::to_f32(m.data, m.dtype, out.data(), out.size());
  return out;
}

// ------------------------------------------------ v1.4 quantized weights

namespace {

// "'name' values" etc., for messages.
std::string qpart(const std::string& name, const char* part) {
  return cat("quantized weight '", name, "' ", part);
}

// A dense host tensor of `dtype` and `shape`; returns its data.
const void* quant_part(const std::string& name, const char* part, const DLTensor* t,
                       DLDataType dtype, std::initializer_list<int64_t> shape) {
  if (t == nullptr) invalid("prepare: ", qpart(name, part), " is NULL");
  const std::vector<int64_t> want(shape);
  if (t->dtype.code != dtype.code || t->dtype.bits != dtype.bits || t->dtype.lanes != 1)
    invalid("prepare: ", qpart(name, part), " has dtype ", dtype_str(t->dtype), ", expected ",
            dtype_str(dtype));
  bool ok = t->ndim == static_cast<int>(want.size()) && t->shape != nullptr;
  for (size_t i = 0; ok && i < want.size(); ++i) ok = t->shape[i] == want[i];
  if (!ok)
    invalid("prepare: ", qpart(name, part), " has shape ", shape_str(t->shape, t->ndim),
            ", expected ", shape_str(want.data(), static_cast<int>(want.size())));
  const void* data = contiguous_data("prepare", qpart(name, part), t);
  if (reinterpret_cast<uintptr_t>(data) % (dtype.bits / 8) != 0)
    invalid("prepare: ", qpart(name, part), " data + byte_offset is not aligned to its ",
            dtype.bits / 8, "-byte elements");
  return data;
}

std::string type_list(uint32_t accepted) {
  std::string s;
  for (int32_t t : {HALO_QUANT_INT8, HALO_QUANT_UINT4})
    if (accepted & HALO_DTYPE_BIT(t)) s += cat(s.empty() ? "" : ", ", halo_quant_type_name(t));
  return s.empty() ? "none" : s;
}

// The type, group size and dimensions of a quantized weight.
void check_quant_header(const halo_quantized_tensor& q, const std::string& name,
                        uint32_t accepted) {
  const bool known = q.type == HALO_QUANT_INT8 || q.type == HALO_QUANT_UINT4;
  if (!known || !(accepted & HALO_DTYPE_BIT(q.type)))
    invalid("prepare: quantized weight '", name, "' has type ", q.type, " (",
            halo_quant_type_name(q.type),
            "), not one this device takes (quant_types: ", type_list(accepted), ")");
  if (q.rows <= 0 || q.cols <= 0)
    invalid("prepare: quantized weight '", name, "' has rows=", q.rows, " cols=", q.cols,
            ", expected positive");
  if (q.group_size <= 0 || q.group_size % 16 != 0 || q.cols % q.group_size != 0)
    invalid("prepare: quantized weight '", name, "' has group_size=", q.group_size,
            ", expected a positive multiple of 16 dividing cols=", q.cols);
}

}  // namespace

size_t QuantMatrix::bytes() const {
  const auto n = static_cast<size_t>(rows), k = static_cast<size_t>(cols);
  const size_t vals = type == HALO_QUANT_UINT4 ? n * k / 2 : n * k;
  const size_t sc = n * (k / static_cast<size_t>(group)) * kernels::dtype_size(scale_dtype);
  return vals + sc * (offsets ? 2 : 1);
}

QuantMatrix validate_quantized(const halo_quantized_tensor& q, uint32_t accepted) {
  if (q.name == nullptr) invalid("prepare: a quantized weight has name=NULL");
  QuantMatrix m;
  m.name = q.name;
  check_quant_header(q, m.name, accepted);
  m.type = q.type;
  m.group = q.group_size;
  m.rows = q.rows;
  m.cols = q.cols;
  const bool u4 = q.type == HALO_QUANT_UINT4;
  m.values = quant_part(m.name, "values", q.values,
                        u4 ? DLDataType{kDLUInt, 8, 1} : DLDataType{kDLInt, 8, 1},
                        {q.rows, u4 ? q.cols / 2 : q.cols});
  if (q.scales == nullptr) invalid("prepare: ", qpart(m.name, "scales"), " is NULL");
  const DLDataType sdt = q.scales->dtype;
  const bool float_scales =
      sdt.lanes == 1 && ((sdt.code == kDLFloat && (sdt.bits == 32 || sdt.bits == 16)) ||
                         (sdt.code == kDLBfloat && sdt.bits == 16));
  if (!float_scales)
    invalid("prepare: ", qpart(m.name, "scales"), " has dtype ", dtype_str(sdt),
            ", expected float32, float16 or bfloat16");
  m.scale_dtype = weight_dtype(m.name, sdt);
  const int64_t groups = q.cols / q.group_size;
  m.scales = quant_part(m.name, "scales", q.scales, sdt, {q.rows, groups});
  if (q.offsets != nullptr)
    m.offsets =
        quant_part(m.name, "offsets (same dtype as scales)", q.offsets, sdt, {q.rows, groups});
  return m;
}

QuantizedSet::QuantizedSet(const halo_prepare_args* args, uint32_t accepted,
                           const WeightSet& plain) {
  if (!HALO_HAS_FIELD(args, halo_prepare_args, num_quantized_weights)) return;
  const size_t n = args->num_quantized_weights;
  if (n > 0 && args->quantized_weights == nullptr)
    invalid("prepare: quantized_weights=NULL with num_quantized_weights=", n);
  for (size_t i = 0; i < n; ++i) {
    QuantMatrix m = validate_quantized(args->quantized_weights[i], accepted);
    if (plain.has(m.name))
      invalid("prepare: weight '", m.name,
              "' is given both plain (weights) and quantized (quantized_weights)");
    const std::string name = m.name;
    if (!map_.emplace(name, std::move(m)).second)
      invalid("prepare: quantized weight '", name, "' is given twice");
  }
}

const QuantMatrix* QuantizedSet::get(const std::string& name, int64_t rows, int64_t cols) const {
  auto it = map_.find(name);
  if (it == map_.end()) return nullptr;
  const QuantMatrix& m = it->second;
  if (m.rows != rows || m.cols != cols)
    invalid("prepare: quantized weight '", name, "' has rows=", m.rows, " cols=", m.cols,
            ", expected the model's [", rows, ", ", cols, "]");
  used_.insert(name);
  return &m;
}

void QuantizedSet::refuse_if_given(const std::string& name) const {
  if (map_.count(name))
    invalid("prepare: quantized weight '", name,
            "' is not a projection of this model (only q/k/v/o_proj, gate/up/down_proj and an "
            "untied lm_head may be quantized)");
}

void QuantizedSet::check_all_used() const {
  for (const auto& [name, m] : map_)
    if (!used_.count(name)) refuse_if_given(name);
}

namespace {

// The raw integer of a C enum field: a C caller may store any int there, and
// loading an out-of-range value as the C++ enum type would be undefined.
template <class E>
int raw_enum(const E& e) {
  std::underlying_type_t<E> v;
  std::memcpy(&v, &e, sizeof v);
  return static_cast<int>(v);
}

}  // namespace

void validate_spec(const halo_model_spec* s, const char* plugin) {
  check_args("prepare", s, "prepare: spec");
#if HALO_ABI_VERSION_MINOR >= 1
  if (HALO_HAS_FIELD(s, halo_model_spec, compiled_model_dir) && s->compiled_model_dir != nullptr)
    fail(HALO_STATUS_UNIMPLEMENTED, "prepare: the ", plugin,
         " plugin runs Hugging Face weights, not a compiled model (", s->compiled_model_dir,
         "); serve it with the device it was compiled for");
#endif
  auto positive = [](const char* name, int32_t v) {
    if (v <= 0) invalid("prepare: spec.", name, "=", v, " must be positive");
  };
  positive("vocab_size", s->vocab_size);
  positive("hidden_size", s->hidden_size);
  positive("intermediate_size", s->intermediate_size);
  positive("num_layers", s->num_layers);
  positive("num_heads", s->num_heads);
  positive("num_kv_heads", s->num_kv_heads);
  positive("head_dim", s->head_dim);
  positive("max_position_embeddings", s->max_position_embeddings);
  if (s->num_heads % s->num_kv_heads != 0)
    invalid("prepare: spec.num_heads=", s->num_heads,
            " is not a multiple of num_kv_heads=", s->num_kv_heads);
  if (s->head_dim % 2 != 0)
    invalid("prepare: spec.head_dim=", s->head_dim, " must be even for rotary embeddings");
  if (!(s->rms_norm_eps > 0.f) || !std::isfinite(s->rms_norm_eps))
    invalid("prepare: spec.rms_norm_eps=", s->rms_norm_eps, " must be positive and finite");
  if (!(s->rope_theta > 0.f) || !std::isfinite(s->rope_theta))
    invalid("prepare: spec.rope_theta=", s->rope_theta, " must be positive and finite");
  switch (raw_enum(s->rope_scaling)) {
    case HALO_ROPE_SCALING_NONE:
      break;
    case HALO_ROPE_SCALING_LINEAR:
      if (!(s->rope_factor > 0.f) || !std::isfinite(s->rope_factor))
        invalid("prepare: spec.rope_factor=", s->rope_factor,
                " must be positive for linear rope scaling");
      break;
    case HALO_ROPE_SCALING_LLAMA3:
      if (!(s->rope_factor > 0.f) || !std::isfinite(s->rope_factor))
        invalid("prepare: spec.rope_factor=", s->rope_factor,
                " must be positive for llama3 rope scaling");
      if (!(s->rope_low_freq_factor > 0.f) || !(s->rope_high_freq_factor > s->rope_low_freq_factor))
        invalid("prepare: spec.rope_low_freq_factor=", s->rope_low_freq_factor,
                " and rope_high_freq_factor=", s->rope_high_freq_factor,
                " must satisfy 0 < low < high for llama3 rope scaling");
      if (s->rope_original_max_position <= 0)
        invalid("prepare: spec.rope_original_max_position=", s->rope_original_max_position,
                " must be positive for llama3 rope scaling");
      break;
    default:
      fail(HALO_STATUS_UNIMPLEMENTED, "prepare: spec.rope_scaling=", raw_enum(s->rope_scaling),
           " is not supported (NONE, LINEAR, LLAMA3)");
  }
  const int act = raw_enum(s->activation);
  if (act != HALO_ACTIVATION_SILU && act != HALO_ACTIVATION_GELU_TANH)
    fail(HALO_STATUS_UNIMPLEMENTED, "prepare: spec.activation=", act,
         " is not supported (SILU, GELU_TANH)");
  const uint32_t known = HALO_MODEL_QKV_BIAS | HALO_MODEL_QK_NORM | HALO_MODEL_TIED_EMBEDDINGS;
  if (s->flags & ~known)
    fail(HALO_STATUS_UNIMPLEMENTED, "prepare: spec.flags=0x", std::hex, s->flags,
         " has unknown bits 0x", s->flags & ~known);
}

namespace {
// An execute output: host fp32 [rows, cols], contiguous and 4-byte aligned.
void check_output_rows(const char* name, const DLTensor* t, int32_t rows, int32_t cols) {
  if (t->dtype.code != kDLFloat || t->dtype.bits != 32 || t->dtype.lanes != 1)
    invalid("execute: ", name, " has dtype ", dtype_str(t->dtype), ", expected float32");
  if (t->ndim != 2 || t->shape == nullptr || t->shape[0] != rows || t->shape[1] != cols)
    invalid("execute: ", name, " has shape ", shape_str(t->shape, t->ndim), ", expected [", rows,
            ", ", cols, "]");
  const void* p = contiguous_data("execute", name, t);
  if (reinterpret_cast<uintptr_t>(p) % alignof(float) != 0)
    invalid("execute: ", name, " data + byte_offset is not 4-byte aligned");
}
}  // namespace

void validate_execute(const halo_execute_args* a, const ExecLimits* exe, const KvLimits* kv) {
  const int32_t T = a->num_tokens, S = a->num_seqs;
  if (T <= 0) invalid("execute: num_tokens=", T, " must be positive");
  if (T > exe->max_num_batched_tokens)
    invalid("execute: num_tokens=", T,
            " exceeds max_num_batched_tokens=", exe->max_num_batched_tokens);
  if (S <= 0) invalid("execute: num_seqs=", S, " must be positive");
  if (S > exe->max_num_seqs)
    invalid("execute: num_seqs=", S, " exceeds max_num_seqs=", exe->max_num_seqs);
  if (!a->token_ids) invalid("execute: token_ids is NULL");
  if (!a->positions) invalid("execute: positions is NULL");
  if (!a->slot_mapping) invalid("execute: slot_mapping is NULL");
  if (!a->query_start) invalid("execute: query_start is NULL");
  if (!a->context_lens) invalid("execute: context_lens is NULL");
  if (!a->block_tables) invalid("execute: block_tables is NULL");
  if (a->max_blocks_per_seq <= 0)
    invalid("execute: max_blocks_per_seq=", a->max_blocks_per_seq, " must be positive");
  if (a->num_logits < 0) invalid("execute: num_logits=", a->num_logits, " is negative");
  if (a->num_logits > 0 && !a->logits_indices)
    invalid("execute: logits_indices is NULL with num_logits=", a->num_logits);

  if (a->query_start[0] != 0)
    invalid("execute: query_start[0]=", a->query_start[0], ", expected 0");
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q = a->query_start[s + 1] - a->query_start[s];
    if (q < 0)
      invalid("execute: query_start[", s + 1, "]=", a->query_start[s + 1],
              " is smaller than query_start[", s, "]=", a->query_start[s]);
    if (a->query_start[s + 1] > T)
      invalid("execute: query_start[", s + 1, "]=", a->query_start[s + 1],
              " exceeds num_tokens=", T);
    const int32_t ctx = a->context_lens[s];
    if (ctx < q)
      invalid("execute: context_lens[", s, "]=", ctx, " is smaller than its query length ", q);
    if (ctx > exe->max_model_len)
      invalid("execute: context_lens[", s, "]=", ctx,
              " exceeds max_model_len=", exe->max_model_len);
    const int32_t nblk = (ctx + exe->block_size - 1) / exe->block_size;
    if (nblk > a->max_blocks_per_seq)
      invalid("execute: context_lens[", s, "]=", ctx, " needs ", nblk,
              " blocks but max_blocks_per_seq=", a->max_blocks_per_seq);
    const int32_t* bt =
        a->block_tables + static_cast<size_t>(s) * static_cast<size_t>(a->max_blocks_per_seq);
    for (int32_t j = 0; j < nblk; ++j)
      if (bt[j] < 0 || bt[j] >= kv->num_blocks)
        out_of_range("execute: block_tables[", s, "][", j, "]=", bt[j], " is outside [0, ",
                     kv->num_blocks, ")");
  }
  if (a->query_start[S] != T)
    invalid("execute: query_start[num_seqs=", S, "]=", a->query_start[S],
            " does not equal num_tokens=", T);
  const int64_t num_slots = int64_t{kv->num_blocks} * kv->block_size;
  for (int32_t t = 0; t < T; ++t) {
    if (a->token_ids[t] < 0 || a->token_ids[t] >= exe->vocab)
      out_of_range("execute: token_ids[", t, "]=", a->token_ids[t], " is outside [0, ", exe->vocab,
                   ")");
    if (a->positions[t] < 0)
      invalid("execute: positions[", t, "]=", a->positions[t], " is negative");
    if (a->slot_mapping[t] < -1 || a->slot_mapping[t] >= num_slots)
      out_of_range("execute: slot_mapping[", t, "]=", a->slot_mapping[t], " is outside [-1, ",
                   num_slots, ")");
  }
  for (int32_t i = 0; i < a->num_logits; ++i)
    if (a->logits_indices[i] < 0 || a->logits_indices[i] >= T)
      out_of_range("execute: logits_indices[", i, "]=", a->logits_indices[i], " is outside [0, ", T,
                   ")");
  if (a->num_logits > 0) {
    if (a->logits == nullptr) invalid("execute: logits is NULL with num_logits=", a->num_logits);
    check_output_rows("logits", a->logits, a->num_logits, exe->vocab);
    if (const DLTensor* hs = hidden_states_out(a); hs && exe->hidden > 0)
      check_output_rows("hidden_states", hs, a->num_logits, exe->hidden);
  }
  check_lora_slots(a, exe->max_loras, exe->no_lora_reason);
}

void check_lora_slots(const halo_execute_args* a, int32_t max_loras, const char* no_lora_reason) {
  const int32_t* slots = lora_slots_in(a);
  if (slots == nullptr) return;
  for (int32_t s = 0; s < a->num_seqs; ++s) {
    const int32_t v = slots[s];
    if (v < -1 || (max_loras > 0 && v >= max_loras))
      out_of_range("execute: lora_slots[", s, "]=", v, " is outside [-1, ", max_loras,
                   ") (-1: the base model; max_loras=", max_loras, ")");
    if (v >= 0 && max_loras == 0)
      fail(HALO_STATUS_UNIMPLEMENTED, "execute: lora_slots[", s, "]=", v,
           " asks for a LoRA adapter, but ",
           no_lora_reason ? no_lora_reason
                          : "this plugin does not claim HALO_CAP_LORA (max_loras=0)");
  }
}

const int32_t* lora_slots_in(const halo_execute_args* a) {
  return HALO_HAS_FIELD(a, halo_execute_args, lora_slots) ? a->lora_slots : nullptr;
}

DLTensor* hidden_states_out(const halo_execute_args* a) {
  return HALO_HAS_FIELD(a, halo_execute_args, hidden_states) ? a->hidden_states : nullptr;
}

// kv_cache_copy_blocks: see validate.h. Checked in full before anything is
// copied, so a refused list leaves the cache unchanged.
bool validate_copy_blocks(const halo_kv_cache_copy_blocks_args* a, int32_t num_blocks) {
  if (a->num_pairs < 0) invalid("kv_cache_copy_blocks: num_pairs=", a->num_pairs, " is negative");
  if (a->num_pairs == 0) return false;
  if (a->src_blocks == nullptr || a->dst_blocks == nullptr)
    invalid("kv_cache_copy_blocks: src_blocks or dst_blocks is NULL with num_pairs=", a->num_pairs);
  const auto n = static_cast<size_t>(a->num_pairs);
  for (size_t i = 0; i < n; ++i)
    for (const auto& [name, arr] : {std::pair{"src_blocks", a->src_blocks}, {"dst_blocks", a->dst_blocks}})
      if (arr[i] < 0 || arr[i] >= num_blocks)
        out_of_range("kv_cache_copy_blocks: ", name, "[", i, "]=", arr[i], " is outside [0, ", num_blocks, ")");
  std::vector<char> is_src(static_cast<size_t>(num_blocks), 0), is_dst(static_cast<size_t>(num_blocks), 0);
  for (size_t i = 0; i < n; ++i) is_src[static_cast<size_t>(a->src_blocks[i])] = 1;
  for (size_t i = 0; i < n; ++i) {
    const auto d = static_cast<size_t>(a->dst_blocks[i]);
    if (is_src[d])
      invalid("kv_cache_copy_blocks: dst_blocks[", i, "]=", d, " is also a source block");
    if (is_dst[d]++) invalid("kv_cache_copy_blocks: dst_blocks[", i, "]=", d, " is a destination twice");
  }
  return true;
}

kernels::RopeParams rope_params(const halo_model_spec& s) {
  kernels::RopeParams rp;
  rp.theta = s.rope_theta;
  rp.scaling = s.rope_scaling == HALO_ROPE_SCALING_LINEAR   ? kernels::RopeScaling::Linear
               : s.rope_scaling == HALO_ROPE_SCALING_LLAMA3 ? kernels::RopeScaling::Llama3
                                                            : kernels::RopeScaling::None;
  rp.factor = s.rope_factor;
  rp.low_freq_factor = s.rope_low_freq_factor;
  rp.high_freq_factor = s.rope_high_freq_factor;
  rp.original_max_position = s.rope_original_max_position;
  return rp;
}

// ------------------------------------------------------- v1.6: LoRA

const char* lora_proj_name(int proj) {
  static constexpr const char* kNames[kNumLoraProj] = {
      HALO_WEIGHT_Q_PROJ,    HALO_WEIGHT_K_PROJ,  HALO_WEIGHT_V_PROJ,   HALO_WEIGHT_O_PROJ,
      HALO_WEIGHT_GATE_PROJ, HALO_WEIGHT_UP_PROJ, HALO_WEIGHT_DOWN_PROJ};
  return proj >= 0 && proj < kNumLoraProj ? kNames[proj] : "unknown";
}

int64_t LoraModel::in(int proj) const {
  return proj == kLoraO ? q_out : proj == kLoraDown ? intermediate : hidden;
}

int64_t LoraModel::out(int proj) const {
  switch (proj) {
    case kLoraQ:
      return q_out;
    case kLoraK:
    case kLoraV:
      return kv_out;
    case kLoraGate:
    case kLoraUp:
      return intermediate;
    default:
      return hidden;  // o_proj, down_proj
  }
}

namespace {

// "layers.{i}.{proj}" + suffix -> (layer, proj, is_b); false for anything else.
bool parse_lora_name(std::string_view name, int32_t num_layers, int32_t* layer, int* proj,
                     bool* is_b) {
  const std::string_view prefix = HALO_WEIGHT_LAYER_PREFIX;
  if (name.substr(0, prefix.size()) != prefix) return false;
  name.remove_prefix(prefix.size());
  int64_t i = 0;
  size_t digits = 0;
  while (digits < name.size() && digits < 10 && name[digits] >= '0' && name[digits] <= '9')
    i = i * 10 + (name[digits++] - '0');
  if (digits == 0 || (digits > 1 && name[0] == '0') || digits >= name.size() ||
      name[digits] != '.' || i >= num_layers)
    return false;
  name.remove_prefix(digits + 1);
  for (const auto& [suffix, b] : {std::pair{std::string_view(HALO_LORA_A_SUFFIX), false},
                                  std::pair{std::string_view(HALO_LORA_B_SUFFIX), true}}) {
    if (name.size() <= suffix.size() || name.substr(name.size() - suffix.size()) != suffix)
      continue;
    const std::string_view p = name.substr(0, name.size() - suffix.size());
    for (int k = 0; k < kNumLoraProj; ++k)
      if (p == lora_proj_name(k)) {
        *layer = static_cast<int32_t>(i);
        *proj = k;
        *is_b = b;
        return true;
      }
  }
  return false;
}

// A LoRA tensor's dtype, data and 2-D shape; INVALID_ARGUMENT naming it.
const void* lora_tensor(const std::string& name, const DLTensor* t, kernels::DType* dt) {
  if (t == nullptr) invalid("lora_slot_set: weight '", name, "' has tensor=NULL");
  const DLDataType d = t->dtype;
  if (d.lanes == 1 && d.code == kDLFloat && d.bits == 32)
    *dt = DType::F32;
  else if (d.lanes == 1 && d.code == kDLBfloat && d.bits == 16)
    *dt = DType::BF16;
  else if (d.lanes == 1 && d.code == kDLFloat && d.bits == 16)
    *dt = DType::F16;
  else
    invalid("lora_slot_set: weight '", name, "' has dtype ", dtype_str(d),
            ", expected float32, bfloat16 or float16");
  if (t->ndim != 2 || t->shape == nullptr)
    invalid("lora_slot_set: weight '", name, "' has shape ", shape_str(t->shape, t->ndim),
            ", expected a matrix (2 dimensions)");
  const void* data = contiguous_data("lora_slot_set", "weight '" + name + "'", t);
  if (reinterpret_cast<uintptr_t>(data) % kernels::dtype_size(*dt) != 0)
    invalid("lora_slot_set: weight '", name, "' data + byte_offset is not aligned to its ",
            kernels::dtype_size(*dt), "-byte elements");
  return data;
}

}  // namespace

std::vector<LoraWeight> validate_lora_slot(const halo_lora_slot_args* a, const LoraModel& m,
                                           int32_t max_loras, int32_t max_lora_rank) {
  if (a->slot < 0 || a->slot >= max_loras)
    out_of_range("lora_slot_set: slot=", a->slot, " is outside [0, max_loras=", max_loras, ")");
  if (a->num_weights > 0 && a->weights == nullptr)
    invalid("lora_slot_set: weights=NULL with num_weights=", a->num_weights);
  struct Pair {
    const halo_named_tensor* w[2] = {nullptr, nullptr};  // A, B
  };
  std::map<std::pair<int32_t, int>, Pair> pairs;  // (layer, proj): ordered
  std::set<std::string_view> seen;
  for (size_t i = 0; i < a->num_weights; ++i) {
    const halo_named_tensor& w = a->weights[i];
    if (w.name == nullptr) invalid("lora_slot_set: weights[", i, "].name is NULL");
    if (!seen.insert(w.name).second) invalid("lora_slot_set: weight '", w.name, "' is given twice");
    int32_t layer = 0;
    int proj = 0;
    bool is_b = false;
    if (!parse_lora_name(w.name, m.num_layers, &layer, &proj, &is_b))
      invalid(
          "lora_slot_set: weight '", w.name,
          "' is not a LoRA weight of this model (expected layers.{i}.{q,k,v,o,gate,up,down}_proj",
          HALO_LORA_A_SUFFIX, " or ", HALO_LORA_B_SUFFIX, " with i < num_layers=", m.num_layers,
          ")");
    pairs[{layer, proj}].w[is_b ? 1 : 0] = &w;
  }
  std::vector<LoraWeight> out;
  for (const auto& [key, p] : pairs) {
    const std::string base =
        cat(HALO_WEIGHT_LAYER_PREFIX, key.first, ".", lora_proj_name(key.second));
    if (p.w[0] == nullptr || p.w[1] == nullptr)
      invalid("lora_slot_set: '", p.w[0] ? p.w[0]->name : p.w[1]->name, "' comes without '", base,
              p.w[0] ? HALO_LORA_B_SUFFIX : HALO_LORA_A_SUFFIX,
              "' (an adapter needs both A and B of its projection)");
    LoraWeight lw;
    lw.layer = key.first;
    lw.proj = key.second;
    lw.in = m.in(lw.proj);
    lw.out = m.out(lw.proj);
    const std::string an = p.w[0]->name, bn = p.w[1]->name;
    lw.a = lora_tensor(an, p.w[0]->tensor, &lw.a_dtype);
    lw.b = lora_tensor(bn, p.w[1]->tensor, &lw.b_dtype);
    const int64_t* as = p.w[0]->tensor->shape;
    const int64_t* bs = p.w[1]->tensor->shape;
    lw.rank = as[0];
    if (lw.rank <= 0 || as[1] != lw.in)
      invalid("lora_slot_set: weight '", an, "' has shape ", shape_str(as, 2), ", expected [rank, ",
              lw.in, "] with rank >= 1 (A of ", base, " [", lw.out, ", ", lw.in, "])");
    if (bs[0] != lw.out || bs[1] != lw.rank)
      invalid("lora_slot_set: weight '", bn, "' has shape ", shape_str(bs, 2), ", expected [",
              lw.out, ", ", lw.rank, "] (B of ", base, " [", lw.out, ", ", lw.in, "], rank ",
              lw.rank, " from its A)");
    if (lw.rank > max_lora_rank)
      out_of_range("lora_slot_set: weight '", an, "' has rank ", lw.rank,
                   ", above the agreed max_lora_rank=", max_lora_rank);
    out.push_back(lw);
  }
  return out;
}

LoraProposal proposed_lora(const halo_limits* lim) {
  LoraProposal p;
  if (!HALO_HAS_FIELD(lim, halo_limits, max_lora_rank)) return p;
  if (lim->max_loras < 0)
    invalid("prepare: limits.max_loras=", lim->max_loras, " is negative (0 = no LoRA)");
  if (lim->max_lora_rank < 0)
    invalid("prepare: limits.max_lora_rank=", lim->max_lora_rank, " is negative");
  p.max_loras = lim->max_loras;
  p.max_lora_rank = lim->max_lora_rank;
  return p;
}

void set_lora_limits(halo_limits* lim, int32_t max_loras, int32_t max_lora_rank) {
  if (!HALO_HAS_FIELD(lim, halo_limits, max_lora_rank)) return;
  lim->max_loras = max_loras;
  lim->max_lora_rank = max_lora_rank;
}

// ------------------------------------------------------------ buffers

size_t buffer_elem_size(const char* where, DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && (t.bits == 32 || t.bits == 16)) return t.bits / 8;
    if (t.code == kDLBfloat && t.bits == 16) return 2;
    if (t.code == kDLInt && (t.bits == 32 || t.bits == 64)) return t.bits / 8;
    if (t.code == kDLUInt && t.bits == 8) return 1;
  }
  invalid(where, ": dtype code=", static_cast<int>(t.code), " bits=", static_cast<int>(t.bits),
          " lanes=", t.lanes, " is not one of float32, bfloat16, float16, int32, int64, uint8");
}

// Number of bytes of a contiguous host tensor; throws on anything else.
size_t host_tensor_bytes(const char* where, const DLTensor* t) {
  if (t->device.device_type != kDLCPU)
    invalid(where, ": host tensor has device_type=", static_cast<int>(t->device.device_type),
            ", expected kDLCPU (1)");
  const size_t es = buffer_elem_size(where, t->dtype);
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr))
    invalid(where, ": host tensor has ndim=", t->ndim);
  size_t n = 1;
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] < 0) invalid(where, ": host tensor has shape[", i, "]=", t->shape[i]);
    if (t->strides && t->shape[i] != 1 && t->strides[i] != expect)
      invalid(where, ": host tensor is not contiguous (strides[", i, "]=", t->strides[i],
              ", expected ", expect, ")");
    expect *= t->shape[i];
    n *= static_cast<size_t>(t->shape[i]);
  }
  if (n > 0 && t->data == nullptr) invalid(where, ": host tensor has data=NULL");
  return n * es;
}

int32_t proposed_kv_dtype(const halo_limits* lim) {
  return HALO_HAS_FIELD(lim, halo_limits, kv_cache_dtype) ? lim->kv_cache_dtype
                                                          : HALO_KV_DTYPE_AUTO;
}

void check_kv_dtype(const char* plugin, int32_t proposed,
                    std::initializer_list<int32_t> supported) {
  if (proposed == HALO_KV_DTYPE_AUTO) return;
  std::string names;
  for (int32_t d : supported) {
    if (d == proposed) return;
    names += names.empty() ? "" : ", ";
    names += halo_kv_dtype_name(d);
  }
  invalid("prepare: limits.kv_cache_dtype=", proposed, " (", halo_kv_dtype_name(proposed),
          ") is not supported by plugin '", plugin, "' (supported: auto, ", names, ")");
}

void set_kv_dtype(halo_limits* lim, int32_t agreed) {
  if (HALO_HAS_FIELD(lim, halo_limits, kv_cache_dtype)) lim->kv_cache_dtype = agreed;
}

void set_compute_dtype(halo_limits* lim, int32_t dtype) {
  if (HALO_HAS_FIELD(lim, halo_limits, compute_dtype)) lim->compute_dtype = dtype;
}

int32_t proposed_spec_tokens(const halo_limits* lim) {
  if (!HALO_HAS_FIELD(lim, halo_limits, num_speculative_tokens)) return 0;
  if (lim->num_speculative_tokens < 0)
    invalid("prepare: limits.num_speculative_tokens=", lim->num_speculative_tokens, " is negative");
  return lim->num_speculative_tokens;
}

void set_spec_tokens(halo_limits* lim, int32_t agreed) {
  if (HALO_HAS_FIELD(lim, halo_limits, num_speculative_tokens)) lim->num_speculative_tokens = agreed;
}

void check_host_matches_buffer(const char* where, const DLTensor* t, DLDataType dtype,
                               const std::vector<int64_t>& shape) {
  if (t->dtype.code != dtype.code || t->dtype.bits != dtype.bits || t->dtype.lanes != dtype.lanes)
    invalid(where, ": host dtype code=", static_cast<int>(t->dtype.code), " bits=",
            static_cast<int>(t->dtype.bits), " does not match the buffer's code=",
            static_cast<int>(dtype.code), " bits=", static_cast<int>(dtype.bits));
  const bool same = static_cast<size_t>(t->ndim) == shape.size() &&
                    std::equal(shape.begin(), shape.end(), t->shape);
  if (!same) {
    std::string want, got;
    for (auto d : shape) want += cat(want.empty() ? "" : ", ", d);
    for (int i = 0; i < t->ndim; ++i) got += cat(i ? ", " : "", t->shape[i]);
    invalid(where, ": host shape [", got, "] does not match the buffer's shape [", want, "]");
  }
}

}  // namespace halo::plugin
