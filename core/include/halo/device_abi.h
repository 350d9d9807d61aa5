/* halo device plugin ABI, version 1.6. Minor versions only append:
 *  1.1: compile, device_get_stats, halo_model_spec.compiled_model_dir / compiled_target;
 *  1.2: halo_limits.kv_cache_dtype;
 *  1.3: halo_limits.compute_dtype; status codes DEVICE_LOST, UNAVAILABLE,
 *       DEADLINE_EXCEEDED; unknown options are refused (halo_option);
 *       HALO_CAP_TENSOR_PARALLEL, halo_device_properties.kv_cache_dtypes
 *       and .compute_dtypes (the device facts the core needs before a model
 *       is prepared, so that it knows no device names); device_measure_peak;
 *       HALO_WEIGHT_* name macros;
 *  1.4: quantized weights (halo_quantized_tensor, halo_prepare_args and
 *       halo_compile_args .quantized_weights, halo_device_properties
 *       .quant_types);
 *  1.5: speculative decoding: halo_limits.num_speculative_tokens (how many
 *       proposed tokens per sequence a decode step may verify),
 *       halo_execute_args.hidden_states and HALO_CAP_HIDDEN_STATES (the
 *       final-normed hidden rows an EAGLE/MTP head would take);
 *  1.6: LoRA adapters: HALO_CAP_LORA, halo_limits.max_loras and
 *       .max_lora_rank (adapter slots), lora_slot_set (fills or empties a
 *       slot), halo_execute_args.lora_slots (each sequence's slot).
 *
 * A device plugin is a shared library that exports one symbol,
 *
 *     const halo_plugin_api* halo_plugin_get_api(void);
 *
 * returning a pointer to a static function table that lives as long as the
 * library is loaded. Everything the core asks of a device goes through that
 * table; the core never includes anything else from a plugin.
 *
 * Evolution rules (as in PJRT's C API):
 *  - The table and every argument struct begin with `struct_size`. The caller
 *    sets it to sizeof() of the struct it was compiled against; the callee
 *    reads and writes only fields that lie inside both its own and the
 *    caller's size, so an older caller works with a newer plugin and back.
 *  - Within a major version fields, table entries and enum values are only
 *    appended (minor bump); existing values never change. Anything else is a
 *    new major version; the core refuses a plugin whose major differs from
 *    its own.
 *  - Every call returns NULL on success or a halo_error* the caller owns and
 *    releases with error_destroy. No C++ exception ever crosses this boundary.
 *  - Tensors are DLPack DLTensor (Debian's dlpack 0.6). A `const DLTensor*`
 *    argument is borrowed for the duration of the call unless a comment says
 *    otherwise.
 *  - Objects a plugin creates are destroyed by the matching *_destroy call. A
 *    plugin is never unloaded while anything it made is alive.
 *
 * Required and optional table entries (a NULL entry = "not implemented"):
 *  - v1.0, required (the core refuses to load a plugin with any of them NULL):
 *    error_code, error_message, error_destroy, device_count,
 *    device_get_properties, device_open, device_destroy, prepare,
 *    executable_destroy, kv_cache_create, kv_cache_copy_blocks,
 *    kv_cache_destroy, execute.
 *  - v1.0, optional as a group: buffer_from_host, buffer_to_host,
 *    buffer_destroy -- all three set if and only if the device claims
 *    HALO_CAP_BUFFERS, else all NULL.
 *  - v1.1, optional: compile (required in practice by a device claiming
 *    HALO_CAP_STATIC_SHAPES that cannot prepare raw weights), device_get_stats.
 *    A caller checks the table's struct_size reaches the entry before reading
 *    it, then that it is not NULL.
 *  - v1.2: no new entries (fields and codes only).
 *  - v1.3, optional: device_measure_peak.
 *  - v1.6, optional: lora_slot_set (set if and only if the device claims
 *    HALO_CAP_LORA).
 *
 * Threads. The core's calling pattern, which a plugin may rely on:
 *  - error_code, error_message, error_destroy, device_count,
 *    device_get_properties and device_get_stats may be called from any thread
 *    at any time, concurrently with each other and with any call below. compile
 *    may run concurrently with calls on opened devices.
 *  - Distinct object trees (a device handle and the executables, KV caches and
 *    buffers made from it) may be used concurrently from different threads:
 *    each served model has its own engine thread, and two device_open calls
 *    on the same device_index give two trees. A plugin whose trees share
 *    hardware or state serializes inside.
 *  - Within one tree the core makes one call at a time: execute,
 *    kv_cache_copy_blocks, kv_cache_create, prepare, device_measure_peak,
 *    lora_slot_set and the destroys of that tree never overlap. The calls of
 *    a tree may come from different threads over its life (built on a
 *    loader thread, stepped on the engine thread), so a plugin keeps no
 *    per-thread state. Calls return when their work is
 *    done (execute: the logits are written); the plugin never calls back.
 *
 * Lifetimes and destruction. The core destroys children before parents:
 * buffers and KV caches, then their executable, then the device, and unloads
 * the library last. A plugin must nevertheless survive any order (a device
 * destroyed while its executables live; each *_destroy frees only its own
 * object). Every *_destroy and error_destroy accepts NULL as a no-op;
 * error_code(NULL) is HALO_STATUS_OK and error_message(NULL) is "". Every
 * other entry given a NULL args pointer, or NULL for a handle it needs,
 * returns INVALID_ARGUMENT. Objects stay destroyable after any error,
 * including DEVICE_LOST.
 *
 * A failed call. Every entry either succeeds or returns an error; on error
 * its out fields are unspecified and the caller owns nothing new.
 *  - Refused arguments (INVALID_ARGUMENT, OUT_OF_RANGE, UNIMPLEMENTED,
 *    FAILED_PRECONDITION): checked before any work, so the call had no effect.
 *    An execute refused this way left the KV cache unchanged.
 *  - execute failing while it runs (OUT_OF_MEMORY, INTERNAL,
 *    DEADLINE_EXCEEDED, UNAVAILABLE): the slots this step was to write
 *    (its slot_mapping) hold undefined values; every other slot of the cache
 *    keeps its contents; the logits are undefined. The executable and the
 *    cache remain usable.
 *  - DEVICE_LOST: the device and everything made from it are unusable; every
 *    later call on them returns DEVICE_LOST (never hangs, never crashes) until
 *    they are destroyed. A new device_open may succeed once the device is back.
 *  What the core does today: it does not distinguish the codes. Any error of a
 *  step (execute) ends every request in flight on that engine with the error's
 *  message, marks the engine unhealthy for good (/health and KServe ready answer
 *  503) and frees the requests' blocks without reading them again (blocks are
 *  entered in the prefix cache only after their step succeeded); the engine
 *  keeps its objects and runs later requests on them, which fail in turn if the
 *  device is gone. Offline runs (halo generate, bench) stop with the error. An
 *  error while loading (device_open, prepare, kv_cache_create) refuses the model.
 *  kv_cache_copy_blocks is called between steps, when the choices of a request
 *  with n / best_of > 1 fork from the one that prefilled their shared prompt.
 */
#ifndef HALO_DEVICE_ABI_H_
#define HALO_DEVICE_ABI_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#ifdef __cplusplus
extern "C" {
#endif

#define HALO_ABI_VERSION_MAJOR 1
#define HALO_ABI_VERSION_MINOR 6

/* Name of the one symbol every plugin exports. */
#define HALO_PLUGIN_ENTRY_SYMBOL "halo_plugin_get_api"

#if defined(_WIN32)
#define HALO_PLUGIN_EXPORT __declspec(dllexport)
#else
#define HALO_PLUGIN_EXPORT __attribute__((visibility("default")))
#endif

/* Size of a struct up to and including `field`: what a caller compiled
 * against an older header would pass as struct_size. */
#define HALO_STRUCT_SIZE(type, field) \
  (offsetof(type, field) + sizeof(((type*)0)->field))

/* ------------------------------------------------------------------ errors */

typedef enum halo_status_code {
  HALO_STATUS_OK = 0,
  HALO_STATUS_INVALID_ARGUMENT = 1, /* a null pointer, a bad struct_size, a bad value */
  HALO_STATUS_OUT_OF_RANGE = 2,     /* an index or id beyond what exists */
  HALO_STATUS_OUT_OF_MEMORY = 3,    /* the device could not allocate */
  HALO_STATUS_UNIMPLEMENTED = 4,    /* the plugin does not support this request */
  HALO_STATUS_FAILED_PRECONDITION = 5, /* a call made in the wrong state */
  HALO_STATUS_INTERNAL = 6,         /* anything else that went wrong inside */
  /* v1.3. A plugin older than v1.3 reports these conditions as INTERNAL; a
   * caller older than v1.3 must treat an unknown code as INTERNAL. */
  HALO_STATUS_DEVICE_LOST = 7,      /* the device failed (chip fault, reset, driver gone): its
                                     * objects are unusable, see "A failed call" above */
  HALO_STATUS_UNAVAILABLE = 8,      /* the device cannot take the work now (busy, held by another
                                     * process, resetting); nothing was done, a retry may succeed */
  HALO_STATUS_DEADLINE_EXCEEDED = 9, /* the device did not finish within its deadline (a command
                                      * timeout); the step's slots are undefined. A plugin that
                                      * then considers the device hung answers later calls with
                                      * DEVICE_LOST */
} halo_status_code;

/* Name of a halo_status_code for messages ("OK", "INVALID_ARGUMENT", ...). */
static inline const char* halo_status_name(int32_t code) {
  switch (code) {
    case HALO_STATUS_OK: return "OK";
    case HALO_STATUS_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case HALO_STATUS_OUT_OF_RANGE: return "OUT_OF_RANGE";
    case HALO_STATUS_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case HALO_STATUS_UNIMPLEMENTED: return "UNIMPLEMENTED";
    case HALO_STATUS_FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case HALO_STATUS_INTERNAL: return "INTERNAL";
    case HALO_STATUS_DEVICE_LOST: return "DEVICE_LOST";
    case HALO_STATUS_UNAVAILABLE: return "UNAVAILABLE";
    case HALO_STATUS_DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    default: return "UNKNOWN";
  }
}

/* Opaque error object: a code and a message. Owned by the caller. */
typedef struct halo_error halo_error;

/* --------------------------------------------------------- opaque handles */

typedef struct halo_device halo_device;         /* one opened device */
typedef struct halo_executable halo_executable; /* a model prepared for a device */
typedef struct halo_kv_cache halo_kv_cache;     /* paged KV cache of an executable */
typedef struct halo_buffer halo_buffer;         /* a tensor in device memory */

/* -------------------------------------------------------- device facts */

typedef enum halo_device_kind {
  HALO_DEVICE_KIND_CPU = 0,
  HALO_DEVICE_KIND_GPU = 1,
  HALO_DEVICE_KIND_NPU = 2,
  HALO_DEVICE_KIND_OTHER = 3,
} halo_device_kind;

/* Capability bits in halo_device_properties.capabilities. */
#define HALO_CAP_DTYPE_FP32 (1u << 0)          /* accepts fp32 weights */
#define HALO_CAP_DTYPE_BF16 (1u << 1)          /* accepts bf16 weights */
#define HALO_CAP_DTYPE_FP16 (1u << 2)          /* accepts fp16 weights */
#define HALO_CAP_CHUNKED_PREFILL (1u << 3)     /* a prompt may be split over steps */
#define HALO_CAP_MIXED_BATCH (1u << 4)         /* prefill and decode in one step */
#define HALO_CAP_STATIC_SHAPES (1u << 5)       /* limits are fixed when prepared */
#define HALO_CAP_BUFFERS (1u << 6)             /* buffer_* calls are implemented */
/* v1.3: device_open and prepare take the option "tensor_parallel_size" (the
 * chips or devices one model is split over). Without the bit the core
 * refuses a tensor-parallel size above 1 for this device. */
#define HALO_CAP_TENSOR_PARALLEL (1u << 7)
/* v1.5: execute fills halo_execute_args.hidden_states when the caller asks. */
#define HALO_CAP_HIDDEN_STATES (1u << 8)
/* v1.6: LoRA adapter slots (halo_limits.max_loras, lora_slot_set,
 * halo_execute_args.lora_slots). */
#define HALO_CAP_LORA (1u << 9)

typedef struct halo_device_properties {
  size_t struct_size;
  halo_device_kind kind;
  char name[64];            /* e.g. "cpu", "NVIDIA H100", "ATOM (simulated)" */
  char vendor[64];
  uint64_t memory_bytes;    /* total memory usable for weights and KV */
  uint64_t memory_free_bytes;
  int32_t num_chips;        /* >1: tensor parallel inside the device */
  uint32_t capabilities;    /* HALO_CAP_* bits */
  /* Limits the device imposes before a model is prepared; 0 = none. */
  int32_t max_batch_size;
  int32_t required_block_size;
  int32_t max_model_len;
  /* v1.3: the KV cache element types the device can keep, one bit
   * HALO_DTYPE_BIT(d) per halo_kv_dtype d; 0: not said. The core sizes the
   * KV cache from it before a model is prepared (prepare's kv_cache_dtype is
   * the final word). */
  uint32_t kv_cache_dtypes;
  /* v1.3: the halo_compute_dtype values prepare's option "dtype" takes
   * ("float32", "bfloat16", "float16"), one bit HALO_DTYPE_BIT(d) each: the
   * plugin then computes the model in that type whatever its weights are
   * stored in. 0: the plugin takes no "dtype" option and computes a model in
   * its stored dtype (the core never sends one). */
  uint32_t compute_dtypes;
  /* v1.4: the halo_quant_type values prepare accepts in quantized_weights,
   * one bit HALO_DTYPE_BIT(t) each; 0: none (the core then refuses a
   * quantized model for this device, naming the types it has). */
  uint32_t quant_types;
} halo_device_properties;

typedef struct halo_device_count_args {
  size_t struct_size;
  int32_t count; /* out */
} halo_device_count_args;

typedef struct halo_device_get_properties_args {
  size_t struct_size;
  int32_t device_index;
  halo_device_properties* properties; /* out: caller sets its struct_size */
} halo_device_get_properties_args;

/* A string option, e.g. {"threads", "2"}. Keys are plugin specific. The core
 * hands one list to both device_open and prepare (compile gets its own), so a
 * plugin accepts at each of those two calls every key it takes at either, and
 * reads each where it applies; a later duplicate key wins. Since v1.3 each of
 * device_open, prepare and compile refuses a key the plugin does not take at
 * all with INVALID_ARGUMENT naming it (a misspelt option must not silently
 * become a default); a v1.2 plugin may ignore it.
 * The core passes only what the user set (e.g. "threads" only with --threads). */
typedef struct halo_option {
  const char* key;
  const char* value;
} halo_option;

typedef struct halo_device_open_args {
  size_t struct_size;
  int32_t device_index;
  const halo_option* options;
  size_t num_options;
  halo_device* device; /* out */
} halo_device_open_args;

/* ----------------------------------------------------------- the model */

typedef enum halo_rope_scaling {
  HALO_ROPE_SCALING_NONE = 0,
  HALO_ROPE_SCALING_LINEAR = 1,
  HALO_ROPE_SCALING_LLAMA3 = 2,
} halo_rope_scaling;

typedef enum halo_activation {
  HALO_ACTIVATION_SILU = 0, /* down(silu(gate(x)) * up(x)) */
  HALO_ACTIVATION_GELU_TANH = 1,
} halo_activation;

/* Bits in halo_model_spec.flags. */
#define HALO_MODEL_QKV_BIAS (1u << 0)         /* q/k/v projections carry biases */
#define HALO_MODEL_QK_NORM (1u << 1)          /* per-head RMSNorm of q and k before RoPE */
#define HALO_MODEL_TIED_EMBEDDINGS (1u << 2)  /* lm_head is embed_tokens */

/* A decoder-only transformer with pre-RMSNorm, rotary positions (neox
 * half-split layout), grouped-query attention and a gated MLP. Llama 2/3,
 * Mistral, Qwen2/2.5/3 and Phi-3 are all points in this space. */
typedef struct halo_model_spec {
  size_t struct_size;
  const char* architecture; /* informational, e.g. "LlamaForCausalLM" */
  int32_t vocab_size;
  int32_t hidden_size;
  int32_t intermediate_size;
  int32_t num_layers;
  int32_t num_heads;
  int32_t num_kv_heads;
  int32_t head_dim;
  int32_t max_position_embeddings;
  float rms_norm_eps;
  float rope_theta;
  halo_rope_scaling rope_scaling;
  float rope_factor;                 /* LINEAR and LLAMA3 */
  float rope_low_freq_factor;        /* LLAMA3 */
  float rope_high_freq_factor;       /* LLAMA3 */
  int32_t rope_original_max_position; /* LLAMA3 */
  halo_activation activation;
  uint32_t flags; /* HALO_MODEL_* bits */
  /* v1.1: a model compiled ahead of time (halo compile) is a directory the
   * plugin reads itself; prepare then gets no weights. NULL for a plain
   * Hugging Face model. compiled_target names the plugin it was built for. */
  const char* compiled_model_dir;
  const char* compiled_target;
} halo_model_spec;

/* Weights use canonical names, whatever the checkpoint called them:
 *   embed_tokens                     [vocab, hidden]
 *   layers.{i}.attn_norm             [hidden]
 *   layers.{i}.q_proj                [heads*head_dim, hidden]
 *   layers.{i}.k_proj, v_proj        [kv_heads*head_dim, hidden]
 *   layers.{i}.q_bias                [heads*head_dim]     (QKV_BIAS)
 *   layers.{i}.k_bias, v_bias        [kv_heads*head_dim]  (QKV_BIAS)
 *   layers.{i}.q_norm, k_norm        [head_dim]           (QK_NORM)
 *   layers.{i}.o_proj                [hidden, heads*head_dim]
 *   layers.{i}.mlp_norm              [hidden]
 *   layers.{i}.gate_proj, up_proj    [intermediate, hidden]
 *   layers.{i}.down_proj             [hidden, intermediate]
 *   final_norm                       [hidden]
 *   lm_head                          [vocab, hidden]      (absent when tied)
 * Matrices are row-major [out, in] as in PyTorch's nn.Linear. Tensors may be
 * fp32, bf16 or fp16 and may carry a byte_offset (views into fused tensors).
 *
 * v1.3: the names are spelled once, here; the core and the plugins use these
 * macros. A layer weight's name is HALO_WEIGHT_LAYER_PREFIX "{i}." suffix,
 * e.g. "layers.3.q_proj". (Only macros: a v1.2 plugin sees the same strings.) */
#define HALO_WEIGHT_EMBED_TOKENS "embed_tokens"
#define HALO_WEIGHT_FINAL_NORM "final_norm"
#define HALO_WEIGHT_LM_HEAD "lm_head"
#define HALO_WEIGHT_LAYER_PREFIX "layers."
#define HALO_WEIGHT_ATTN_NORM "attn_norm"
#define HALO_WEIGHT_Q_PROJ "q_proj"
#define HALO_WEIGHT_K_PROJ "k_proj"
#define HALO_WEIGHT_V_PROJ "v_proj"
#define HALO_WEIGHT_Q_BIAS "q_bias"
#define HALO_WEIGHT_K_BIAS "k_bias"
#define HALO_WEIGHT_V_BIAS "v_bias"
#define HALO_WEIGHT_Q_NORM "q_norm"
#define HALO_WEIGHT_K_NORM "k_norm"
#define HALO_WEIGHT_O_PROJ "o_proj"
#define HALO_WEIGHT_MLP_NORM "mlp_norm"
#define HALO_WEIGHT_GATE_PROJ "gate_proj"
#define HALO_WEIGHT_UP_PROJ "up_proj"
#define HALO_WEIGHT_DOWN_PROJ "down_proj"
typedef struct halo_named_tensor {
  const char* name;
  const DLTensor* tensor;
} halo_named_tensor;

/* v1.4: quantized weights. A projection matrix [out, in] (q/k/v/o_proj,
 * gate/up/down_proj, lm_head; never embed_tokens, norms or biases) may come
 * quantized instead of as a plain tensor, in one layout that every format is
 * converted to (GGUF Q8_0/Q4_0/Q4_K/Q5_K/Q6_K, GPTQ, compressed-tensors, the
 * core's own --quantization): the input dimension is cut into groups of
 * group_size consecutive elements, and element (n, k) of the matrix is
 *
 *     w[n][k] = scales[n][k / group_size] * q[n][k] + offsets[n][k / group_size]
 *
 * with offsets == NULL meaning 0 (symmetric). q is an integer of `type`:
 *  - INT8:  values is int8 [out, in], q in [-128, 127];
 *  - UINT4: values is uint8 [out, in / 2], q in [0, 15]; element 2j of a row
 *           is the low nibble of byte j, element 2j + 1 the high nibble.
 * scales and offsets are fp32, fp16 or bf16 [out, in / group_size], both of
 * one dtype. group_size divides `in` and is a multiple of 16 (per output
 * channel: group_size == in). values, scales and offsets are row-major and
 * dense (no strides); their memory follows the same rule as plain weights
 * (valid until executable_destroy returns). A weight appears once, either in
 * weights or in quantized_weights. The struct is frozen: a new layout is a
 * new halo_quant_type, never a new field. */
typedef enum halo_quant_type {
  HALO_QUANT_NONE = 0, /* not a valid type of a quantized tensor */
  HALO_QUANT_INT8 = 1,
  HALO_QUANT_UINT4 = 2,
} halo_quant_type;

/* Name of a halo_quant_type for messages ("int8", "uint4"). */
static inline const char* halo_quant_type_name(int32_t t) {
  switch (t) {
    case HALO_QUANT_INT8: return "int8";
    case HALO_QUANT_UINT4: return "uint4";
    default: return "unknown";
  }
}

typedef struct halo_quantized_tensor {
  const char* name;         /* canonical, as for halo_named_tensor */
  int32_t type;             /* halo_quant_type */
  int32_t group_size;
  int64_t rows, cols;       /* the matrix's [out, in] */
  const DLTensor* values;
  const DLTensor* scales;
  const DLTensor* offsets;  /* may be NULL */
} halo_quantized_tensor;

/* Engine limits. The core proposes them in prepare; the plugin returns what it
 * will honour. A static-shape device answers with its compiled limits. */
typedef struct halo_limits {
  size_t struct_size;
  int32_t max_num_seqs;           /* sequences in one step */
  int32_t max_model_len;          /* tokens per sequence, prompt plus output */
  int32_t max_num_batched_tokens; /* tokens in one step */
  int32_t block_size;             /* tokens per KV block */
  uint32_t capabilities;          /* out: HALO_CAP_CHUNKED_PREFILL / MIXED_BATCH as agreed */
  uint64_t kv_bytes_per_block;    /* out: device bytes one KV block takes (all layers) */
  uint64_t kv_memory_available;   /* out: device bytes left for KV after weights */
  /* v1.2: element type of the KV cache. in: proposed (AUTO = the device's
   * choice); out: what the cache stores. A plugin that cannot store the
   * proposed type fails prepare naming it; a caller older than v1.2 gets
   * the device's choice. */
  int32_t kv_cache_dtype; /* halo_kv_dtype */
  /* v1.3, out only (the caller sets 0): the element type this prepared
   * model is computed in, halo_compute_dtype -- the narrowest type any
   * matmul input (weight or activation) is rounded to, accumulation assumed
   * fp32. It decides how far its logits may stray from an fp32 reference
   * (the conformance suite's default tolerance). It is a property of the
   * prepared model, not of the device: the same device may compute fp32
   * weights in fp32 and 16-bit weights in bf16. A v1.3 plugin always answers;
   * a plugin older than v1.3 leaves it unset. On LP64 the field occupies what
   * was the v1.2 struct's tail padding (sizeof stays 56), so a v1.2 caller's
   * struct_size already covers it: the caller learns that the plugin answered
   * from its abi_minor >= 3, not from struct_size. */
  int32_t compute_dtype; /* halo_compute_dtype */
  /* v1.5: speculative decoding. in: the proposed tokens per sequence the
   * core wants verified (0 = no speculation). out: the most proposed tokens
   * per sequence the device verifies in a decode step, i.e. a decode step's
   * sequence may carry up to 1 + num_speculative_tokens query tokens (the
   * last real token, then the proposals), its context_lens counting them all.
   * A dynamic-shape plugin echoes the proposal; a static-shape device answers
   * with what it was compiled for (0: no verify graph). A caller talking to a
   * plugin older than v1.5 assumes the proposal is honoured when the device
   * mixes prefill and decode (HALO_CAP_MIXED_BATCH) and 0 otherwise. */
  int32_t num_speculative_tokens;
  /* v1.6: LoRA adapter slots (HALO_CAP_LORA). in: the slots the core wants
   * (0 = no LoRA) and the largest adapter rank it will load; out: the slots
   * the executable has (0 for a device without LoRA, or one that refuses
   * it) and the largest rank a slot takes. A plugin may answer fewer slots
   * or a smaller rank; the core then refuses what does not fit. Read and
   * write the pair only when struct_size reaches max_lora_rank: on LP64
   * max_loras occupies what was the v1.5 struct's tail padding (sizeof was
   * 64), so a v1.5 caller's struct_size covers max_loras but not
   * max_lora_rank. A caller talking to a plugin older than v1.6 takes 0
   * slots. */
  int32_t max_loras;
  int32_t max_lora_rank;
} halo_limits;

/* v1.2: KV cache element types (halo_limits.kv_cache_dtype). */
typedef enum halo_kv_dtype {
  HALO_KV_DTYPE_AUTO = 0, /* in only: bf16 for 16-bit checkpoints, else the device's default */
  HALO_KV_DTYPE_FP32 = 1,
  HALO_KV_DTYPE_BF16 = 2,
  HALO_KV_DTYPE_FP16 = 3,
} halo_kv_dtype;

/* v1.3: the bit of a halo_kv_dtype or halo_compute_dtype in
 * halo_device_properties.kv_cache_dtypes and .compute_dtypes. */
#define HALO_DTYPE_BIT(d) (1u << (uint32_t)(d))

/* Name of a halo_kv_dtype for messages ("auto", "fp32", "bf16", "fp16"). */
static inline const char* halo_kv_dtype_name(int32_t d) {
  switch (d) {
    case HALO_KV_DTYPE_AUTO: return "auto";
    case HALO_KV_DTYPE_FP32: return "fp32";
    case HALO_KV_DTYPE_BF16: return "bf16";
    case HALO_KV_DTYPE_FP16: return "fp16";
    default: return "unknown";
  }
}

/* v1.3: compute element types (halo_limits.compute_dtype). 1..3 share their
 * values with halo_kv_dtype. */
typedef enum halo_compute_dtype {
  HALO_COMPUTE_DTYPE_UNSET = 0, /* not reported: a plugin older than v1.3 */
  HALO_COMPUTE_DTYPE_FP32 = 1,
  HALO_COMPUTE_DTYPE_BF16 = 2,
  HALO_COMPUTE_DTYPE_FP16 = 3,
  HALO_COMPUTE_DTYPE_FP8 = 4,  /* fp8 e4m3 matmul inputs */
  HALO_COMPUTE_DTYPE_INT8 = 5, /* int8 quantized weights and activations */
} halo_compute_dtype;

/* Name of a halo_compute_dtype for messages ("unset", "fp32", "bf16", ...). */
static inline const char* halo_compute_dtype_name(int32_t d) {
  switch (d) {
    case HALO_COMPUTE_DTYPE_UNSET: return "unset";
    case HALO_COMPUTE_DTYPE_FP32: return "fp32";
    case HALO_COMPUTE_DTYPE_BF16: return "bf16";
    case HALO_COMPUTE_DTYPE_FP16: return "fp16";
    case HALO_COMPUTE_DTYPE_FP8: return "fp8";
    case HALO_COMPUTE_DTYPE_INT8: return "int8";
    default: return "unknown";
  }
}

typedef struct halo_prepare_args {
  size_t struct_size;
  halo_device* device;
  const halo_model_spec* spec;
  const halo_named_tensor* weights;
  size_t num_weights;
  /* The host keeps every weight's memory valid and unchanged until
   * executable_destroy returns, so a host-memory plugin may use it in place. */
  halo_limits* limits; /* in: proposed; out: agreed */
  const halo_option* options;
  size_t num_options;
  halo_executable* executable; /* out */
  /* v1.4: weights given quantized (see halo_quantized_tensor); only types
   * the device lists in quant_types. A plugin refuses any other type, group
   * size or shape with INVALID_ARGUMENT naming the weight. */
  const halo_quantized_tensor* quantized_weights;
  size_t num_quantized_weights;
} halo_prepare_args;

/* ------------------------------------------------------------ KV cache */

typedef struct halo_kv_cache_create_args {
  size_t struct_size;
  halo_executable* executable;
  int32_t num_blocks;
  int32_t block_size; /* must equal the agreed limits.block_size */
  halo_kv_cache* kv_cache; /* out */
} halo_kv_cache_create_args;

/* Copies whole blocks: after the call block dst[i] holds what src[i] held,
 * for every layer. Used for copy-on-write of shared prefixes. One source may
 * go to several destinations; a destination appears once and is never also a
 * source (src[i] == dst[i] included): such a list, whose result would depend
 * on the copy order, is refused with INVALID_ARGUMENT; an index outside
 * [0, num_blocks) with OUT_OF_RANGE; either before anything is copied.
 * num_pairs = 0 is a no-op. */
typedef struct halo_kv_cache_copy_blocks_args {
  size_t struct_size;
  halo_kv_cache* kv_cache;
  const int32_t* src_blocks;
  const int32_t* dst_blocks;
  int32_t num_pairs;
} halo_kv_cache_copy_blocks_args;

/* -------------------------------------------------------------- a step */

/* One batch step. Tokens of all sequences are flattened: sequence s owns the
 * q = query_start[s+1] - query_start[s] tokens [query_start[s], query_start[s+1]).
 * context_lens[s] counts every token of the sequence after this step (cached
 * plus new), so the j-th new token sits at sequence index
 * context_lens[s] - q + j. Each new token's K/V is first written to slot
 * slot_mapping[t] (= block * block_size + offset; -1 = do not write, used for
 * padding); then the token attends causally to sequence indices 0..its own,
 * reading K/V only through block_tables (block k of sequence s holds indices
 * [k*block_size, (k+1)*block_size)). positions[t] feeds RoPE. Logits are
 * computed only for the flat rows listed in logits_indices. */
typedef struct halo_execute_args {
  size_t struct_size;
  halo_executable* executable;
  halo_kv_cache* kv_cache;
  int32_t num_tokens;
  const int32_t* token_ids;    /* [num_tokens] */
  const int32_t* positions;    /* [num_tokens] */
  const int64_t* slot_mapping; /* [num_tokens] */
  int32_t num_seqs;
  const int32_t* query_start;  /* [num_seqs + 1] */
  const int32_t* context_lens; /* [num_seqs] */
  const int32_t* block_tables; /* [num_seqs * max_blocks_per_seq], -1 padded */
  int32_t max_blocks_per_seq;
  int32_t num_logits;
  const int32_t* logits_indices; /* [num_logits] rows of the flat batch */
  /* out: host fp32 [num_logits, vocab_size], allocated by the caller */
  DLTensor* logits;
  /* v1.5, out: host fp32 [num_logits, hidden_size], allocated by the caller,
   * or NULL (not asked). The rows lm_head takes, after the final norm, for
   * the same logits_indices: logits = hidden_states x lm_head^T. Only asked
   * of a device with HALO_CAP_HIDDEN_STATES; one without it ignores it. */
  DLTensor* hidden_states;
  /* v1.6: [num_seqs], the LoRA slot each sequence runs with (-1: the base
   * model alone), or NULL (every sequence runs the base). A slot must be in
   * [0, limits.max_loras) and filled by lora_slot_set; an empty slot runs as
   * the base. A device without HALO_CAP_LORA refuses a non-NULL array with
   * any slot >= 0 (UNIMPLEMENTED). Sequences of different slots and of the
   * base share one step: each sequence's rows are those it would get alone. */
  const int32_t* lora_slots;
} halo_execute_args;

/* ------------------------------------------------------------- buffers */

/* Copies a host tensor into device memory. */
typedef struct halo_buffer_from_host_args {
  size_t struct_size;
  halo_device* device;
  const DLTensor* host;
  halo_buffer* buffer; /* out */
} halo_buffer_from_host_args;

/* Copies a buffer back into a host tensor of the same dtype and shape. */
typedef struct halo_buffer_to_host_args {
  size_t struct_size;
  halo_buffer* buffer;
  DLTensor* host; /* caller-allocated */
} halo_buffer_to_host_args;

/* ------------------------------------------------- v1.1: compile, stats */

/* Ahead-of-time compilation for a static-shape device: shards and converts
 * the weights and writes a compiled model directory (a manifest plus whatever
 * the plugin needs) to out_dir. Options are plugin specific (e.g.
 * batch_size, max_seq_len, tensor_parallel_size, dtype, decode_buckets,
 * num_speculative_tokens for verify programs (v1.5; the conformance suite
 * passes it under that name), dry_run=1 to check and estimate without
 * writing). The plugin writes a
 * NUL-terminated JSON summary (memory per chip, estimates) into `summary` when
 * it is not NULL, truncated to summary_capacity bytes. */
typedef struct halo_compile_args {
  size_t struct_size;
  int32_t device_index;
  const halo_model_spec* spec;
  const halo_named_tensor* weights;
  size_t num_weights;
  const halo_option* options;
  size_t num_options;
  const char* out_dir;
  char* summary;           /* out, caller-allocated, may be NULL */
  size_t summary_capacity;
  /* v1.4: as in halo_prepare_args. */
  const halo_quantized_tensor* quantized_weights;
  size_t num_quantized_weights;
} halo_compile_args;

#define HALO_MAX_CHIPS 16

/* Cumulative counters of a device since the plugin was loaded (a simulator
 * reports simulated time; a real device may report only what it knows and
 * leaves the rest 0). */
typedef struct halo_device_stats {
  size_t struct_size;
  uint64_t steps;                 /* programs executed */
  uint64_t tokens;                /* rows computed, padding included */
  double device_seconds;          /* device time of all steps */
  double compute_seconds;         /* compute-bound share */
  double memory_seconds;          /* memory-bound share */
  double link_seconds;            /* chip-to-chip share */
  int32_t num_chips;
  uint64_t chip_memory_used[HALO_MAX_CHIPS];
  uint64_t chip_memory_capacity[HALO_MAX_CHIPS];
} halo_device_stats;

typedef struct halo_device_get_stats_args {
  size_t struct_size;
  int32_t device_index;
  halo_device_stats* stats; /* out: caller sets its struct_size */
} halo_device_get_stats_args;

/* -------------------------------------- v1.3: device_measure_peak */

/* The device's dense matmul peak in a compute type, as `halo bench latency`
 * reports it beside the model's rooflines: what the plugin measures on the
 * opened device (with its options, e.g. threads) or knows from its data
 * sheet. Takes at most about budget_seconds. UNIMPLEMENTED for a type the
 * plugin cannot measure. */
typedef struct halo_device_measure_peak_args {
  size_t struct_size;
  halo_device* device;
  int32_t compute_dtype;  /* HALO_COMPUTE_DTYPE_* */
  double budget_seconds;  /* > 0 */
  double flops_per_s;     /* out: 2*M*N*K per second */
  char method[128];       /* out: how, e.g. "oneDNN brg:avx512_core_bf16, 256x2048x2048" */
} halo_device_measure_peak_args;

/* ------------------------------------------------------- v1.6: LoRA */

/* Fills LoRA adapter slot `slot` of an executable, replacing what it held,
 * or empties it (num_weights = 0). A projection W [out, in] of the model then
 * computes, for the sequences execute runs with that slot,
 *
 *     y = x W^T + (x A^T) B^T
 *
 * with the adapter's A [rank, in] and B [out, rank]; the adapter's scale
 * (lora_alpha / rank) is already folded into B. Weights are named
 * "{projection}" HALO_LORA_A_SUFFIX and "{projection}" HALO_LORA_B_SUFFIX,
 * e.g. "layers.3.q_proj.lora_a", for any of the projections q/k/v/o_proj and
 * gate/up/down_proj (never embed_tokens or lm_head); a projection without
 * both has no adapter. fp32, bf16 or fp16, row-major; ranks may differ per
 * projection, each at most limits.max_lora_rank. The plugin copies what it
 * needs: the caller may free the weights when the call returns.
 * INVALID_ARGUMENT names an unknown projection, a lone A or B, or a wrong
 * shape or dtype; OUT_OF_RANGE a slot outside [0, max_loras) or a rank above
 * max_lora_rank; either leaves the slot as it was. */
typedef struct halo_lora_slot_args {
  size_t struct_size;
  halo_executable* executable;
  int32_t slot;
  const halo_named_tensor* weights;
  size_t num_weights;
} halo_lora_slot_args;

#define HALO_LORA_A_SUFFIX ".lora_a"
#define HALO_LORA_B_SUFFIX ".lora_b"

/* ---------------------------------------------------------- the table */

typedef struct halo_plugin_api {
  size_t struct_size;
  uint32_t abi_major;
  uint32_t abi_minor;
  const char* plugin_name;    /* e.g. "cpu" */
  const char* plugin_version; /* free text */

  /* Errors (required; each accepts NULL). */
  halo_status_code (*error_code)(const halo_error* error);
  const char* (*error_message)(const halo_error* error); /* valid until destroyed */
  void (*error_destroy)(halo_error* error);

  /* Devices (required). */
  halo_error* (*device_count)(halo_device_count_args* args);
  halo_error* (*device_get_properties)(halo_device_get_properties_args* args);
  halo_error* (*device_open)(halo_device_open_args* args);
  void (*device_destroy)(halo_device* device);

  /* Models (required). */
  halo_error* (*prepare)(halo_prepare_args* args);
  void (*executable_destroy)(halo_executable* executable);

  /* KV cache (required, copy_blocks included). */
  halo_error* (*kv_cache_create)(halo_kv_cache_create_args* args);
  halo_error* (*kv_cache_copy_blocks)(halo_kv_cache_copy_blocks_args* args);
  void (*kv_cache_destroy)(halo_kv_cache* kv_cache);

  /* Steps (required). */
  halo_error* (*execute)(halo_execute_args* args);

  /* Buffers (all three with HALO_CAP_BUFFERS; all NULL otherwise). */
  halo_error* (*buffer_from_host)(halo_buffer_from_host_args* args);
  halo_error* (*buffer_to_host)(halo_buffer_to_host_args* args);
  void (*buffer_destroy)(halo_buffer* buffer);

  /* v1.1 (NULL when unsupported; check struct_size first). */
  halo_error* (*compile)(halo_compile_args* args);
  halo_error* (*device_get_stats)(halo_device_get_stats_args* args);

  /* v1.3 (NULL when unsupported; check struct_size first). */
  halo_error* (*device_measure_peak)(halo_device_measure_peak_args* args);

  /* v1.6 (set if and only if HALO_CAP_LORA; check struct_size first). */
  halo_error* (*lora_slot_set)(halo_lora_slot_args* args);
} halo_plugin_api;

typedef const halo_plugin_api* (*halo_plugin_get_api_fn)(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HALO_DEVICE_ABI_H_ */
