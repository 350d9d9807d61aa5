/* ze_rbln_ext.h: extensions of the simulated ATOM-class NPU driver to the
 * Level Zero core API (level_zero/ze_api.h from Debian's libze-dev).
 *
 * The simulator implements a subset of ze_api.h itself (zeInit, zeDriverGet,
 * zeDeviceGet, zeDeviceGetProperties, zeDeviceGetMemoryProperties,
 * zeContextCreate/Destroy, zeMemAllocDevice/zeMemFree, zeCommandQueue*,
 * zeCommandList{Create,Destroy,Close,Reset,AppendMemoryCopy,AppendSignalEvent},
 * zeEventPool*, zeEvent{Create,Destroy,HostSynchronize,QueryStatus}) with the
 * exact Level Zero signatures; every simulated chip is one ze device of type
 * ZE_DEVICE_TYPE_VPU. What Level Zero has no core call for lives here, shaped
 * like Intel's NPU graph extension (ze_graph_ext.h): a compiled program with
 * static argument shapes ("graph") created from a descriptor and appended to a
 * command list, plus simulator-only calls (profile, clock, fault injection).
 *
 * A vendor driver would implement the same calls; the plugin uses nothing else.
 */
#ifndef RBLN_SIM_ZE_RBLN_EXT_H_
#define RBLN_SIM_ZE_RBLN_EXT_H_

#include <stdint.h>

#include <level_zero/ze_api.h>

#ifdef __cplusplus
extern "C" {
#endif

#define ZE_RBLN_EXT_VERSION 3

typedef struct _ze_rbln_graph_handle_t* ze_rbln_graph_handle_t;

typedef enum ze_rbln_dtype_t {
  ZE_RBLN_DTYPE_FP32 = 0,
  ZE_RBLN_DTYPE_BF16 = 1,
  ZE_RBLN_DTYPE_FP16 = 2,
} ze_rbln_dtype_t;

/* Model flags (same bits as halo_model_spec.flags). */
#define ZE_RBLN_MODEL_QKV_BIAS (1u << 0)
#define ZE_RBLN_MODEL_QK_NORM (1u << 1)

/* The decoder-only transformer a graph computes (pre-RMSNorm, neox RoPE, GQA,
 * gated MLP). */
typedef struct ze_rbln_decoder_desc_t {
  uint32_t vocab, hidden, intermediate, layers, heads, kv_heads, head_dim;
  float rms_norm_eps;
  uint32_t activation;   /* 0 = SiLU, 1 = GELU(tanh) */
  uint32_t flags;        /* ZE_RBLN_MODEL_* */
  uint32_t weight_dtype; /* ze_rbln_dtype_t of the matrices (vectors are fp32) */
  const double* rope_inv_freq; /* [head_dim / 2], scaling applied */
  /* v2: weight-only int8. A matrix whose bit is set in quant_mask (bit s for
   * layer slot s, e.g. 1u << ZE_RBLN_L_Q; ZE_RBLN_QUANT_LM_HEAD for lm_head;
   * the same set in every layer) is stored as int8 q [rows, cols] followed,
   * at byte ze_rbln_q8_scales_offset(rows * cols), by fp32 scales
   * [rows, cols / group]: w[n][k] = scales[n][k / group] * q[n][k].
   * group = quant_group, or cols (one scale per output row) when 0. */
  uint32_t quant_mask;
  uint32_t quant_group;
} ze_rbln_decoder_desc_t;

#define ZE_RBLN_QUANT_LM_HEAD (1u << 31)
static inline uint64_t ze_rbln_q8_scales_offset(uint64_t elems) {
  return (elems + 63) & ~(uint64_t)63;
}
static inline uint32_t ze_rbln_q8_group(const ze_rbln_decoder_desc_t* m, uint32_t cols) {
  return m->quant_group ? m->quant_group : cols;
}
/* Device bytes of an int8 matrix [rows, cols]: values, padding, scales. */
static inline uint64_t ze_rbln_q8_bytes(const ze_rbln_decoder_desc_t* m, uint64_t rows,
                                        uint32_t cols) {
  return ze_rbln_q8_scales_offset(rows * cols) + rows * (cols / ze_rbln_q8_group(m, cols)) * 4;
}

/* ---- Tensor-parallel sharding rule (RSD), shared by compiler and runtime.
 * Chip c of n owns query heads [heads*c/n, heads*(c+1)/n) (heads % n == 0),
 * the kv heads those query heads read (split when kv_heads % n == 0,
 * replicated otherwise), intermediate rows [I*c/n, I*(c+1)/n) of gate/up (the
 * same columns of down), vocab rows [V*c/n, V*(c+1)/n) of lm_head; embedding
 * and norms are replicated. q/k/v and gate/up are column parallel, o and down
 * row parallel with an all-reduce after each. */
static inline uint32_t ze_rbln_split(uint32_t total, uint32_t c, uint32_t n) {
  return (uint32_t)(((uint64_t)total * c) / n);
}
static inline uint32_t ze_rbln_kv_lo(const ze_rbln_decoder_desc_t* m, uint32_t c, uint32_t n) {
  uint32_t group = m->heads / m->kv_heads;
  return ze_rbln_split(m->heads, c, n) / group;
}
static inline uint32_t ze_rbln_kv_hi(const ze_rbln_decoder_desc_t* m, uint32_t c, uint32_t n) {
  uint32_t group = m->heads / m->kv_heads;
  return (ze_rbln_split(m->heads, c + 1, n) - 1) / group + 1;
}

/* Weight slots of one chip: 3 global slots, then 14 per layer. */
enum {
  ZE_RBLN_W_EMBED = 0, /* [vocab, hidden] weight dtype, replicated */
  ZE_RBLN_W_FINAL_NORM = 1, /* [hidden] fp32 */
  ZE_RBLN_W_LM_HEAD = 2, /* [vocab_c, hidden] */
  ZE_RBLN_W_GLOBAL = 3,
  ZE_RBLN_L_ATTN_NORM = 0, /* [hidden] fp32 */
  ZE_RBLN_L_Q = 1,         /* [heads_c*hd, hidden] */
  ZE_RBLN_L_K = 2,         /* [kvh_c*hd, hidden] */
  ZE_RBLN_L_V = 3,
  ZE_RBLN_L_QB = 4, /* fp32 biases (QKV_BIAS) or NULL */
  ZE_RBLN_L_KB = 5,
  ZE_RBLN_L_VB = 6,
  ZE_RBLN_L_QN = 7, /* [head_dim] fp32 (QK_NORM) or NULL */
  ZE_RBLN_L_KN = 8,
  ZE_RBLN_L_O = 9,          /* [hidden, heads_c*hd] */
  ZE_RBLN_L_MLP_NORM = 10,  /* [hidden] fp32 */
  ZE_RBLN_L_GATE = 11,      /* [inter_c, hidden] */
  ZE_RBLN_L_UP = 12,
  ZE_RBLN_L_DOWN = 13,      /* [hidden, inter_c] */
  ZE_RBLN_L_SLOTS = 14,
};
static inline uint32_t ze_rbln_num_weight_slots(uint32_t layers) { return ZE_RBLN_W_GLOBAL + layers * ZE_RBLN_L_SLOTS; }

typedef enum ze_rbln_graph_kind_t {
  ZE_RBLN_GRAPH_PREFILL = 0, /* batch 1, `rows` tokens (prefill_chunk_size) */
  ZE_RBLN_GRAPH_DECODE = 1,  /* `rows` sequences, one token each */
  /* v3: speculative decoding's verify step: rows / tokens_per_seq sequences
   * of tokens_per_seq rows each (a sequence's last real token, then its
   * proposed tokens, each row attending causally through its own ctx_len; a
   * sequence with fewer proposals is padded with rows of ctx_len 0). The
   * rows of one sequence read its K/V once. */
  ZE_RBLN_GRAPH_VERIFY = 2,
} ze_rbln_graph_kind_t;

typedef struct ze_rbln_graph_desc_t {
  ze_structure_type_t stype; /* 0 */
  const void* pNext;
  ze_rbln_graph_kind_t kind;
  uint32_t rows;        /* static rows of every argument */
  uint32_t max_seq_len; /* KV length per sequence (one block per sequence) */
  const ze_rbln_decoder_desc_t* model;
  uint32_t num_devices; /* tensor-parallel degree */
  const ze_device_handle_t* devices; /* [num_devices]: chip c runs shard c */
  /* [num_devices][ze_rbln_num_weight_slots(layers)] device pointers on the
   * matching chip; may be NULL for zeRblnGraphEstimate. */
  void* const* weights;
  /* v3: rows per sequence of a VERIFY graph (1 + the proposed tokens it
   * verifies; rows must be a multiple); 0 or 1 for the other kinds. */
  uint32_t tokens_per_seq;
} ze_rbln_graph_desc_t;

/* Arguments of one execution; copied when appended. Every array has `rows`
 * entries. A row with ctx_len 0 is padding: it is computed (static shape) but
 * attends to nothing and writes no KV (its slot must be -1). */
typedef struct ze_rbln_graph_args_t {
  const int32_t* token_ids;
  const int32_t* positions;
  const int64_t* slots;    /* KV slot = block * max_seq_len + index, -1: none */
  const int32_t* ctx_lens; /* indices [0, ctx_len) attended */
  const int32_t* block_ids;
  uint32_t kv_num_blocks;
  void* const* kv; /* [num_devices][layers][2] fp32 [blocks, max_seq_len, kvh_c, hd] on each chip */
  uint32_t num_logits;
  const int32_t* logits_rows; /* [num_logits] */
  float* logits;              /* device memory of chip 0: [num_logits, vocab] fp32 */
} ze_rbln_graph_args_t;

ze_result_t zeRblnGraphCreate(ze_context_handle_t hContext, const ze_rbln_graph_desc_t* desc,
                              ze_rbln_graph_handle_t* phGraph);
ze_result_t zeRblnGraphDestroy(ze_rbln_graph_handle_t hGraph);
ze_result_t zeRblnCommandListAppendGraphExecute(ze_command_list_handle_t hCommandList, ze_rbln_graph_handle_t hGraph,
                                                const ze_rbln_graph_args_t* args, ze_event_handle_t hSignalEvent,
                                                uint32_t numWaitEvents, ze_event_handle_t* phWaitEvents);

/* ---- Simulated clock. */
typedef struct ze_rbln_cost_t {
  double total_s;   /* compute_s + memory_s + link_s + overhead_s */
  double compute_s; /* ops whose FLOPs time exceeds their DRAM time */
  double memory_s;  /* ops bound by DRAM bytes */
  double link_s;    /* all-reduce / all-gather over the RSD link */
  double overhead_s;
  double flops;     /* per chip */
  double dram_bytes; /* per chip */
  double link_bytes; /* per chip, sent */
} ze_rbln_cost_t;

/* Cost of one execution of a graph described by `desc` (weights unused) with
 * these context lengths ([desc->rows], 0 = padding) and logits rows. */
ze_result_t zeRblnGraphEstimate(const ze_rbln_graph_desc_t* desc, const int32_t* ctx_lens, uint32_t num_logits,
                                ze_rbln_cost_t* cost);

typedef struct ze_rbln_clock_t {
  uint64_t executions; /* graphs run on this chip */
  uint64_t rows;       /* rows computed, padding included */
  ze_rbln_cost_t total; /* accumulated */
  ze_rbln_cost_t last;  /* of the last execution */
} ze_rbln_clock_t;
ze_result_t zeRblnDeviceGetClock(ze_device_handle_t hDevice, ze_rbln_clock_t* clock);
ze_result_t zeRblnDeviceGetMemoryUsage(ze_device_handle_t hDevice, uint64_t* used, uint64_t* capacity);

/* ---- Simulator set-up. Call before zeInit (or while nothing is allocated). */
typedef struct ze_rbln_sim_desc_t {
  const char* profile_path; /* YAML device profile; NULL: HALO_RBLN_PROFILE, else the built-in default */
  const char* faults;       /* "chip_fail_at_step=N,alloc_fail=N,hang_at_step=N"; NULL: HALO_RBLN_FAULT */
  uint32_t host_threads;    /* 0: all cores */
} ze_rbln_sim_desc_t;
ze_result_t zeRblnSimConfigure(const ze_rbln_sim_desc_t* desc);

typedef struct ze_rbln_sim_properties_t {
  char name[64];
  char profile_path[512];
  uint32_t num_chips;
  uint64_t memory_per_chip;   /* usable bytes (capacity minus the system reserve) */
  double peak_flops, dram_bandwidth, link_bandwidth, link_latency_s, sram_bytes;
  uint32_t prefill_chunk_size;
  uint32_t command_timeout_ms;
  uint32_t rsd; /* chip-to-chip tensor parallel supported */
} ze_rbln_sim_properties_t;
ze_result_t zeRblnSimGetProperties(ze_rbln_sim_properties_t* props);

/* Message of the last failed call on this thread ("" if none). */
const char* zeRblnGetLastErrorMessage(void);

#ifdef __cplusplus
}
#endif

#endif /* RBLN_SIM_ZE_RBLN_EXT_H_ */
