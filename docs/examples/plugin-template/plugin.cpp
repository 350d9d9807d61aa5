// A minimal halo device plugin: the whole ABI (core/include/halo/device_abi.h,
// v1.3; the optional v1.1 entries compile and device_get_stats are left NULL)
// with the simplest code that is correct. It runs a naive fp32 transformer on
// the host, one token and one head at a time, with a paged KV cache read only
// through the block tables. Use it as the starting point of a
// real plugin: keep the argument checks and the error handling, replace the
// arithmetic with your device's.
//
// Check it with:  halo-conformance --plugin path/to/libhalo_plugin_template.so
#include <halo/device_abi.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <new>
#include <numbers>
#include <sstream>
#include <string>
#include <string_view>
#include <vector>

// ------------------------------------------------------------------ errors
//
// Inside the plugin a failure is a C++ exception; every entry point catches
// everything (guard) and returns a halo_error. No exception crosses the ABI.

struct halo_error {
  halo_status_code code;
  std::string message;
};

namespace {

struct Failure {
  halo_status_code code;
  std::string message;
};

template <class... A>
[[noreturn]] void fail(halo_status_code code, const A&... parts) {
  std::ostringstream os;
  (os << ... << parts);
  throw Failure{code, os.str()};
}
template <class... A>
[[noreturn]] void invalid(const A&... parts) {
  fail(HALO_STATUS_INVALID_ARGUMENT, parts...);
}
template <class... A>
[[noreturn]] void out_of_range(const A&... parts) {
  fail(HALO_STATUS_OUT_OF_RANGE, parts...);
}

halo_error* oom_error() {  // returned when even the error cannot be allocated; never freed
  static halo_error e{HALO_STATUS_OUT_OF_MEMORY, "out of memory"};
  return &e;
}

template <class F>
halo_error* guard(const char* where, F&& body) noexcept {
  try {
    body();
    return nullptr;
  } catch (const Failure& f) {
    try {
      return new halo_error{f.code, std::string(where) + ": " + f.message};
    } catch (...) {
      return oom_error();
    }
  } catch (const std::bad_alloc&) {
    return oom_error();
  } catch (...) {
    try {
      return new halo_error{HALO_STATUS_INTERNAL, std::string(where) + ": internal error"};
    } catch (...) {
      return oom_error();
    }
  }
}

// Every argument struct must hold at least the fields of the oldest version
// this plugin accepts (v1.0: for most structs all of sizeof(T); pass the v1.0
// size of structs that grew since, e.g. halo_model_spec). A larger struct
// comes from a newer caller: its tail is ignored.
template <class T>
void check_args(const T* args, const char* name, size_t v10_size = sizeof(T)) {
  if (args == nullptr) invalid(name, " is NULL");
  if (args->struct_size < v10_size)
    invalid(name, "->struct_size=", args->struct_size, " is smaller than the v1.0 size ", v10_size);
}

// Options: this plugin takes none; list your device's keys in kOptionKeys
// (those of device_open and prepare together: the core hands both calls one
// list, so each accepts the other's keys). A key not listed is refused, naming
// it (ABI v1.3), so a misspelt option never silently becomes a default.
constexpr std::array<std::string_view, 0> kOptionKeys{};

void check_options(const halo_option* options, size_t n) {
  if (n > 0 && options == nullptr) invalid("options=NULL with num_options=", n);
  std::string known;
  for (std::string_view k : kOptionKeys) known += (known.empty() ? "" : ", ") + std::string(k);
  for (size_t i = 0; i < n; ++i) {
    if (options[i].key == nullptr) invalid("options[", i, "].key is NULL");
    if (std::find(kOptionKeys.begin(), kOptionKeys.end(), options[i].key) == kOptionKeys.end())
      invalid("unknown option '", options[i].key, "' (known: ", known.empty() ? "none" : known, ")");
  }
}

uint64_t host_memory(int what) {
  const long pages = sysconf(what), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) : 0;
}

constexpr uint32_t kCapabilities = HALO_CAP_DTYPE_FP32 | HALO_CAP_DTYPE_BF16 | HALO_CAP_DTYPE_FP16 |
                                   HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH |
                                   HALO_CAP_BUFFERS;

}  // namespace

// ----------------------------------------------------------------- objects

struct halo_device {
  int32_t index = 0;
};

struct Layer {
  std::vector<float> attn_norm, q, k, v, q_bias, k_bias, v_bias, q_norm, k_norm, o, mlp_norm, gate,
      up, down;
};

struct halo_executable {
  int32_t vocab = 0, hidden = 0, inter = 0, heads = 0, kv_heads = 0, head_dim = 0;
  float eps = 0;
  uint32_t flags = 0;
  halo_activation activation = HALO_ACTIVATION_SILU;
  std::vector<double> inv_freq;  // [head_dim / 2]
  std::vector<float> embed, final_norm, lm_head;
  std::vector<Layer> layers;
  halo_limits limits{};  // as agreed in prepare
};

struct halo_kv_cache {
  const halo_executable* exe = nullptr;
  int32_t num_blocks = 0;
  size_t slot_floats = 0;                // kv_heads * head_dim
  std::vector<std::vector<float>> k, v;  // per layer: [num_blocks * block_size * slot_floats]
};

struct halo_buffer {
  DLDataType dtype{};
  std::vector<int64_t> shape;
  std::vector<char> bytes;
};

namespace {

// ------------------------------------------------------------------ errors API

halo_status_code error_code(const halo_error* e) { return e ? e->code : HALO_STATUS_OK; }
const char* error_message(const halo_error* e) { return e ? e->message.c_str() : ""; }
void error_destroy(halo_error* e) {
  if (e != oom_error()) delete e;
}

// ----------------------------------------------------------------- devices

void check_index(int32_t index) {
  if (index != 0) out_of_range("device_index=", index, " is outside [0, 1)");
}

halo_error* device_count(halo_device_count_args* args) {
  return guard("device_count", [&] {
    check_args(args, "args");
    args->count = 1;
  });
}

halo_error* device_get_properties(halo_device_get_properties_args* args) {
  return guard("device_get_properties", [&] {
    check_args(args, "args");
    check_index(args->device_index);
    halo_device_properties* out = args->properties;
    if (out == nullptr) invalid("properties is NULL");
    const size_t size = out->struct_size;
    if (size < HALO_STRUCT_SIZE(halo_device_properties, kind))
      invalid("properties->struct_size=", size, " is too small");
    halo_device_properties p{};
    p.kind = HALO_DEVICE_KIND_CPU;
    std::strncpy(p.name, "template (naive host fp32)", sizeof p.name - 1);
    std::strncpy(p.vendor, "halo example", sizeof p.vendor - 1);
    p.memory_bytes = host_memory(_SC_PHYS_PAGES);
    p.memory_free_bytes = host_memory(_SC_AVPHYS_PAGES);
    p.num_chips = 1;
    p.capabilities = kCapabilities;
#if HALO_ABI_VERSION_MINOR >= 3
    p.kv_cache_dtypes = HALO_DTYPE_BIT(HALO_KV_DTYPE_FP32);  // the only KV type it keeps
    p.compute_dtypes = 0;  // no option "dtype": it computes in fp32 whatever it is given
#endif
    // Write only the fields an older caller's struct has room for.
    const size_t n = std::min(size, sizeof p) - sizeof p.struct_size;
    std::memcpy(reinterpret_cast<char*>(out) + sizeof p.struct_size,
                reinterpret_cast<const char*>(&p) + sizeof p.struct_size, n);
  });
}

halo_error* device_open(halo_device_open_args* args) {
  return guard("device_open", [&] {
    check_args(args, "args");
    check_index(args->device_index);
    check_options(args->options, args->num_options);
    args->device = new halo_device{args->device_index};
  });
}

void device_destroy(halo_device* d) { delete d; }

// ------------------------------------------------------------------- prepare

float half_to_float(uint16_t h, bool bf16) {
  if (bf16) {
    const uint32_t bits = uint32_t{h} << 16;
    float f;
    std::memcpy(&f, &bits, 4);
    return f;
  }
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 31, man = h & 1023;
  float f;
  if (exp == 0)
    f = std::ldexp(static_cast<float>(man), -24);
  else if (exp == 31)
    f = man ? NAN : INFINITY;
  else
    f = std::ldexp(static_cast<float>(man | 1024), static_cast<int>(exp) - 25);
  return sign ? -f : f;
}

class Weights {
 public:
  Weights(const halo_named_tensor* w, size_t n) {
    if (n > 0 && w == nullptr) invalid("weights=NULL with num_weights=", n);
    for (size_t i = 0; i < n; ++i) {
      if (w[i].name == nullptr) invalid("weights[", i, "].name is NULL");
      if (!map_.emplace(w[i].name, w[i].tensor).second)
        invalid("weight '", w[i].name, "' is given twice");
    }
  }

  // Returns the weight converted to fp32, after checking its shape and layout.
  std::vector<float> get(const std::string& name, std::vector<int64_t> shape) const {
    auto it = map_.find(name);
    if (it == map_.end()) invalid("weight '", name, "' is missing");
    const DLTensor* t = it->second;
    if (t == nullptr) invalid("weight '", name, "' has tensor=NULL");
    if (t->device.device_type != kDLCPU)
      invalid("weight '", name, "' is not in host memory (kDLCPU)");
    bool ok = t->ndim == static_cast<int>(shape.size()) && t->shape != nullptr;
    for (size_t i = 0; ok && i < shape.size(); ++i) ok = t->shape[i] == shape[i];
    if (!ok) invalid("weight '", name, "' has the wrong shape");
    int64_t expect = 1;
    for (int i = t->ndim - 1; t->strides && i >= 0; --i) {
      if (t->shape[i] != 1 && t->strides[i] != expect)
        invalid("weight '", name, "' is not contiguous");
      expect *= t->shape[i];
    }
    size_t n = 1;
    for (int64_t d : shape) n *= static_cast<size_t>(d);
    if (t->data == nullptr) invalid("weight '", name, "' has data=NULL");
    const char* data = static_cast<const char*>(t->data) + t->byte_offset;
    std::vector<float> out(n);
    const DLDataType dt = t->dtype;
    if (dt.lanes == 1 && dt.code == kDLFloat && dt.bits == 32) {
      std::memcpy(out.data(), data, n * 4);
    } else if (dt.lanes == 1 && (dt.code == kDLBfloat || dt.code == kDLFloat) && dt.bits == 16) {
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, data + 2 * i, 2);
        out[i] = half_to_float(h, dt.code == kDLBfloat);
      }
    } else {
      invalid("weight '", name, "' has a dtype other than float32, bfloat16, float16");
    }
    return out;
  }

 private:
  std::map<std::string, const DLTensor*, std::less<>> map_;
};

void validate_spec(const halo_model_spec* s) {
  check_args(s, "spec",
             HALO_STRUCT_SIZE(halo_model_spec, flags));  // v1.1 appended compiled_model_dir
  if (s->struct_size >= HALO_STRUCT_SIZE(halo_model_spec, compiled_model_dir) &&
      s->compiled_model_dir != nullptr)
    fail(HALO_STATUS_UNIMPLEMENTED,
         "spec.compiled_model_dir is set, but this plugin runs weights, not compiled models");
  for (auto [name, v] : {std::pair{"vocab_size", s->vocab_size},
                         {"hidden_size", s->hidden_size},
                         {"intermediate_size", s->intermediate_size},
                         {"num_layers", s->num_layers},
                         {"num_heads", s->num_heads},
                         {"num_kv_heads", s->num_kv_heads},
                         {"head_dim", s->head_dim},
                         {"max_position_embeddings", s->max_position_embeddings}})
    if (v <= 0) invalid("spec.", name, "=", v, " must be positive");
  if (s->num_heads % s->num_kv_heads != 0)
    invalid("spec.num_heads is not a multiple of num_kv_heads");
  if (s->head_dim % 2 != 0) invalid("spec.head_dim=", s->head_dim, " must be even");
  if (!(s->rms_norm_eps > 0) || !(s->rope_theta > 0))
    invalid("spec.rms_norm_eps and rope_theta must be positive");
  int scaling, act;  // read as ints: a C caller may store any value in an enum field
  std::memcpy(&scaling, &s->rope_scaling, sizeof scaling);
  std::memcpy(&act, &s->activation, sizeof act);
  if (scaling < HALO_ROPE_SCALING_NONE || scaling > HALO_ROPE_SCALING_LLAMA3)
    fail(HALO_STATUS_UNIMPLEMENTED, "spec.rope_scaling=", scaling, " is not supported");
  if (scaling != HALO_ROPE_SCALING_NONE && !(s->rope_factor > 0))
    invalid("spec.rope_factor must be positive");
  if (scaling == HALO_ROPE_SCALING_LLAMA3 &&
      !(s->rope_low_freq_factor > 0 && s->rope_high_freq_factor > s->rope_low_freq_factor &&
        s->rope_original_max_position > 0))
    invalid("spec llama3 rope parameters are inconsistent");
  if (act != HALO_ACTIVATION_SILU && act != HALO_ACTIVATION_GELU_TANH)
    fail(HALO_STATUS_UNIMPLEMENTED, "spec.activation=", act, " is not supported");
  if (s->flags & ~uint32_t{HALO_MODEL_QKV_BIAS | HALO_MODEL_QK_NORM | HALO_MODEL_TIED_EMBEDDINGS})
    fail(HALO_STATUS_UNIMPLEMENTED, "spec.flags=", s->flags, " has unknown bits");
}

// Rotary frequencies as transformers computes them (incl. llama3 and linear scaling).
std::vector<double> rope_inv_freq(const halo_model_spec& s) {
  const size_t half = static_cast<size_t>(s.head_dim / 2);
  std::vector<double> f(half);
  for (size_t i = 0; i < half; ++i)
    f[i] = 1.0 / std::pow(double{s.rope_theta}, 2.0 * i / s.head_dim);
  if (s.rope_scaling == HALO_ROPE_SCALING_LINEAR) {
    for (double& x : f) x /= s.rope_factor;
  } else if (s.rope_scaling == HALO_ROPE_SCALING_LLAMA3) {
    const double old_len = s.rope_original_max_position;
    const double low_wavelen = old_len / s.rope_low_freq_factor,
                 high_wavelen = old_len / s.rope_high_freq_factor;
    for (double& x : f) {
      const double wavelen = 2 * std::numbers::pi / x;
      if (wavelen > low_wavelen) {
        x /= s.rope_factor;
      } else if (wavelen >= high_wavelen) {
        const double smooth = (old_len / wavelen - s.rope_low_freq_factor) /
                              (s.rope_high_freq_factor - s.rope_low_freq_factor);
        x = (1 - smooth) * x / s.rope_factor + smooth * x;
      }
    }
  }
  return f;
}

// Every weight the spec implies, by its canonical name, checked and kept as
// fp32 (a device plugin would convert and upload them here).
void load_weights(halo_executable& exe, const halo_model_spec& s, const Weights& w) {
  const int64_t V = s.vocab_size, H = s.hidden_size, I = s.intermediate_size;
  const int64_t NQ = int64_t{s.num_heads} * s.head_dim, NKV = int64_t{s.num_kv_heads} * s.head_dim;
  exe.embed = w.get("embed_tokens", {V, H});
  for (int32_t i = 0; i < s.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer L;
    L.attn_norm = w.get(p + "attn_norm", {H});
    L.q = w.get(p + "q_proj", {NQ, H});
    L.k = w.get(p + "k_proj", {NKV, H});
    L.v = w.get(p + "v_proj", {NKV, H});
    if (s.flags & HALO_MODEL_QKV_BIAS) {
      L.q_bias = w.get(p + "q_bias", {NQ});
      L.k_bias = w.get(p + "k_bias", {NKV});
      L.v_bias = w.get(p + "v_bias", {NKV});
    }
    if (s.flags & HALO_MODEL_QK_NORM) {
      L.q_norm = w.get(p + "q_norm", {s.head_dim});
      L.k_norm = w.get(p + "k_norm", {s.head_dim});
    }
    L.o = w.get(p + "o_proj", {H, NQ});
    L.mlp_norm = w.get(p + "mlp_norm", {H});
    L.gate = w.get(p + "gate_proj", {I, H});
    L.up = w.get(p + "up_proj", {I, H});
    L.down = w.get(p + "down_proj", {H, I});
    exe.layers.push_back(std::move(L));
  }
  exe.final_norm = w.get("final_norm", {H});
  exe.lm_head = (s.flags & HALO_MODEL_TIED_EMBEDDINGS) ? exe.embed : w.get("lm_head", {V, H});
}

// Limits: a dynamic-shape device accepts what the core proposes (0 = our
// default), writes back what it agreed, and keeps a copy in the executable.
void agree_limits(halo_executable& exe, const halo_model_spec& s, halo_limits& lim,
                  bool has_kv_dtype) {
  const int64_t NKV = int64_t{s.num_kv_heads} * s.head_dim;
  halo_limits agreed{};
  agreed.struct_size = sizeof agreed;
  agreed.max_num_seqs = lim.max_num_seqs ? lim.max_num_seqs : 256;
  agreed.max_model_len = lim.max_model_len ? lim.max_model_len : s.max_position_embeddings;
  agreed.max_num_batched_tokens = lim.max_num_batched_tokens ? lim.max_num_batched_tokens
                                                             : std::max(2048, agreed.max_model_len);
  agreed.block_size = lim.block_size ? lim.block_size : 16;
  agreed.capabilities = HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH;
  agreed.kv_bytes_per_block = 2ull * static_cast<uint64_t>(s.num_layers) *
                              static_cast<uint64_t>(agreed.block_size) *
                              static_cast<uint64_t>(NKV) * sizeof(float);
  agreed.kv_memory_available = host_memory(_SC_AVPHYS_PAGES) / 2;
  exe.limits = agreed;
  lim.max_num_seqs = agreed.max_num_seqs;
  lim.max_model_len = agreed.max_model_len;
  lim.max_num_batched_tokens = agreed.max_num_batched_tokens;
  lim.block_size = agreed.block_size;
  lim.capabilities = agreed.capabilities;
  lim.kv_bytes_per_block = agreed.kv_bytes_per_block;
  lim.kv_memory_available = agreed.kv_memory_available;
  if (has_kv_dtype) lim.kv_cache_dtype = HALO_KV_DTYPE_FP32;
    // v1.3: what the arithmetic runs in (16-bit weights widen to fp32 exactly);
    // the conformance suite's default tolerance follows it. Say it honestly.
    // (The #if lets this file build against an older header too: the suite
    // compiles it against the v1.2 header to check old plugins keep passing.)
#if HALO_ABI_VERSION_MINOR >= 3
  if (lim.struct_size >= HALO_STRUCT_SIZE(halo_limits, compute_dtype))
    lim.compute_dtype = HALO_COMPUTE_DTYPE_FP32;
#endif
    // v1.5: any query count per sequence runs, so every token a speculative
    // decode proposes verifies in one step: the proposal stands as it came
    // (a fixed-shape device writes what it compiled verify graphs for).
#if HALO_ABI_VERSION_MINOR >= 5
  if (lim.struct_size >= HALO_STRUCT_SIZE(halo_limits, num_speculative_tokens)) {
    if (lim.num_speculative_tokens < 0) invalid("limits.num_speculative_tokens is negative");
  }
#endif
  // v1.6: no LoRA adapter slots (no HALO_CAP_LORA, lora_slot_set NULL):
  // whatever the core proposes, the answer is 0 slots of rank 0. Read and
  // write the pair only when the caller's struct reaches max_lora_rank: on
  // LP64 max_loras sits in a v1.5 caller's tail padding.
#if HALO_ABI_VERSION_MINOR >= 6
  if (lim.struct_size >= HALO_STRUCT_SIZE(halo_limits, max_lora_rank)) {
    lim.max_loras = 0;
    lim.max_lora_rank = 0;
  }
#endif
}

halo_error* prepare(halo_prepare_args* args) {
  return guard("prepare", [&] {
    // halo_prepare_args grew in v1.4 (quantized_weights, which this plugin
    // does not take: quant_types 0): a v1.3 caller's struct ends at executable.
    check_args(args, "args", HALO_STRUCT_SIZE(halo_prepare_args, executable));
    if (args->device == nullptr) invalid("device is NULL");
    validate_spec(args->spec);
    // halo_limits grew in v1.2 (kv_cache_dtype) and v1.3 (compute_dtype).
    check_args(args->limits, "limits", HALO_STRUCT_SIZE(halo_limits, kv_memory_available));
    check_options(args->options, args->num_options);
    const halo_model_spec& s = *args->spec;
    halo_limits& lim = *args->limits;
    for (auto [name, v] : {std::pair{"max_num_seqs", lim.max_num_seqs},
                           {"max_model_len", lim.max_model_len},
                           {"max_num_batched_tokens", lim.max_num_batched_tokens},
                           {"block_size", lim.block_size}})
      if (v < 0)
        invalid("limits.", name, "=", v, " must not be negative (0 = the plugin's default)");

    auto exe = std::make_unique<halo_executable>();
    exe->vocab = s.vocab_size;
    exe->hidden = s.hidden_size;
    exe->inter = s.intermediate_size;
    exe->heads = s.num_heads;
    exe->kv_heads = s.num_kv_heads;
    exe->head_dim = s.head_dim;
    exe->eps = s.rms_norm_eps;
    exe->flags = s.flags;
    exe->activation = s.activation;
    exe->inv_freq = rope_inv_freq(s);
    const Weights w(args->weights, args->num_weights);
    load_weights(*exe, s, w);

    // v1.2: the KV cache element type. This template stores fp32 only; a
    // caller older than v1.2 has no such field (struct_size tells).
    const bool has_kv_dtype = lim.struct_size >= HALO_STRUCT_SIZE(halo_limits, kv_cache_dtype);
    if (has_kv_dtype && lim.kv_cache_dtype != HALO_KV_DTYPE_AUTO &&
        lim.kv_cache_dtype != HALO_KV_DTYPE_FP32)
      fail(HALO_STATUS_INVALID_ARGUMENT, "prepare: limits.kv_cache_dtype=", lim.kv_cache_dtype,
           " is not supported: this plugin stores the KV cache in fp32");

    agree_limits(*exe, s, lim, has_kv_dtype);
    args->executable = exe.release();
  });
}

void executable_destroy(halo_executable* e) { delete e; }

// ------------------------------------------------------------------ KV cache

halo_error* kv_cache_create(halo_kv_cache_create_args* args) {
  return guard("kv_cache_create", [&] {
    check_args(args, "args");
    const halo_executable* exe = args->executable;
    if (exe == nullptr) invalid("executable is NULL");
    if (args->num_blocks <= 0) invalid("num_blocks=", args->num_blocks, " must be positive");
    if (args->block_size != exe->limits.block_size)
      invalid("block_size=", args->block_size,
              " differs from the agreed block_size=", exe->limits.block_size);
    auto kv = std::make_unique<halo_kv_cache>();
    kv->exe = exe;
    kv->num_blocks = args->num_blocks;
    kv->slot_floats = static_cast<size_t>(exe->kv_heads) * static_cast<size_t>(exe->head_dim);
    const size_t n = static_cast<size_t>(args->num_blocks) * static_cast<size_t>(args->block_size) *
                     kv->slot_floats;
    kv->k.assign(exe->layers.size(), std::vector<float>(n));
    kv->v.assign(exe->layers.size(), std::vector<float>(n));
    args->kv_cache = kv.release();
  });
}

halo_error* kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* args) {
  return guard("kv_cache_copy_blocks", [&] {
    check_args(args, "args");
    halo_kv_cache* kv = args->kv_cache;
    if (kv == nullptr) invalid("kv_cache is NULL");
    if (args->num_pairs < 0) invalid("num_pairs=", args->num_pairs, " is negative");
    if (args->num_pairs > 0 && (args->src_blocks == nullptr || args->dst_blocks == nullptr))
      invalid("src_blocks or dst_blocks is NULL with num_pairs=", args->num_pairs);
    for (int32_t i = 0; i < args->num_pairs; ++i) {
      if (args->src_blocks[i] < 0 || args->src_blocks[i] >= kv->num_blocks)
        out_of_range("src_blocks[", i, "]=", args->src_blocks[i], " is outside [0, ",
                     kv->num_blocks, ")");
      if (args->dst_blocks[i] < 0 || args->dst_blocks[i] >= kv->num_blocks)
        out_of_range("dst_blocks[", i, "]=", args->dst_blocks[i], " is outside [0, ",
                     kv->num_blocks, ")");
    }
    // A destination listed twice, or also a source (itself included), would
    // make the result depend on the copy order: refused before any copy.
    std::vector<char> is_src(static_cast<size_t>(kv->num_blocks)), is_dst(is_src.size());
    for (int32_t i = 0; i < args->num_pairs; ++i) is_src[static_cast<size_t>(args->src_blocks[i])] = 1;
    for (int32_t i = 0; i < args->num_pairs; ++i) {
      const auto d = static_cast<size_t>(args->dst_blocks[i]);
      if (is_src[d]) invalid("dst_blocks[", i, "]=", d, " is also a source block");
      if (is_dst[d]++) invalid("dst_blocks[", i, "]=", d, " is a destination twice");
    }
    const size_t block = static_cast<size_t>(kv->exe->limits.block_size) * kv->slot_floats;
    for (auto* cache : {&kv->k, &kv->v})
      for (auto& layer : *cache)
        for (int32_t i = 0; i < args->num_pairs; ++i)
          std::copy_n(layer.begin() + static_cast<ptrdiff_t>(args->src_blocks[i] * block), block,
                      layer.begin() +
                          static_cast<ptrdiff_t>(args->dst_blocks[i] * block));  // copy one block
  });
}

void kv_cache_destroy(halo_kv_cache* kv) { delete kv; }

// ------------------------------------------------------------------- execute

void validate_step(const halo_execute_args* a, const halo_executable* exe,
                   const halo_kv_cache* kv) {
  const halo_limits& lim = exe->limits;
  const int32_t T = a->num_tokens, S = a->num_seqs, bs = lim.block_size;
  if (T <= 0 || T > lim.max_num_batched_tokens)
    invalid("num_tokens=", T, " is outside [1, max_num_batched_tokens=", lim.max_num_batched_tokens,
            "]");
  if (S <= 0 || S > lim.max_num_seqs)
    invalid("num_seqs=", S, " is outside [1, max_num_seqs=", lim.max_num_seqs, "]");
  if (!a->token_ids || !a->positions || !a->slot_mapping || !a->query_start || !a->context_lens ||
      !a->block_tables)
    invalid(
        "token_ids, positions, slot_mapping, query_start, context_lens and block_tables must not "
        "be NULL");
  if (a->max_blocks_per_seq <= 0)
    invalid("max_blocks_per_seq=", a->max_blocks_per_seq, " must be positive");
  if (a->query_start[0] != 0 || a->query_start[S] != T)
    invalid("query_start must run from 0 to num_tokens=", T);
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q = a->query_start[s + 1] - a->query_start[s], ctx = a->context_lens[s];
    if (q < 0 || a->query_start[s + 1] > T)
      invalid("query_start[", s + 1, "]=", a->query_start[s + 1], " is out of order");
    if (ctx < q || ctx > lim.max_model_len)
      invalid("context_lens[", s, "]=", ctx, " is outside [", q,
              ", max_model_len=", lim.max_model_len, "]");
    const int32_t blocks = (ctx + bs - 1) / bs;
    if (blocks > a->max_blocks_per_seq)
      invalid("context_lens[", s, "]=", ctx, " needs ", blocks,
              " blocks, max_blocks_per_seq=", a->max_blocks_per_seq);
    for (int32_t j = 0; j < blocks; ++j) {
      const int32_t b = a->block_tables[s * a->max_blocks_per_seq + j];
      if (b < 0 || b >= kv->num_blocks)
        out_of_range("block_tables[", s, "][", j, "]=", b, " is outside [0, ", kv->num_blocks, ")");
    }
  }
  const int64_t slots = int64_t{kv->num_blocks} * bs;
  for (int32_t t = 0; t < T; ++t) {
    if (a->token_ids[t] < 0 || a->token_ids[t] >= exe->vocab)
      out_of_range("token_ids[", t, "]=", a->token_ids[t], " is outside [0, ", exe->vocab, ")");
    if (a->positions[t] < 0) invalid("positions[", t, "]=", a->positions[t], " is negative");
    if (a->slot_mapping[t] < -1 || a->slot_mapping[t] >= slots)
      out_of_range("slot_mapping[", t, "]=", a->slot_mapping[t], " is outside [-1, ", slots, ")");
  }
  // v1.6: no LoRA here. lora_slots (when the caller's struct has it) may be
  // NULL or all -1 (the base model); a slot >= 0 asks for an adapter this
  // plugin cannot run.
#if HALO_ABI_VERSION_MINOR >= 6
  if (a->struct_size >= HALO_STRUCT_SIZE(halo_execute_args, lora_slots) && a->lora_slots)
    for (int32_t s = 0; s < S; ++s) {
      if (a->lora_slots[s] < -1)
        out_of_range("lora_slots[", s, "]=", a->lora_slots[s], " is outside [-1, 0)");
      if (a->lora_slots[s] >= 0)
        fail(HALO_STATUS_UNIMPLEMENTED, "lora_slots[", s, "]=", a->lora_slots[s],
             ": this plugin has no LoRA adapter slots (no HALO_CAP_LORA, max_loras=0)");
    }
#endif
  if (a->num_logits < 0) invalid("num_logits=", a->num_logits, " is negative");
  if (a->num_logits == 0) return;
  if (a->logits_indices == nullptr)
    invalid("logits_indices is NULL with num_logits=", a->num_logits);
  for (int32_t i = 0; i < a->num_logits; ++i)
    if (a->logits_indices[i] < 0 || a->logits_indices[i] >= T)
      out_of_range("logits_indices[", i, "]=", a->logits_indices[i], " is outside [0, ", T, ")");
  const DLTensor* lg = a->logits;
  if (lg == nullptr) invalid("logits is NULL with num_logits=", a->num_logits);
  if (lg->dtype.code != kDLFloat || lg->dtype.bits != 32 || lg->dtype.lanes != 1)
    invalid("logits is not float32");
  if (lg->device.device_type != kDLCPU) invalid("logits is not in host memory");
  if (lg->ndim != 2 || lg->shape == nullptr || lg->shape[0] != a->num_logits ||
      lg->shape[1] != exe->vocab)
    invalid("logits must have shape [num_logits=", a->num_logits, ", vocab_size=", exe->vocab, "]");
  if (lg->strides != nullptr && (lg->strides[1] != 1 || lg->strides[0] != exe->vocab))
    invalid("logits is not contiguous");
  if (lg->data == nullptr) invalid("logits has data=NULL");
}

void rmsnorm(const float* x, const float* w, size_t n, float eps, float* out) {
  double ss = 0;
  for (size_t i = 0; i < n; ++i) ss += double{x[i]} * x[i];
  const float r = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(n) + eps));
  for (size_t i = 0; i < n; ++i) out[i] = x[i] * r * w[i];
}

// out[o] = sum_i W[o, i] * x[i] (+ bias[o]); W is [rows, cols] row-major.
void linear(const std::vector<float>& W, const float* x, size_t rows, size_t cols,
            const std::vector<float>& bias, float* out) {
  for (size_t o = 0; o < rows; ++o) {
    double acc = bias.empty() ? 0.0 : bias[o];
    for (size_t i = 0; i < cols; ++i) acc += double{W[o * cols + i]} * x[i];
    out[o] = static_cast<float>(acc);
  }
}

// Neox half-split rotation of each head of x.
void rope(float* x, size_t heads, size_t hd, const std::vector<double>& inv_freq,
          int32_t position) {
  const size_t half = hd / 2;
  for (size_t i = 0; i < half; ++i) {
    const double angle = position * inv_freq[i];
    const float c = static_cast<float>(std::cos(angle)), s = static_cast<float>(std::sin(angle));
    for (size_t h = 0; h < heads; ++h) {
      float* v = x + h * hd;
      const float a = v[i], b = v[i + half];
      v[i] = a * c - b * s;
      v[i + half] = b * c + a * s;
    }
  }
}

// The sizes of one step's forward pass.
struct Dims {
  size_t T, H, I, hd, nh, nkv, NQ, NKV, bs;
  float scale;  // of the attention scores: 1 / sqrt(head_dim)
};

Dims dims_of(const halo_executable* exe, const halo_execute_args* a) {
  Dims d;
  d.T = static_cast<size_t>(a->num_tokens), d.H = static_cast<size_t>(exe->hidden);
  d.I = static_cast<size_t>(exe->inter), d.hd = static_cast<size_t>(exe->head_dim);
  d.nh = static_cast<size_t>(exe->heads), d.nkv = static_cast<size_t>(exe->kv_heads);
  d.NQ = d.nh * d.hd, d.NKV = d.nkv * d.hd, d.bs = static_cast<size_t>(exe->limits.block_size);
  d.scale = 1.0f / std::sqrt(static_cast<float>(d.hd));
  return d;
}

// One step's activations, allocated once per step: x is every token's
// residual stream, q every token's queries; the others hold one token.
struct Activations {
  explicit Activations(const Dims& d)
      : x(d.T * d.H),
        h(d.H),
        q(d.T * d.NQ),
        k(d.NKV),
        v(d.NKV),
        attn(d.NQ),
        tmp(d.H),
        gate(d.I),
        up(d.I) {}
  std::vector<float> x, h, q, k, v, attn, tmp, gate, up;
  std::vector<double> scores;
};

// 1. q, k, v of every new token of layer W; k and v go to their slots.
void qkv_to_cache(const halo_executable* exe, const Layer& W, const halo_execute_args* a,
                  const Dims& d, Activations& s, float* kc, float* vc) {
  for (size_t t = 0; t < d.T; ++t) {
    rmsnorm(&s.x[t * d.H], W.attn_norm.data(), d.H, exe->eps, s.h.data());
    float* qt = &s.q[t * d.NQ];
    linear(W.q, s.h.data(), d.NQ, d.H, W.q_bias, qt);
    linear(W.k, s.h.data(), d.NKV, d.H, W.k_bias, s.k.data());
    linear(W.v, s.h.data(), d.NKV, d.H, W.v_bias, s.v.data());
    if (exe->flags & HALO_MODEL_QK_NORM) {
      for (size_t i = 0; i < d.nh; ++i)
        rmsnorm(qt + i * d.hd, W.q_norm.data(), d.hd, exe->eps, qt + i * d.hd);
      for (size_t i = 0; i < d.nkv; ++i)
        rmsnorm(&s.k[i * d.hd], W.k_norm.data(), d.hd, exe->eps, &s.k[i * d.hd]);
    }
    rope(qt, d.nh, d.hd, exe->inv_freq, a->positions[t]);
    rope(s.k.data(), d.nkv, d.hd, exe->inv_freq, a->positions[t]);
    const int64_t slot = a->slot_mapping[t];
    if (slot >= 0) {  // -1: a padding token, nothing is written
      std::copy(s.k.begin(), s.k.end(), kc + slot * static_cast<int64_t>(d.NKV));
      std::copy(s.v.begin(), s.v.end(), vc + slot * static_cast<int64_t>(d.NKV));
    }
  }
}

// 2. attention of one token's queries qt over the first n sequence indices
// of its sequence, read through the sequence's block table.
void attend(const Dims& d, const float* qt, const int32_t* table, size_t n, const float* kc,
            const float* vc, std::vector<double>& scores, float* attn) {
  const size_t nh = d.nh, nkv = d.nkv, hd = d.hd, NKV = d.NKV, bs = d.bs;
  scores.resize(n);
  for (size_t head = 0; head < nh; ++head) {
    const size_t g = head / (nh / nkv);  // grouped-query attention: the kv head of this head
    const float* qh = qt + head * hd;
    double max_score = -INFINITY;
    for (size_t j = 0; j < n; ++j) {
      const size_t block =
          static_cast<size_t>(table[j / bs]);  // physical block of sequence index j
      const float* kj = kc + (block * bs + j % bs) * NKV + g * hd;
      double dot = 0;
      for (size_t i = 0; i < hd; ++i) dot += double{qh[i]} * kj[i];
      scores[j] = dot * d.scale;
      max_score = std::max(max_score, scores[j]);
    }
    double sum = 0;
    for (size_t j = 0; j < n; ++j) sum += (scores[j] = std::exp(scores[j] - max_score));
    float* out = attn + head * hd;
    std::fill(out, out + hd, 0.f);
    for (size_t j = 0; j < n; ++j) {
      const size_t block = static_cast<size_t>(table[j / bs]);
      const float* vj = vc + (block * bs + j % bs) * NKV + g * hd;
      const float p = static_cast<float>(scores[j] / sum);
      for (size_t i = 0; i < hd; ++i) out[i] += p * vj[i];
    }
  }
}

// 3. output projection of s.attn and the gated MLP, with residuals, into xt.
void mlp(const halo_executable* exe, const Layer& W, const Dims& d, Activations& s, float* xt) {
  linear(W.o, s.attn.data(), d.H, d.NQ, {}, s.tmp.data());
  for (size_t i = 0; i < d.H; ++i) xt[i] += s.tmp[i];
  rmsnorm(xt, W.mlp_norm.data(), d.H, exe->eps, s.h.data());
  linear(W.gate, s.h.data(), d.I, d.H, {}, s.gate.data());
  linear(W.up, s.h.data(), d.I, d.H, {}, s.up.data());
  for (size_t i = 0; i < d.I; ++i) {
    const float g = s.gate[i];
    if (exe->activation == HALO_ACTIVATION_GELU_TANH) {
      const float c = static_cast<float>(std::sqrt(2.0 / std::numbers::pi));
      s.gate[i] = 0.5f * g * (1.0f + std::tanh(c * (g + 0.044715f * g * g * g))) * s.up[i];
    } else {
      s.gate[i] = g / (1.0f + std::exp(-g)) * s.up[i];
    }
  }
  linear(W.down, s.gate.data(), d.H, d.I, {}, s.tmp.data());
  for (size_t i = 0; i < d.H; ++i) xt[i] += s.tmp[i];
}

// 4. logits of the rows asked for, into the caller's fp32 [num_logits, vocab] tensor.
void write_logits(const halo_executable* exe, const halo_execute_args* a, const Dims& d,
                  Activations& s) {
  float* logits =
      reinterpret_cast<float*>(static_cast<char*>(a->logits ? a->logits->data : nullptr) +
                               (a->logits ? a->logits->byte_offset : 0));
  for (int32_t i = 0; i < a->num_logits; ++i) {
    rmsnorm(&s.x[static_cast<size_t>(a->logits_indices[i]) * d.H], exe->final_norm.data(), d.H,
            exe->eps, s.h.data());
    float* row = logits + static_cast<size_t>(i) * static_cast<size_t>(exe->vocab);
    linear(exe->lm_head, s.h.data(), static_cast<size_t>(exe->vocab), d.H, {}, row);  // the logits
  }
}

halo_error* execute(halo_execute_args* a) {
  return guard("execute", [&] {
    check_args(a, "args");
    const halo_executable* exe = a->executable;
    halo_kv_cache* kv = a->kv_cache;
    if (exe == nullptr) invalid("executable is NULL");
    if (kv == nullptr) invalid("kv_cache is NULL");
    if (kv->exe != exe) invalid("kv_cache belongs to another executable");
    validate_step(a, exe, kv);
    const Dims d = dims_of(exe, a);

    // The sequence of each flat token and how many sequence indices it attends to.
    std::vector<int32_t> seq_of(d.T), n_ctx(d.T);
    for (int32_t s = 0; s < a->num_seqs; ++s)
      for (int32_t t = a->query_start[s]; t < a->query_start[s + 1]; ++t) {
        seq_of[t] = s;
        n_ctx[t] = a->context_lens[s] - (a->query_start[s + 1] - t) + 1;
      }

    Activations s(d);
    for (size_t t = 0; t < d.T; ++t)
      std::copy_n(
          exe->embed.begin() + static_cast<ptrdiff_t>(static_cast<size_t>(a->token_ids[t]) * d.H),
          d.H, s.x.begin() + static_cast<ptrdiff_t>(t * d.H));
    for (size_t l = 0; l < exe->layers.size(); ++l) {
      const Layer& W = exe->layers[l];
      float* kc = kv->k[l].data();
      float* vc = kv->v[l].data();
      qkv_to_cache(exe, W, a, d, s, kc, vc);
      for (size_t t = 0; t < d.T; ++t) {
        const int32_t* table = a->block_tables + static_cast<size_t>(seq_of[t]) *
                                                     static_cast<size_t>(a->max_blocks_per_seq);
        const size_t n = static_cast<size_t>(n_ctx[t]);
        attend(d, &s.q[t * d.NQ], table, n, kc, vc, s.scores, s.attn.data());
        mlp(exe, W, d, s, &s.x[t * d.H]);
      }
    }
    write_logits(exe, a, d, s);
  });
}

// -------------------------------------------------------------------- buffers

size_t tensor_bytes(const DLTensor* t) {
  if (t->device.device_type != kDLCPU) invalid("host tensor is not kDLCPU");
  if (t->dtype.lanes != 1 || t->dtype.bits == 0 || t->dtype.bits % 8 != 0)
    invalid("unsupported dtype");
  if (t->ndim < 0 || (t->ndim > 0 && t->shape == nullptr))
    invalid("host tensor has ndim=", t->ndim, " and no shape");
  size_t n = t->dtype.bits / 8;
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] < 0) invalid("host tensor has shape[", i, "]=", t->shape[i]);
    if (t->strides && t->shape[i] != 1 && t->strides[i] != expect)
      invalid("host tensor is not contiguous");
    expect *= t->shape[i];
    n *= static_cast<size_t>(t->shape[i]);
  }
  if (n > 0 && t->data == nullptr) invalid("host tensor has data=NULL");
  return n;
}

halo_error* buffer_from_host(halo_buffer_from_host_args* args) {
  return guard("buffer_from_host", [&] {
    check_args(args, "args");
    if (args->device == nullptr) invalid("device is NULL");
    const DLTensor* t = args->host;
    if (t == nullptr) invalid("host is NULL");
    const size_t n = tensor_bytes(t);
    auto b = std::make_unique<halo_buffer>();
    b->dtype = t->dtype;
    b->shape.assign(t->shape, t->shape + t->ndim);
    const char* src = static_cast<const char*>(t->data) + t->byte_offset;
    b->bytes.assign(src, src + n);
    args->buffer = b.release();
  });
}

halo_error* buffer_to_host(halo_buffer_to_host_args* args) {
  return guard("buffer_to_host", [&] {
    check_args(args, "args");
    const halo_buffer* b = args->buffer;
    if (b == nullptr) invalid("buffer is NULL");
    DLTensor* t = args->host;
    if (t == nullptr) invalid("host is NULL");
    const size_t n = tensor_bytes(t);
    if (t->dtype.code != b->dtype.code || t->dtype.bits != b->dtype.bits)
      invalid("host dtype differs from the buffer's");
    if (!std::equal(b->shape.begin(), b->shape.end(), t->shape, t->shape + t->ndim))
      invalid("host shape differs from the buffer's");
    std::copy(b->bytes.begin(), b->bytes.begin() + static_cast<ptrdiff_t>(n),
              static_cast<char*>(t->data) + t->byte_offset);
  });
}

void buffer_destroy(halo_buffer* b) { delete b; }

constexpr halo_plugin_api kApi = {
    sizeof(halo_plugin_api),
    HALO_ABI_VERSION_MAJOR,
    HALO_ABI_VERSION_MINOR,
    "template",
    "0.1.0 (naive fp32 example)",
    error_code,
    error_message,
    error_destroy,
    device_count,
    device_get_properties,
    device_open,
    device_destroy,
    prepare,
    executable_destroy,
    kv_cache_create,
    kv_cache_copy_blocks,
    kv_cache_destroy,
    execute,
    buffer_from_host,
    buffer_to_host,
    buffer_destroy,
    nullptr,  // compile (v1.1): only static-shape devices need ahead-of-time compilation
    nullptr,  // device_get_stats (v1.1): optional counters
#if HALO_ABI_VERSION_MINOR >= 3
    nullptr,  // device_measure_peak (v1.3): optional, for halo bench's roofline
#endif
#if HALO_ABI_VERSION_MINOR >= 6
    nullptr,  // lora_slot_set (v1.6): set only by a device claiming HALO_CAP_LORA
#endif
};

}  // namespace

extern "C" HALO_PLUGIN_EXPORT const halo_plugin_api* halo_plugin_get_api(void) { return &kApi; }
