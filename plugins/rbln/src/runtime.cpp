// Running a compiled model: prepare loads the pre-sharded weights into each
// chip's memory and creates the static programs; execute maps a scheduler
// step onto them (a prefill in chunks of prefill_chunk_size at batch 1, the
// decodes padded to the next compiled batch bucket, or decodes verifying
// speculative proposals padded to that bucket's verify program, K + 1 rows a
// sequence) and waits for the device with a timeout.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "runtime.h"

#include "halo/plugin_support/validate.h"

namespace halo::rbln {
std::string slot_name(uint32_t slot);

namespace {
namespace fs = std::filesystem;

// A read-only mapping of a chip file.
class Mapped {
 public:
  explicit Mapped(const fs::path& p) {
    fd_ = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd_ < 0) invalid("prepare: cannot open ", p.string(), ": ", std::strerror(errno));
    struct stat st {};
    ::fstat(fd_, &st);
    size_ = static_cast<size_t>(st.st_size);
    if (size_ > 0) {
      void* m = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd_, 0);
      if (m == MAP_FAILED) invalid("prepare: cannot map ", p.string());
      data_ = static_cast<const char*>(m);
    }
  }
  ~Mapped() {
    if (data_) ::munmap(const_cast<char*>(data_), size_);
    if (fd_ >= 0) ::close(fd_);
  }
  Mapped(const Mapped&) = delete;
  Mapped& operator=(const Mapped&) = delete;
  const char* data() const { return data_; }
  size_t size() const { return size_; }

 private:
  int fd_ = -1;
  const char* data_ = nullptr;
  size_t size_ = 0;
};

nlohmann::json read_json(const fs::path& p) {
  std::ifstream in(p);
  if (!in) invalid("prepare: cannot open ", p.string());
  nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object()) invalid("prepare: ", p.string(), " is not a JSON object");
  return j;
}

// Runs a closed command list on the executable's queue and waits for it.
void submit(halo_executable& e, const char* what) {
  ze_check(zeCommandListClose(e.list), what);
  ze_check(zeCommandQueueExecuteCommandLists(e.queue, 1, &e.list, nullptr), what);
  const ze_result_t r = zeCommandQueueSynchronize(e.queue, uint64_t(e.timeout_ms) * 1000000ull);
  zeCommandListReset(e.list);
  if (r == ZE_RESULT_NOT_READY) {
    e.failed = cat(what, ": the device did not complete the command within ", e.timeout_ms,
                   " ms (command_timeout_ms); the device is considered hung");
    fail(HALO_STATUS_DEADLINE_EXCEEDED, e.failed);
  }
  if (r != ZE_RESULT_SUCCESS) {
    try {
      ze_check(r, what);
    } catch (const PluginError& err) {
      if (r == ZE_RESULT_ERROR_DEVICE_LOST) e.failed = err.what();
      throw;
    }
  }
}

void* alloc(halo_executable& e, ze_device_handle_t chip, size_t bytes, std::vector<DeviceMem>& keep, const char* what) {
  ze_device_mem_alloc_desc_t md{};
  md.stype = ZE_STRUCTURE_TYPE_DEVICE_MEM_ALLOC_DESC;
  void* p = nullptr;
  ze_check(zeMemAllocDevice(e.drv->context, &md, bytes, 64, chip, &p), what);
  keep.emplace_back(e.drv->context, p);
  return p;
}

}  // namespace

}  // namespace halo::rbln

halo_executable::~halo_executable() {
  if (prefill) zeRblnGraphDestroy(prefill);
  for (auto& [b, g] : decode) zeRblnGraphDestroy(g);
  for (auto& [b, g] : verify) zeRblnGraphDestroy(g);
  if (list) zeCommandListDestroy(list);
  if (queue) zeCommandQueueDestroy(queue);
}

namespace halo::rbln {

namespace {

// The compiled model directory the spec names; the rbln device runs nothing else.
fs::path compiled_dir(const halo_model_spec& s) {
  const char* dir = s.struct_size >= HALO_STRUCT_SIZE(halo_model_spec, compiled_model_dir) ? s.compiled_model_dir : nullptr;
  if (dir == nullptr)
    fail(HALO_STATUS_FAILED_PRECONDITION,
         "prepare: the rbln device runs compiled models only; compile this model first: "
         "halo compile MODEL_DIR --device rbln --batch-size B --max-seq-len N --tensor-parallel-size T -o OUT_DIR, "
         "then run OUT_DIR");
  return dir;
}

// manifest.json, checked to be an rbln model of this compiler's major version
// compiled from a model of the spec's shape.
nlohmann::json read_manifest(const fs::path& root, const halo_model_spec& s) {
  const nlohmann::json man = read_json(root / "manifest.json");
  if (man.value("format", "") != kFormat || man.value("target", "") != "rbln")
    invalid("prepare: ", (root / "manifest.json").string(), " is not an rbln compiled model (format ",
            man.value("format", "?"), ", target ", man.value("target", "?"), ")");
  if (man.value("compiler_major", -1) != kCompilerMajor)
    fail(HALO_STATUS_FAILED_PRECONDITION, "prepare: ", root.string(), " was compiled by ", man.value("compiler_version", "?"),
         "; this plugin runs models of ", kCompilerVersion, ": compile it again");
  nlohmann::json want = spec_to_json(s);
  nlohmann::json got = man["spec"];
  // halo compile --quantization unties lm_head from embed_tokens (it gets its
  // own int8 copy); the chip files always hold lm_head, so the bit is moot.
  for (nlohmann::json* j : {&want, &got})
    if ((*j)["flags"].is_number_unsigned())
      (*j)["flags"] = (*j)["flags"].get<uint32_t>() & ~uint32_t(HALO_MODEL_TIED_EMBEDDINGS);
  for (const char* k : {"vocab_size", "hidden_size", "intermediate_size", "num_layers", "num_heads", "num_kv_heads",
                        "head_dim", "flags"})
    if (got[k] != want[k])
      invalid("prepare: ", root.string(), ": the manifest's ", k, "=", got[k].dump(),
              " does not match config.json's ", want[k].dump());
  return man;
}

// Takes the compiled shapes from the manifest, checks them against the option
// and the device, and returns the compiled dtype ("bf16" or "fp16").
std::string read_compiled_shapes(halo_executable& e, const nlohmann::json& man,
                                 const fs::path& root, int64_t tp_opt, const Driver& d) {
  e.batch = man.at("batch_size").get<int32_t>();
  e.max_seq_len = man.at("max_seq_len").get<int32_t>();
  e.tp = man.at("tensor_parallel_size").get<int32_t>();
  e.chunk = man.at("prefill_chunk_size").get<int32_t>();
  e.buckets = man.at("decode_buckets").get<std::vector<int32_t>>();
  e.spec_k = man.value("num_speculative_tokens", 0);  // absent before compiler 0.3
  if (e.spec_k < 0 || e.spec_k >= e.max_seq_len)
    invalid("prepare: ", root.string(), ": num_speculative_tokens=", e.spec_k,
            " is outside [0, max_seq_len)");
  std::string dtype = man.at("dtype").get<std::string>();
  if (tp_opt > 0 && tp_opt != e.tp)
    invalid("prepare: tensor_parallel_size=", tp_opt,
            " contradicts the compiled model: ", root.string(),
            " was compiled with tensor_parallel_size=", e.tp, " (RSD across ", e.tp, " chips)");
  if (e.tp > static_cast<int32_t>(d.chips.size()))
    fail(HALO_STATUS_FAILED_PRECONDITION, "prepare: ", root.string(), " needs ", e.tp,
         " chips, the device has ", d.chips.size());
  if (e.chunk != static_cast<int32_t>(d.props.prefill_chunk_size))
    fail(HALO_STATUS_FAILED_PRECONDITION, "prepare: ", root.string(),
         " was compiled with prefill_chunk_size=", e.chunk, " but the device profile says ",
         d.props.prefill_chunk_size);
  return dtype;
}

// The quant_mask bit of a weight slot (0: never quantized).
uint32_t quant_bit(uint32_t slot) {
  if (slot < ZE_RBLN_W_GLOBAL) return slot == ZE_RBLN_W_LM_HEAD ? ZE_RBLN_QUANT_LM_HEAD : 0;
  return 1u << ((slot - ZE_RBLN_W_GLOBAL) % ZE_RBLN_L_SLOTS);
}

// The manifest's "quantization" as the model's quant_mask and quant_group.
void read_quantization(const nlohmann::json& man, const fs::path& root, ze_rbln_decoder_desc_t& m) {
  const auto it = man.find("quantization");
  if (it == man.end() || it->is_null()) return;
  if (it->value("type", "") != "int8" || it->value("scale_dtype", "") != "fp32")
    invalid("prepare: ", root.string(), ": unsupported quantization ", it->dump());
  m.quant_group = it->value("group_size", 0u);
  for (const auto& name : it->at("weights"))
    for (const QuantSlot& q : kQuantSlots)
      if (name == q.chip) m.quant_mask |= q.bit;
}

// A chip file's header and the start of its data.
struct ChipFile {
  nlohmann::json header;
  const char* base = nullptr;
  size_t data_size = 0;
  std::string path;

  ChipFile(const Mapped& f, const fs::path& file) : path(file.string()) {
    uint64_t hlen = 0;
    if (f.size() < 8) invalid("prepare: ", path, " is truncated");
    std::memcpy(&hlen, f.data(), 8);
    if (8 + hlen > f.size()) invalid("prepare: ", path, " has a bad header");
    header = nlohmann::json::parse(f.data() + 8, f.data() + 8 + hlen, nullptr, false);
    if (header.is_discarded()) invalid("prepare: ", path, " has a bad header");
    base = f.data() + 8 + hlen;
    data_size = f.size() - 8 - hlen;
  }
  // Bytes of tensor `name` (checked to lie inside the file) and where they start.
  std::pair<const char*, uint64_t> bytes(const std::string& name) const {
    const auto off = header.at(name).at("data_offsets").get<std::vector<uint64_t>>();
    if (off.size() != 2 || off[1] < off[0] || off[1] > data_size)
      invalid("prepare: ", path, ": tensor ", name, " lies outside the file");
    return {base + off[0], off[1] - off[0]};
  }
};

// An int8 slot: one allocation of its values, padding and fp32 scales
// (ze_rbln_q8_bytes), both copied from the chip file.
void* upload_q8(halo_executable& e, int32_t c, const ChipFile& f, const std::string& name) {
  const nlohmann::json& t = f.header.at(name);
  const auto shape = t.at("shape").get<std::vector<uint64_t>>();
  const ze_rbln_decoder_desc_t& m = e.dims.desc;
  if (t.value("dtype", "") != "I8" || shape.size() != 2 || !f.header.contains(scales_name(name)))
    invalid("prepare: ", f.path, ": ", name, " is not an int8 matrix with scales");
  const uint64_t off = ze_rbln_q8_scales_offset(shape[0] * shape[1]);
  const auto [values, vbytes] = f.bytes(name);
  const auto [scales, sbytes] = f.bytes(scales_name(name));
  if (vbytes != shape[0] * shape[1] ||
      off + sbytes != ze_rbln_q8_bytes(&m, shape[0], uint32_t(shape[1])))
    invalid("prepare: ", f.path, ": ", name, " or its scales have the wrong size for group ",
            ze_rbln_q8_group(&m, uint32_t(shape[1])));
  char* p = static_cast<char*>(alloc(e, e.chips[size_t(c)], off + sbytes, e.weight_mem,
                                     "prepare: loading the weights into device memory"));
  ze_check(zeCommandListAppendMemoryCopy(e.list, p, values, vbytes, nullptr, 0, nullptr),
           "prepare: copy");
  ze_check(zeCommandListAppendMemoryCopy(e.list, p + off, scales, sbytes, nullptr, 0, nullptr),
           "prepare: copy");
  return p;
}

// Weights: one allocation per tensor on its chip, copied from the chip file;
// then the logits buffer on chip 0.
void load_weights(halo_executable& e, const fs::path& root) {
  const ze_rbln_decoder_desc_t& m = e.dims.desc;
  const uint32_t slots = ze_rbln_num_weight_slots(m.layers);
  e.weight_ptrs.assign(size_t(e.tp) * slots, nullptr);
  for (int32_t c = 0; c < e.tp; ++c) {
    const fs::path file = root / cat("chip", c, ".safetensors");
    Mapped mapped(file);
    const ChipFile f(mapped, file);
    for (uint32_t slot = 0; slot < slots; ++slot) {
      const std::string name = slot_name(slot);
      if (!f.header.contains(name)) continue;  // optional (biases, qk norms)
      void* p = nullptr;
      if (m.quant_mask & quant_bit(slot)) {
        p = upload_q8(e, c, f, name);
      } else {
        const auto [src, bytes] = f.bytes(name);
        p = alloc(e, e.chips[size_t(c)], bytes, e.weight_mem,
                  "prepare: loading the weights into device memory");
        ze_check(zeCommandListAppendMemoryCopy(e.list, p, src, bytes, nullptr, 0, nullptr),
                 "prepare: copy");
      }
      e.weight_ptrs[size_t(c) * slots + slot] = p;
    }
    submit(e, "prepare: weight upload");
  }
  for (uint32_t slot : {uint32_t(ZE_RBLN_W_EMBED), uint32_t(ZE_RBLN_W_FINAL_NORM), uint32_t(ZE_RBLN_W_LM_HEAD)})
    if (!e.weight_ptrs[slot])
      invalid("prepare: ", root.string(), ": chip 0 has no '", slot_name(slot), "'");
  e.logits_rows = size_t(std::max({e.batch, e.chunk, e.batch * (e.spec_k + 1)}));
  std::vector<DeviceMem> keep;
  alloc(e, e.chips[0], e.logits_rows * m.vocab * sizeof(float), keep, "prepare: logits buffer");
  e.logits_mem = std::move(keep.back());
}

// The static programs: the prefill chunk, one per decode bucket and, when
// compiled with --num-speculative-tokens K, a verify per decode bucket
// (K + 1 rows a sequence).
void create_programs(halo_executable& e) {
  auto make = [&](ze_rbln_graph_kind_t kind, uint32_t rows, uint32_t tokens_per_seq = 1) {
    ze_rbln_graph_desc_t gd{};
    gd.kind = kind;
    gd.rows = rows;
    gd.tokens_per_seq = tokens_per_seq;
    gd.max_seq_len = static_cast<uint32_t>(e.max_seq_len);
    gd.model = &e.dims.desc;
    gd.num_devices = static_cast<uint32_t>(e.tp);
    gd.devices = e.chips.data();
    gd.weights = e.weight_ptrs.data();
    ze_rbln_graph_handle_t g = nullptr;
    ze_check(zeRblnGraphCreate(e.drv->context, &gd, &g), "prepare: zeRblnGraphCreate");
    return g;
  };
  e.prefill = make(ZE_RBLN_GRAPH_PREFILL, static_cast<uint32_t>(e.chunk));
  for (int32_t b : e.buckets)
    e.decode.emplace_back(b, make(ZE_RBLN_GRAPH_DECODE, static_cast<uint32_t>(b)));
  std::sort(e.decode.begin(), e.decode.end());  // ascending bucket
  const uint32_t width = static_cast<uint32_t>(e.spec_k + 1);
  if (e.spec_k > 0)
    for (const auto& [b, g] : e.decode)
      e.verify.emplace_back(b, make(ZE_RBLN_GRAPH_VERIFY, static_cast<uint32_t>(b) * width, width));
}

// Limits: what was compiled. The engine reports a contradicting flag.
void set_limits(const halo_executable& e, halo_limits* lim, const std::string& dtype) {
  const ze_rbln_decoder_desc_t& m = e.dims.desc;
  uint64_t per_block = 0, fit_blocks = UINT64_MAX;
  for (int32_t c = 0; c < e.tp; ++c) {
    const uint64_t nkv = ze_rbln_kv_hi(&m, uint32_t(c), uint32_t(e.tp)) -
                         ze_rbln_kv_lo(&m, uint32_t(c), uint32_t(e.tp));
    const uint64_t chip_block =
        uint64_t(e.max_seq_len) * m.layers * 2 * nkv * m.head_dim * sizeof(float);
    per_block += chip_block;
    uint64_t used = 0, cap = 0;
    ze_check(zeRblnDeviceGetMemoryUsage(e.chips[size_t(c)], &used, &cap), "prepare");
    fit_blocks = std::min(fit_blocks, (cap - used) / chip_block);
  }
  lim->max_num_seqs = e.batch;
  lim->max_model_len = e.max_seq_len;
  lim->max_num_batched_tokens = e.max_seq_len;
  lim->block_size = e.max_seq_len;
  lim->capabilities = HALO_CAP_STATIC_SHAPES;  // no chunked prefill, no mixed batches
  lim->kv_bytes_per_block = per_block;
  lim->kv_memory_available = fit_blocks * per_block;
  halo::plugin::set_kv_dtype(lim, HALO_KV_DTYPE_FP32);
  // compile converted every plain weight to the manifest's 16-bit type (the KV
  // stays fp32). int8 matrices are weight-only: dequantized to fp32 and
  // multiplied with the fp32 activations, which nothing rounds, so the
  // narrowest matmul input is still the 16-bit embedding (and any plain matrix).
  halo::plugin::set_compute_dtype(lim, dtype == "fp16" ? HALO_COMPUTE_DTYPE_FP16 : HALO_COMPUTE_DTYPE_BF16);
  // v1.5: what the verify programs were compiled for, whatever was proposed
  // (more than that: the engine refuses speculation, naming the compile flag).
  halo::plugin::set_spec_tokens(lim, e.spec_k);
  // v1.6: no adapter slots: the compiled graphs have no LoRA inputs.
  halo::plugin::set_lora_limits(lim, 0, 0);
}

}  // namespace

void prepare(halo_prepare_args* a) {
  check_args(a, "prepare: args");
  if (a->device == nullptr) invalid("prepare: device is NULL");
  if (a->spec == nullptr) invalid("prepare: spec is NULL");
  halo_limits* lim = a->limits;
  if (lim == nullptr) invalid("prepare: limits is NULL");
  OptionReader opts("prepare", a->options, a->num_options);
  const int64_t tp_opt = opts.integer("tensor_parallel_size", 0, 0, 1 << 20);
  opts.also_known(kDeviceKeys);
  opts.refuse_unknown();
  // The compiled programs keep the KV cache in fp32.
  halo::plugin::check_kv_dtype("rbln", halo::plugin::proposed_kv_dtype(lim), {HALO_KV_DTYPE_FP32});
  // v1.5: a negative proposal is refused; any other gets the compiled K (set_limits).
  (void)halo::plugin::proposed_spec_tokens(lim);
  // v1.6: likewise for the LoRA proposal; any other is answered 0 slots (set_limits).
  (void)halo::plugin::proposed_lora(lim);
  const halo_model_spec& s = *a->spec;
  const fs::path root = compiled_dir(s);
  const nlohmann::json man = read_manifest(root, s);

  Driver& d = *a->device->drv;
  auto e = std::make_unique<halo_executable>();
  e->drv = &d;
  e->timeout_ms = a->device->command_timeout_ms;
  e->dir = root.string();
  const std::string dtype = read_compiled_shapes(*e, man, root, tp_opt, d);
  e->dims = model_dims(s, dtype == "fp16" ? ZE_RBLN_DTYPE_FP16 : ZE_RBLN_DTYPE_BF16);
  read_quantization(man, root, e->dims.desc);
  e->chips.assign(d.chips.begin(), d.chips.begin() + e->tp);

  ze_command_queue_desc_t qd{};
  qd.stype = ZE_STRUCTURE_TYPE_COMMAND_QUEUE_DESC;
  ze_check(zeCommandQueueCreate(d.context, e->chips[0], &qd, &e->queue),
           "prepare: zeCommandQueueCreate");
  ze_command_list_desc_t ld{};
  ld.stype = ZE_STRUCTURE_TYPE_COMMAND_LIST_DESC;
  ze_check(zeCommandListCreate(d.context, e->chips[0], &ld, &e->list),
           "prepare: zeCommandListCreate");

  load_weights(*e, root);
  create_programs(*e);
  set_limits(*e, lim, dtype);
  a->executable = e.release();
}

void kv_cache_create(halo_kv_cache_create_args* a) {
  check_args(a, "kv_cache_create: args");
  halo_executable* e = a->executable;
  if (e == nullptr) invalid("kv_cache_create: executable is NULL");
  if (a->block_size != e->max_seq_len)
    invalid("kv_cache_create: block_size=", a->block_size, " does not match the compiled KV block size ", e->max_seq_len,
            " (one block of max_seq_len per sequence)");
  if (a->num_blocks <= 0) invalid("kv_cache_create: num_blocks=", a->num_blocks, " must be positive");
  // More blocks than the compiled batch are allowed (e.g. for prefix caching):
  // the programs take the block count as an argument; chip memory is the limit.
  const ze_rbln_decoder_desc_t& m = e->dims.desc;
  auto kv = std::make_unique<halo_kv_cache>();
  kv->owner = e;
  kv->num_blocks = a->num_blocks;
  for (int32_t c = 0; c < e->tp; ++c) {
    const uint64_t nkv = ze_rbln_kv_hi(&m, uint32_t(c), uint32_t(e->tp)) - ze_rbln_kv_lo(&m, uint32_t(c), uint32_t(e->tp));
    const size_t bytes = size_t(a->num_blocks) * size_t(e->max_seq_len) * nkv * m.head_dim * sizeof(float);
    for (uint32_t l = 0; l < m.layers; ++l)
      for (int kvi = 0; kvi < 2; ++kvi)
        kv->ptrs.push_back(alloc(*e, e->chips[size_t(c)], bytes, kv->mem, "kv_cache_create: KV cache"));
  }
  a->kv_cache = kv.release();
}

void kv_cache_copy_blocks(halo_kv_cache_copy_blocks_args* a) {
  check_args(a, "kv_cache_copy_blocks: args");
  halo_kv_cache* kv = a->kv_cache;
  if (kv == nullptr) invalid("kv_cache_copy_blocks: kv_cache is NULL");
  if (!validate_copy_blocks(a, kv->num_blocks)) return;
  halo_executable& e = *kv->owner;
  const ze_rbln_decoder_desc_t& m = e.dims.desc;
  std::lock_guard<std::mutex> lock(e.mu);
  if (!e.failed.empty())
    fail(HALO_STATUS_DEVICE_LOST, "kv_cache_copy_blocks: the device failed earlier: ", e.failed);
  size_t idx = 0;
  for (int32_t c = 0; c < e.tp; ++c) {
    const uint64_t nkv = ze_rbln_kv_hi(&m, uint32_t(c), uint32_t(e.tp)) - ze_rbln_kv_lo(&m, uint32_t(c), uint32_t(e.tp));
    const size_t block = size_t(e.max_seq_len) * nkv * m.head_dim * sizeof(float);
    for (uint32_t l = 0; l < m.layers * 2; ++l, ++idx) {
      char* base = static_cast<char*>(kv->ptrs[idx]);
      for (int32_t i = 0; i < a->num_pairs; ++i)
        ze_check(zeCommandListAppendMemoryCopy(e.list, base + size_t(a->dst_blocks[i]) * block,
                                               base + size_t(a->src_blocks[i]) * block, block, nullptr, 0, nullptr),
                 "kv_cache_copy_blocks");
    }
  }
  submit(e, "kv_cache_copy_blocks");
}

namespace {

// Which programs run a step.
enum class StepKind { kPrefill, kDecode, kVerify };

// A step with more than one token for some sequence (query_start and
// context_lens checked): one sequence runs as a prefill (in chunks, cached
// context or not) unless it is a verify the compiled programs take (cached
// context, at most K proposals); several sequences must all be verifies
// (cached context, q <= K + 1), anything else is refused naming the numbers.
StepKind classify_multi_token(const halo_execute_args* a, const halo_executable& e) {
  const int32_t S = a->num_seqs, K = e.spec_k;
  int32_t widest = 0, max_q = 1;
  bool uncached = false;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q = a->query_start[s + 1] - a->query_start[s];
    if (q > max_q) widest = s, max_q = q;
    uncached |= q > 1 && a->context_lens[s] == q;
  }
  if (S == 1) return K > 0 && !uncached && max_q <= K + 1 ? StepKind::kVerify : StepKind::kPrefill;
  if (uncached)
    fail(HALO_STATUS_INVALID_ARGUMENT, "execute: num_seqs=", S,
         " in a step with a prefill; the compiled programs run one prefill (batch 1) or "
         "decodes only (no HALO_CAP_MIXED_BATCH)");
  if (K == 0)
    invalid("execute: sequence ", widest, " has ", max_q, " query tokens (", max_q - 1,
            " proposed tokens to verify) in a decode step of ", S, " sequences, but ", e.dir,
            " was compiled without verify programs; compile it with halo compile "
            "--num-speculative-tokens ",
            max_q - 1, " (or more)");
  if (max_q > K + 1)
    invalid("execute: sequence ", widest, " has ", max_q, " query tokens (", max_q - 1,
            " proposed tokens to verify) in a decode step, but ", e.dir,
            " was compiled with --num-speculative-tokens ", K, " (at most ", K + 1,
            " tokens a sequence)");
  return StepKind::kVerify;
}

// Checks a step against the compiled shapes and the KV cache before touching
// the device; returns the programs that run it.
StepKind validate_step(const halo_execute_args* a, const halo_executable& e,
                       const halo_kv_cache& kv) {
  const int32_t T = a->num_tokens, S = a->num_seqs;
  if (T <= 0 || S <= 0) invalid("execute: num_tokens=", T, " and num_seqs=", S, " must be positive");
  if (S > e.batch) invalid("execute: num_seqs=", S, " exceeds the compiled batch_size=", e.batch);
  if (T > e.max_seq_len)
    invalid("execute: num_tokens=", T, " exceeds max_num_batched_tokens=", e.max_seq_len,
            " (the compiled max_seq_len)");
  for (const auto& [name, ptr] : {std::pair<const char*, const void*>{"token_ids", a->token_ids},
                                   {"positions", a->positions}, {"slot_mapping", a->slot_mapping},
                                   {"query_start", a->query_start}, {"context_lens", a->context_lens},
                                   {"block_tables", a->block_tables}})
    if (ptr == nullptr) invalid("execute: ", name, " is NULL");
  if (a->max_blocks_per_seq <= 0) invalid("execute: max_blocks_per_seq=", a->max_blocks_per_seq, " must be positive");
  if (a->num_logits < 0 || (a->num_logits > 0 && (!a->logits_indices || !a->logits)))
    invalid("execute: num_logits=", a->num_logits, " needs logits_indices and logits (one is NULL)");
  if (a->query_start[0] != 0 || a->query_start[S] != T) invalid("execute: query_start does not span num_tokens=", T);
  const int64_t V = e.dims.desc.vocab;
  if (a->num_logits > 0) {
    const DLTensor* lg = a->logits;
    if (lg->dtype.code != kDLFloat || lg->dtype.bits != 32 || lg->ndim != 2 || !lg->shape ||
        lg->shape[0] != a->num_logits || lg->shape[1] != V)
      invalid("execute: logits must be float32 [", a->num_logits, ", ", V, "]");
  }
  bool multi_token = false;
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q = a->query_start[s + 1] - a->query_start[s];
    if (q <= 0) invalid("execute: sequence ", s, " has ", q, " tokens");
    if (a->context_lens[s] < q || a->context_lens[s] > e.max_seq_len)
      invalid("execute: context_lens[", s, "]=", a->context_lens[s], " is outside [", q,
              ", max_seq_len=", e.max_seq_len, "]");
    const int32_t blk = a->block_tables[size_t(s) * size_t(a->max_blocks_per_seq)];
    if (blk < 0 || blk >= kv.num_blocks)
      fail(HALO_STATUS_OUT_OF_RANGE, "execute: block_tables[", s, "][0]=", blk, " is outside [0, ",
           kv.num_blocks, ")");
    multi_token |= q > 1;
  }
  for (int32_t t = 0; t < T; ++t) {
    if (a->token_ids[t] < 0 || a->token_ids[t] >= V)
      fail(HALO_STATUS_OUT_OF_RANGE, "execute: token_ids[", t, "]=", a->token_ids[t], " is outside [0, ", V, ")");
    if (a->slot_mapping[t] < -1 || a->slot_mapping[t] >= int64_t(kv.num_blocks) * e.max_seq_len)
      fail(HALO_STATUS_OUT_OF_RANGE, "execute: slot_mapping[", t, "]=", a->slot_mapping[t], " is out of range");
  }
  for (int32_t i = 0; i < a->num_logits; ++i)
    if (a->logits_indices[i] < 0 || a->logits_indices[i] >= T)
      fail(HALO_STATUS_OUT_OF_RANGE, "execute: logits_indices[", i, "]=", a->logits_indices[i], " is outside [0, ", T, ")");
  // v1.6: no LoRA (no HALO_CAP_LORA, max_loras 0): lora_slots all -1 runs the base.
  halo::plugin::check_lora_slots(
      a, 0,
      "the rbln plugin runs graphs compiled ahead of time by `halo compile`, which carry no "
      "adapter inputs (adapters are not compiled in); serve this adapter on a device with "
      "HALO_CAP_LORA, or merge it into the weights before compiling");
  return multi_token ? classify_multi_token(a, e) : StepKind::kDecode;
}

// The inputs of one program run, padded to its static row count, and which
// of its rows' logits go to which row of the step's logits.
struct GraphRows {
  std::vector<int32_t> tok, pos, ctx, blk, rows;
  std::vector<int64_t> slot;
  std::vector<int32_t> out_index;

  void reset(size_t R) {
    tok.assign(R, 0);
    pos.assign(R, 0);
    slot.assign(R, -1);
    ctx.assign(R, 0);  // padding rows attend to nothing and write no KV
    blk.assign(R, 0);
    rows.clear();
    out_index.clear();
  }
};

// Runs program g on `in` and copies the logits it computed to `out` (the
// step's logits, V floats a row); waits for the device.
void run_program(halo_executable& e, halo_kv_cache& kv, ze_rbln_graph_handle_t g, GraphRows& in,
                 float* out, const char* what) {
  const int64_t V = e.dims.desc.vocab;
  float* dev_logits = static_cast<float*>(e.logits_mem.ptr);
  ze_rbln_graph_args_t ga{};
  ga.token_ids = in.tok.data();
  ga.positions = in.pos.data();
  ga.slots = in.slot.data();
  ga.ctx_lens = in.ctx.data();
  ga.block_ids = in.blk.data();
  ga.kv_num_blocks = static_cast<uint32_t>(kv.num_blocks);
  ga.kv = kv.ptrs.data();
  ga.num_logits = static_cast<uint32_t>(in.rows.size());
  ga.logits_rows = in.rows.data();
  ga.logits = dev_logits;
  ze_check(zeRblnCommandListAppendGraphExecute(e.list, g, &ga, nullptr, 0, nullptr), what);
  for (size_t i = 0; i < in.rows.size(); ++i)
    ze_check(zeCommandListAppendMemoryCopy(e.list, out + size_t(in.out_index[i]) * size_t(V),
                                           dev_logits + i * size_t(V), size_t(V) * sizeof(float),
                                           nullptr, 0, nullptr),
             what);
  submit(e, what);
}

// One sequence, in chunks of prefill_chunk_size, each padded.
void execute_prefill(const halo_execute_args* a, halo_executable& e, halo_kv_cache& kv,
                     float* out) {
  GraphRows in;
  const int32_t q = a->num_tokens, cached = a->context_lens[0] - q, block = a->block_tables[0];
  for (int32_t start = 0; start < q; start += e.chunk) {
    const int32_t n = std::min(e.chunk, q - start);
    in.reset(size_t(e.chunk));
    for (int32_t r = 0; r < n; ++r) {
      in.tok[size_t(r)] = a->token_ids[start + r];
      in.pos[size_t(r)] = a->positions[start + r];
      in.slot[size_t(r)] = a->slot_mapping[start + r];
      in.ctx[size_t(r)] = cached + start + r + 1;
      in.blk[size_t(r)] = block;
    }
    for (int32_t i = 0; i < a->num_logits; ++i) {
      const int32_t t = a->logits_indices[i];
      if (t >= start && t < start + n) {
        in.rows.push_back(t - start);
        in.out_index.push_back(i);
      }
    }
    run_program(e, kv, e.prefill, in, out, "execute (prefill)");
  }
}

// Decodes: padded up to the smallest compiled bucket that holds them.
void execute_decode(const halo_execute_args* a, halo_executable& e, halo_kv_cache& kv, float* out) {
  const int32_t S = a->num_seqs;
  auto it =
      std::find_if(e.decode.begin(), e.decode.end(), [&](const auto& p) { return p.first >= S; });
  GraphRows in;
  in.reset(size_t(it->first));
  for (int32_t s = 0; s < S; ++s) {
    in.tok[size_t(s)] = a->token_ids[s];
    in.pos[size_t(s)] = a->positions[s];
    in.slot[size_t(s)] = a->slot_mapping[s];
    in.ctx[size_t(s)] = a->context_lens[s];
    in.blk[size_t(s)] = a->block_tables[size_t(s) * size_t(a->max_blocks_per_seq)];
  }
  for (int32_t i = 0; i < a->num_logits; ++i) {
    in.rows.push_back(a->logits_indices[i]);
    in.out_index.push_back(i);
  }
  run_program(e, kv, it->second, in, out, "execute (decode)");
}

// Decodes verifying proposals: the smallest verify program that holds the
// sequences; sequence s owns rows [s(K+1), (s+1)(K+1)), its q tokens first,
// then padding. The logits of the rows the caller asked for, in its order.
void execute_verify(const halo_execute_args* a, halo_executable& e, halo_kv_cache& kv, float* out) {
  const int32_t S = a->num_seqs, width = e.spec_k + 1;
  auto it =
      std::find_if(e.verify.begin(), e.verify.end(), [&](const auto& p) { return p.first >= S; });
  GraphRows in;
  in.reset(size_t(it->first) * size_t(width));
  for (int32_t s = 0; s < S; ++s) {
    const int32_t q0 = a->query_start[s], q = a->query_start[s + 1] - q0;
    const int32_t cached = a->context_lens[s] - q;
    const int32_t block = a->block_tables[size_t(s) * size_t(a->max_blocks_per_seq)];
    for (int32_t j = 0; j < q; ++j) {
      const size_t r = size_t(s) * size_t(width) + size_t(j);
      in.tok[r] = a->token_ids[q0 + j];
      in.pos[r] = a->positions[q0 + j];
      in.slot[r] = a->slot_mapping[q0 + j];
      in.ctx[r] = cached + j + 1;
      in.blk[r] = block;
    }
  }
  for (int32_t i = 0; i < a->num_logits; ++i) {
    const int32_t t = a->logits_indices[i];
    const int32_t s =
        int32_t(std::upper_bound(a->query_start, a->query_start + S + 1, t) - a->query_start) - 1;
    in.rows.push_back(s * width + (t - a->query_start[s]));
    in.out_index.push_back(i);
  }
  run_program(e, kv, it->second, in, out, "execute (verify)");
}

}  // namespace

void execute(halo_execute_args* a) {
  check_args(a, "execute: args");
  halo_executable* e = a->executable;
  halo_kv_cache* kv = a->kv_cache;
  if (e == nullptr || kv == nullptr) invalid("execute: executable or kv_cache is NULL");
  if (kv->owner != e) invalid("execute: kv_cache was created for a different executable");
  const StepKind kind = validate_step(a, *e, *kv);

  std::lock_guard<std::mutex> lock(e->mu);
  // A lost or hung device stays lost for this executable (ABI: DEVICE_LOST).
  if (!e->failed.empty())
    fail(HALO_STATUS_DEVICE_LOST,
         "execute: the device failed earlier and no longer runs programs: ", e->failed);
  float* out =
      a->num_logits > 0
          ? reinterpret_cast<float*>(static_cast<char*>(a->logits->data) + a->logits->byte_offset)
          : nullptr;
  if (kind == StepKind::kPrefill)
    execute_prefill(a, *e, *kv, out);
  else if (kind == StepKind::kVerify)
    execute_verify(a, *e, *kv, out);
  else
    execute_decode(a, *e, *kv, out);
}

}  // namespace halo::rbln
