// halo-conformance: the harness every test uses. A plugin under test and the
// CPU reference plugin are loaded with dlopen; objects are owned by
// shared_ptrs with the plugin's own *_destroy; models are generated in
// memory with random weights; a tiny engine drives execute() with block
// tables.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "halo/device_abi.h"

namespace conf {

using OptionList = std::vector<std::pair<std::string, std::string>>;

// Command line of halo-conformance (filled by main()).
struct Settings {
  std::string plugin_arg;         // --plugin as given
  std::string plugin_path;        // resolved file
  std::string reference_path;     // CPU reference plugin ("" = none found)
  std::string reference_why;      // how it was found, or why not
  int device = 0;                 // --device
  OptionList device_options;      // --device-option k=v (device_open of the plugin under test)
  OptionList prepare_options;     // --prepare-option k=v (prepare of the plugin under test)
  OptionList compile_options;     // --compile-option k=v (compile, v1.1, of the plugin under test)
  std::string tp_option;          // --tp-option KEY: the option selecting the tensor-parallel degree
  std::vector<int> tp_degrees;    // --tp-degrees 1,2,4
  // --tolerance: max |a-b| / max(1, max |ref|) per logits row. 0 = not given:
  // each prepared model gets the default of its compute dtype (tolerance_for).
  double tolerance = 0;
  std::string model_dtype;        // --model-dtype fp32|bf16|fp16: weights of the generated models ("" = preferred)
};
Settings& settings();

// ---------------------------------------------------------------- plugins

struct Lib {
  std::string path;
  void* handle = nullptr;
  const halo_plugin_api* api = nullptr;
  std::string load_error;  // non-empty: could not load
};
// Loads (once) and returns the plugin under test / the reference (nullptr when absent).
const Lib& plugin();
const Lib* reference();
// True when the plugin under test is the reference itself.
bool testing_reference();

struct Status {
  halo_status_code code = HALO_STATUS_OK;
  std::string message;
  bool ok() const { return code == HALO_STATUS_OK; }
};
const char* code_name(halo_status_code code);
std::string describe(const Status& s);  // "INVALID_ARGUMENT: message"
// Takes ownership of e: its code and message, then error_destroy.
Status take(const halo_plugin_api* api, halo_error* e);

// Does the table of `api` reach `field` (a newer entry than the table may have)?
#define CONF_HAS_ENTRY_UNUSED(api, field) ((api)->struct_size >= HALO_STRUCT_SIZE(halo_plugin_api, field) && (api)->field)

using DevicePtr = std::shared_ptr<halo_device>;
using ExecPtr = std::shared_ptr<halo_executable>;
using KvPtr = std::shared_ptr<halo_kv_cache>;
using BufferPtr = std::shared_ptr<halo_buffer>;

halo_device_properties properties(const Lib& lib, int index);
int device_count(const Lib& lib);
DevicePtr open_device(const Lib& lib, int index, const OptionList& options, Status* status);

// Result of a call run in a forked child first (crash detection), then in-process.
struct Outcome {
  bool crashed = false;        // the child died (signal or abnormal exit)
  std::string crash;           // how it died
  bool threw = false;          // a C++ exception escaped the C boundary
  Status status;
};
Outcome isolated(const std::function<Status()>& call, bool also_in_process = true);

// ------------------------------------------------------------------ models

enum class WeightDtype { F32, BF16, F16, Mixed };
const char* dtype_name(WeightDtype d);
// fp32 when the plugin under test claims it, else the first claimed of bf16, fp16.
WeightDtype preferred_dtype();
// Does the plugin under test run compiled models (v1.1 compile entry, and
// STATIC_SHAPES claimed or --compile-option given)? Then every session
// compiles its model first and prepares from the compiled directory.
bool uses_compile();
uint32_t dtype_cap(WeightDtype d);  // the HALO_CAP_DTYPE_* bits a model of this dtype needs

struct ModelConfig {
  std::string family = "llama";
  int vocab = 96, hidden = 48, inter = 80, layers = 2, heads = 4, kv_heads = 2, head_dim = 12;
  int max_pos = 256;
  float eps = 1e-5f, theta = 10000.f;
  halo_rope_scaling scaling = HALO_ROPE_SCALING_NONE;
  float factor = 1.f, low = 1.f, high = 4.f;
  int orig_max = 32;
  halo_activation act = HALO_ACTIVATION_SILU;
  uint32_t flags = 0;
  WeightDtype dtype = WeightDtype::F32;
  uint32_t seed = 1;
};
// The families of the model spec every plugin must run: llama (GQA), mistral
// (one kv head), llama3 (rope scaling), qwen2 (q/k/v bias, tied embeddings),
// qwen3 (q/k norm, head_dim * heads != hidden), gelu (gelu-tanh MLP, linear rope).
std::vector<ModelConfig> model_families();
ModelConfig family(const std::string& name);
// Why the tensor-parallel size of the run's compile options cannot split `c`
// (each chip must own whole query heads: such a model is refused at compile
// time, which is correct, not a failure), or "" when it can.
std::string tp_cannot_split(const ModelConfig& c);

// ABI v1.4: how the suite quantizes a projection [rows, K]: groups of `group`
// inputs (0: one group per row, group = K), symmetric (q in [-127, 127], no
// offsets; INT8 only) or asymmetric (min/max over the group mapped onto the
// type's range, with offsets), scales and offsets rounded to scale_dtype.
struct QuantFormat {
  int32_t type = HALO_QUANT_INT8;  // halo_quant_type
  int group = 32;
  bool asymmetric = false;
  DLDataType scale_dtype{kDLFloat, 32, 1};
};
struct QuantScheme {
  std::string name;
  QuantFormat format;  // every projection's (q/k/v/o, gate/up/down, an untied lm_head) ...
  // ... except those whose name ends in a suffix listed here: another format,
  // or std::nullopt to leave it plain (a fused projection mixing formats).
  std::vector<std::pair<std::string, std::optional<QuantFormat>>> overrides;
  uint32_t types() const;  // HALO_DTYPE_BIT of every type it uses
  std::optional<QuantFormat> format_for(const std::string& weight) const;
};
// int8 per channel (fp32 scales), int8 group 32 (fp16) and 48 (fp32), uint4 group 32 with
// offsets (fp16, fp32, bf16) and a mixed one (uint4 q/k, int8 v and down,
// up_proj plain, as GGUF Q4_K_M mixes types within q|k|v and gate|up).
std::vector<QuantScheme> quant_schemes();

class Model {
 public:
  // With `quant`, the projections are quantized with it: `weights` then holds
  // their dequantized values in fp32 (the reference runs those), `plain` the
  // other weights and `quantized` the quantized tensors (the plugin under test
  // runs these two).
  explicit Model(const ModelConfig& c, const QuantScheme* quant = nullptr);
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;
  const ModelConfig cfg;
  halo_model_spec spec{};
  std::vector<halo_named_tensor> weights;  // views into one arena with byte offsets
  std::vector<halo_named_tensor> plain;    // weights not in quantized
  std::vector<halo_quantized_tensor> quantized;
  const halo_quantized_tensor* find_quantized(const std::string& name) const;
  // A weight's values as fp32 [rows x cols row-major], whatever its dtype;
  // empty when the model has no weight of that name.
  std::vector<float> weight_f32(const std::string& name) const;

 private:
  struct T {
    std::string name;
    std::vector<int64_t> shape;
    DLDataType dtype{};
    size_t offset = 0;
  };
  struct Q {  // one quantized tensor's storage
    std::string name;
    std::vector<int64_t> vshape, sshape;
    std::vector<uint8_t> values, scales, offsets;
    DLTensor v{}, s{}, o{};
  };
  void quantize(const std::string& name, const QuantFormat& f, std::vector<float>& w, int64_t rows,
                int64_t K);
  std::vector<T> tensors_;
  std::vector<uint64_t> arena_;
  std::vector<DLTensor> dl_;
  std::vector<std::unique_ptr<Q>> q_;
};

// ----------------------------------------------------------------- sessions

// Limits the suite proposes; 0 = the device's choice.
struct Proposal {
  int max_num_seqs = 8;
  int max_model_len = 128;
  int max_num_batched_tokens = 128;
  int block_size = 0;
  int num_speculative_tokens = 0;  // v1.5 (and a compiled device's compile option of that name)
  int max_loras = 0;               // v1.6: LoRA adapter slots (0 = none) ...
  int max_lora_rank = 0;           // ... and the largest rank they take
};

// A prepared executable with a KV cache.
struct Session {
  const Lib* lib = nullptr;
  DevicePtr device;
  ExecPtr exec;
  KvPtr kv;
  halo_limits limits{};
  int num_blocks = 0;
  int vocab = 0;
  uint32_t device_caps = 0;
};
struct SessionOptions {
  Proposal proposal;
  int num_blocks = 0;          // 0: enough for max_num_seqs sequences of max_model_len, plus spare
  OptionList device_options;   // default: settings() for the plugin under test
  OptionList prepare_options;
  OptionList compile_options;
  bool use_settings_options = true;
  size_t limits_size = 0;      // halo_limits.struct_size to pass (0: ours); an older caller's is smaller
  // v1.4: prepare (and compile) get these weights instead of the model's
  // (with the quantized ones, the model's plain and quantized lists).
  const std::vector<halo_named_tensor>* weights = nullptr;
  const std::vector<halo_quantized_tensor>* quantized = nullptr;
  size_t prepare_args_size = 0;  // halo_prepare_args.struct_size to pass (0: ours)
};
// Opens device `index` of `lib`, prepares `m` and creates a KV cache.
// On failure returns std::nullopt and sets *status.
std::optional<Session> make_session(const Lib& lib, int index, const Model& m, const SessionOptions& o, Status* status);
Status new_kv_cache(Session& s, int num_blocks);  // replaces s.kv

// A sequence as a tiny engine sees it.
struct Seq {
  std::vector<int32_t> tokens;  // prompt and everything appended
  std::vector<int32_t> blocks;  // block table
  int cached = 0;               // tokens whose K/V are in the cache
};
struct Chunk {
  Seq* seq;
  int n_new;
  bool logits = true;        // the last new token's logits
  bool all_logits = false;   // logits of every new token
};
struct StepExtras {
  int extra_blocks_per_seq = 2;  // -1 padded columns beyond what is needed
  std::vector<int32_t> logits_order;  // permutation of the logits rows (empty: natural)
  // v1.5: asks for hidden_states rows of this width (0: passes NULL); they
  // come back in `hidden`, one per logits row in natural order, NaN where the
  // plugin wrote nothing.
  int hidden_size = 0;
  std::vector<std::vector<float>>* hidden = nullptr;
  // v1.6: each chunk's LoRA slot (halo_execute_args.lora_slots), or NULL.
  const std::vector<int32_t>* lora_slots = nullptr;
};
// Runs one execute(): rows in chunk order. Advances seq->cached on success.
Status run_step(Session& s, const std::vector<Chunk>& batch, std::vector<std::vector<float>>* rows,
                const StepExtras& extras = {});

// Allocates blocks from a pool (optionally shuffled).
class BlockPool {
 public:
  BlockPool(int num_blocks, uint32_t shuffle_seed);
  int32_t take();
  void give(int32_t b);
  size_t free_count() const { return free_.size(); }
  // Makes seq's table cover `tokens` tokens.
  bool reserve(Seq& seq, int tokens, int block_size);

 private:
  std::vector<int32_t> free_;
};

struct Workload {
  std::vector<std::vector<int32_t>> prompts;
  int outputs = 6;      // logits rows per sequence: the prompt's last token, then outputs-1 decodes
  int chunk = 0;        // most prefill tokens of one sequence per step (0: whole prompt)
  bool mixed = true;    // prefill and decode in one step (only when the plugin agreed to MIXED_BATCH)
  uint32_t shuffle_seed = 0;
  const std::vector<std::vector<int32_t>>* forced = nullptr;  // tokens to feed instead of the argmax
};
struct WorkloadResult {
  Status status;
  std::vector<std::vector<std::vector<float>>> rows;  // [seq][output][vocab]
  std::vector<std::vector<int32_t>> argmax;           // [seq][output]
  int steps = 0;
};
// Runs every sequence to `outputs` logits rows within the agreed limits.
WorkloadResult run_workload(Session& s, const Workload& w);

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed);
// Prompt lengths fitting the agreed limits.
std::vector<std::vector<int32_t>> make_prompts(const Session& s, std::vector<int> lengths, int outputs, uint32_t seed);

// ---------------------------------------------------------------- tolerance

// The logits tolerance and where it came from (printed with every golden test).
struct Tolerance {
  double value = 0;
  std::string why;
};
// Default tolerance per compute element type (halo_compute_dtype; 0 for an unknown value).
double dtype_tolerance(int32_t compute_dtype);
// The rule, from what a prepare answered: `plugin_minor` is the plugin's
// abi_minor, `lim` the limits it agreed (its struct_size: what the caller
// passed). compute_dtype (v1.3) when reported, else inferred from
// kv_cache_dtype (v1.2), else fp32; the coarser of compute and KV type wins.
Tolerance default_tolerance(uint32_t plugin_minor, const halo_limits& lim);
// --tolerance when given, else default_tolerance for the session.
Tolerance tolerance_for(const Session& s);
// The table and the rule in one line (printed at start).
std::string tolerance_rule();

// Compares logits: empty string when within tolerance, else a description.
std::string compare_rows(const std::vector<float>& got, const std::vector<float>& want, double tol);
std::string compare_results(const WorkloadResult& got, const WorkloadResult& want, double tol, bool check_argmax);
// The largest max |a-b| / max(1, max |ref|) over all rows (what the tolerance bounds).
double max_error(const WorkloadResult& got, const WorkloadResult& want);
int argmax(const std::vector<float>& row);

}  // namespace conf
