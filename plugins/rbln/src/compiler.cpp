// Ahead-of-time compilation (halo compile --device rbln): checks the static
// shapes and the memory of every chip, shards and converts the weights per
// chip (RSD tensor parallelism), and writes the compiled model directory:
//   manifest.json          format, target, compiler version, spec, batch size, max sequence
//                          length, KV block size, chips, dtype, programs, memory per chip
//   chip<c>.safetensors    the weights of chip c, pre-sharded, in the compiled dtype
//   programs/<name>.json   the static programs (prefill chunk, decode buckets, and with
//                          --num-speculative-tokens K a verify program per decode bucket)
//                          as graph descriptors
// The caller (halo compile) adds config.json, generation_config.json and the tokenizer files.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string_view>

#include "halo/kernels/dtype.h"
#include "halo/plugin_support/validate.h"
#include "runtime.h"

namespace halo::rbln {
namespace {
namespace fs = std::filesystem;
using kernels::DType;

struct Src {
  const char* data = nullptr;
  DType dtype = DType::F32;
  std::vector<int64_t> shape;
  bool i8 = false;  // int8 values (dtype unused), copied as they are
};

// A quantized matrix (validated: int8, symmetric): its values [rows, cols]
// and scales [rows, cols / group] (fp32/fp16/bf16, stored as fp32).
struct QSrc {
  Src values, scales;
  int64_t group = 0;
};

DType src_dtype(const std::string& name, DLDataType t) {
  if (t.lanes == 1) {
    if (t.code == kDLFloat && t.bits == 32) return DType::F32;
    if (t.code == kDLBfloat && t.bits == 16) return DType::BF16;
    if (t.code == kDLFloat && t.bits == 16) return DType::F16;
  }
  invalid("compile: weight '", name, "' has an unsupported dtype (float32, bfloat16 or float16)");
}

// One tensor of a chip file: where its values come from.
struct Out {
  std::string name;
  DType dtype;            // stored dtype
  std::vector<int64_t> shape;
  const Src* src = nullptr;
  int64_t row_lo = 0, rows = 0;  // source rows
  int64_t col_lo = 0, cols = 0;  // source columns (== all for a row slice)
  uint64_t bytes() const {
    return uint64_t(rows) * uint64_t(cols) * (src->i8 ? 1 : kernels::dtype_size(dtype));
  }
};

void convert_row(const char* src, DType st, size_t n, DType dt, std::vector<char>& out) {
  const size_t start = out.size();
  out.resize(start + n * kernels::dtype_size(dt));
  char* dst = out.data() + start;
  if (st == dt) {
    std::memcpy(dst, src, n * kernels::dtype_size(dt));
    return;
  }
  std::vector<float> f(n);
  kernels::to_f32(src, st, f.data(), n);
  if (dt == DType::F32) {
    std::memcpy(dst, f.data(), n * 4);
  } else {
    auto* d16 = reinterpret_cast<uint16_t*>(dst);
    for (size_t i = 0; i < n; ++i) d16[i] = dt == DType::BF16 ? kernels::f32_to_bf16(f[i]) : kernels::f32_to_f16(f[i]);
  }
}

const char* st_name(DType t) { return t == DType::F32 ? "F32" : t == DType::BF16 ? "BF16" : "F16"; }

void write_chip_file(const fs::path& path, const std::vector<Out>& outs) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  uint64_t off = 0;
  for (const Out& o : outs) {
    header[o.name] = {{"dtype", o.src->i8 ? "I8" : st_name(o.dtype)},
                      {"shape", o.shape},
                      {"data_offsets", {off, off + o.bytes()}}};
    off += o.bytes();
  }
  header["__metadata__"] = {{"format", "halo-rbln-shard"}};
  std::string h = header.dump();
  while (h.size() % 8) h += ' ';
  std::ofstream f(path, std::ios::binary);
  if (!f) fail(HALO_STATUS_INTERNAL, "compile: cannot write ", path.string());
  const uint64_t n = h.size();
  f.write(reinterpret_cast<const char*>(&n), 8);
  f.write(h.data(), static_cast<std::streamsize>(h.size()));
  std::vector<char> buf;
  for (const Out& o : outs) {
    const size_t es = o.src->i8 ? 1 : kernels::dtype_size(o.src->dtype);
    const int64_t src_cols = o.src->shape.size() > 1 ? o.src->shape[1] : o.src->shape[0];
    for (int64_t r = 0; r < o.rows; ++r) {
      buf.clear();
      const char* row =
          o.src->data + (size_t(o.row_lo + r) * size_t(src_cols) + size_t(o.col_lo)) * es;
      if (o.src->i8)
        buf.assign(row, row + o.cols);
      else
        convert_row(row, o.src->dtype, size_t(o.cols), o.dtype, buf);
      f.write(buf.data(), static_cast<std::streamsize>(buf.size()));
    }
  }
  if (!f) fail(HALO_STATUS_INTERNAL, "compile: writing ", path.string(), " failed (disk full?)");
}

std::string gib(double b) {
  std::ostringstream os;
  os.precision(3);
  os << std::fixed << b / double(1ull << 30) << " GiB";
  return os.str();
}

}  // namespace

// Names of the weight slots in chip files.
std::string slot_name(uint32_t slot) {
  // The chip file's own slot names (a compiled model's format), not the ABI's.
  static const char* global[] = {"embed", "final_norm", "lm_head"};
  static const char* layer[] = {"attn_norm", "q", "k", "v", "q_bias", "k_bias", "v_bias",
                                "q_norm", "k_norm", "o", "mlp_norm", "gate", "up", "down"};
  if (slot < ZE_RBLN_W_GLOBAL) return global[slot];
  const uint32_t l = (slot - ZE_RBLN_W_GLOBAL) / ZE_RBLN_L_SLOTS, s = (slot - ZE_RBLN_W_GLOBAL) % ZE_RBLN_L_SLOTS;
  return cat("layers.", l, ".", layer[s]);
}

namespace {

// compile's options, all read before any work so that a misspelt one is
// refused rather than compiling a default.
struct CompileOptions {
  std::string profile;
  bool dry = false;
  int64_t batch = 1, max_len = 0, tp = 1;
  int64_t spec = 0;  // proposed tokens a verify program checks per sequence (0: none)
  std::string dtype, buckets;

  // Rows of the logits buffer: a decode batch, a prefill chunk or a verify.
  int64_t logits_rows(int64_t chunk) const { return std::max({batch, chunk, batch * (spec + 1)}); }
};

// The most proposed tokens per sequence a verify program checks.
inline constexpr int64_t kMaxSpecTokens = 16;

CompileOptions read_options(const halo_compile_args* a, const halo_model_spec& s) {
  OptionReader opts("compile", a->options, a->num_options);
  CompileOptions o;
  o.profile = std::string(opts.str("profile", ""));
  o.dry = opts.integer("dry_run", 0, 0, 1) == 1;
  o.batch = opts.integer("batch_size", 1, 1, 1 << 20);
  o.max_len = opts.integer("max_seq_len", s.max_position_embeddings, 1, 1 << 24);
  o.tp = opts.integer("tensor_parallel_size", 1, 1, 1 << 20);
  o.dtype = std::string(opts.str("dtype", ""));
  o.buckets = std::string(opts.str("decode_buckets", ""));
  // Range-checked in validate(), naming the flag.
  o.spec = opts.integer("num_speculative_tokens", 0, INT32_MIN, INT32_MAX);
  opts.refuse_unknown();
  return o;
}

// Refuses a spec the graphs cannot be built from, or options the device
// profile cannot run (too long, more chips than it has, no RSD links).
void validate(const halo_model_spec& s, const CompileOptions& o, const Driver& d) {
  const int64_t chips = d.chips.size();
  if (s.num_layers <= 0 || s.hidden_size <= 0 || s.num_heads <= 0 || s.num_kv_heads <= 0 || s.head_dim <= 0 ||
      s.vocab_size <= 0 || s.intermediate_size <= 0 || s.num_heads % s.num_kv_heads != 0 || s.head_dim % 2)
    invalid("compile: the model spec is inconsistent");
  if (o.max_len > s.max_position_embeddings)
    invalid("compile: --max-seq-len=", o.max_len,
            " exceeds the model's max_position_embeddings=", s.max_position_embeddings);
  if (o.tp > chips)
    invalid("compile: --tensor-parallel-size=", o.tp, " needs ", o.tp,
            " chips but the device profile (", d.props.profile_path, ") has ", chips);
  if (o.tp > 1 && !d.props.rsd)
    invalid("compile: --tensor-parallel-size=", o.tp,
            " needs RSD chip-to-chip links, which this device profile lacks");
  if (s.num_heads % o.tp != 0)
    invalid("compile: --tensor-parallel-size=", o.tp,
            " does not divide num_attention_heads=", s.num_heads,
            " (each chip must own whole query heads)");
  if (o.spec < 0 || o.spec > kMaxSpecTokens)
    invalid("compile: --num-speculative-tokens=", o.spec, " is outside [0, ", kMaxSpecTokens,
            "] (0: no verify programs)");
  if (o.spec + 1 > o.max_len)
    invalid("compile: --num-speculative-tokens=", o.spec, " needs ", o.spec + 1,
            " tokens per sequence in a verify step, more than --max-seq-len=", o.max_len);
}

struct CompiledDtype {
  DType dt = DType::BF16;
  std::string name = "bf16";
};

// bf16 or fp16 (the NPU does not compute in fp32); default: the checkpoint's
// if 16-bit, else bf16.
CompiledDtype choose_dtype(const std::string& opt, const halo_compile_args* a) {
  CompiledDtype c;
  if (!opt.empty() && opt != "auto") {
    if (opt == "bf16" || opt == "bfloat16") {
      c.dt = DType::BF16;
    } else if (opt == "fp16" || opt == "float16") {
      c.dt = DType::F16;
      c.name = "fp16";
    } else {
      invalid("compile: --dtype=", opt, " is not supported: the ATOM computes in bf16 or fp16");
    }
  } else if (a->num_weights > 0 && a->weights && a->weights[0].tensor) {
    const DLDataType t = a->weights[0].tensor->dtype;
    if (t.code == kDLFloat && t.bits == 16) {
      c.dt = DType::F16;
      c.name = "fp16";
    }
  }
  return c;
}

// Decode buckets, descending: given, or halving from the batch size
// (vllm-rbln's decoder_batch_sizes).
std::vector<int32_t> decode_buckets(const std::string& opt, int64_t batch) {
  std::vector<int32_t> buckets;
  if (!opt.empty()) {
    std::stringstream ss(opt);
    std::string item;
    while (std::getline(ss, item, ',')) {
      const halo_option one{"decode_buckets", item.c_str()};
      OptionReader r("compile: --decode-buckets", &one, 1);
      buckets.push_back(static_cast<int32_t>(r.integer("decode_buckets", 0, 1, batch)));
    }
  } else {
    for (int64_t b = batch; b >= 1; b /= 2) buckets.push_back(static_cast<int32_t>(b));
  }
  std::sort(buckets.rbegin(), buckets.rend());
  buckets.erase(std::unique(buckets.begin(), buckets.end()), buckets.end());
  if (buckets.empty() || buckets.front() != batch)
    invalid("compile: --decode-buckets must include the batch size ", batch);
  return buckets;
}

// Memory per chip: weights (an int8 matrix: its values and fp32 scales) + KV
// (batch x max_seq_len, fp32) + logits buffer,
// for the manifest. Sets `refuse` to the message for the first chip it does
// not fit, which compile reports only after writing the summary.
nlohmann::json memory_per_chip(const ze_rbln_decoder_desc_t& m, const CompileOptions& o,
                               uint64_t wb, int64_t chunk, uint64_t cap, std::string& refuse) {
  const uint64_t H = m.hidden, hd = m.head_dim;
  const uint32_t n = static_cast<uint32_t>(o.tp);
  nlohmann::json mem = nlohmann::json::array();
  for (uint32_t c = 0; c < n; ++c) {
    const uint64_t nq = ze_rbln_split(m.heads, c + 1, n) - ze_rbln_split(m.heads, c, n);
    const uint64_t nkv = ze_rbln_kv_hi(&m, c, n) - ze_rbln_kv_lo(&m, c, n);
    const uint64_t ic = ze_rbln_split(m.intermediate, c + 1, n) - ze_rbln_split(m.intermediate, c, n);
    const uint64_t vc = ze_rbln_split(m.vocab, c + 1, n) - ze_rbln_split(m.vocab, c, n);
    auto mat = [&](uint32_t bit, uint64_t rows, uint64_t cols) {  // int8 + scales, or plain
      return (m.quant_mask & bit) ? ze_rbln_q8_bytes(&m, rows, uint32_t(cols)) : rows * cols * wb;
    };
    uint64_t per_layer = 2 * H * 4 + mat(1u << ZE_RBLN_L_Q, nq * hd, H) +
                         mat(1u << ZE_RBLN_L_K, nkv * hd, H) + mat(1u << ZE_RBLN_L_V, nkv * hd, H) +
                         mat(1u << ZE_RBLN_L_O, H, nq * hd) + mat(1u << ZE_RBLN_L_GATE, ic, H) +
                         mat(1u << ZE_RBLN_L_UP, ic, H) + mat(1u << ZE_RBLN_L_DOWN, H, ic);
    if (m.flags & ZE_RBLN_MODEL_QKV_BIAS) per_layer += (nq + 2 * nkv) * hd * 4;
    if (m.flags & ZE_RBLN_MODEL_QK_NORM) per_layer += 2 * hd * 4;
    const uint64_t weights = uint64_t(m.vocab) * H * wb + H * 4 +
                             mat(ZE_RBLN_QUANT_LM_HEAD, vc, H) + per_layer * m.layers;
    const uint64_t kv = uint64_t(o.batch) * uint64_t(o.max_len) * m.layers * 2 * nkv * hd * 4;
    const uint64_t logits = c == 0 ? uint64_t(o.logits_rows(chunk)) * m.vocab * 4 : 0;
    const uint64_t total = weights + kv + logits;
    mem.push_back({{"chip", c}, {"weights_bytes", weights}, {"kv_bytes", kv}, {"buffers_bytes", logits},
                   {"total_bytes", total}, {"capacity_bytes", cap}});
    if (total > cap && refuse.empty())
      refuse =
          cat("compile: the model does not fit: chip ", c, " needs ", total, " bytes (",
              gib(double(total)), ": weights ", gib(double(weights)), " + KV cache ",
              gib(double(kv)), " for batch ", o.batch, " x max_seq_len ", o.max_len, " + buffers ",
              gib(double(logits)), ") but has ", cap, " bytes (", gib(double(cap)),
              " usable per chip); use a larger --tensor-parallel-size, a smaller --batch-size or "
              "--max-seq-len");
  }
  return mem;
}

// Estimates of one program's execution (zeRblnGraphEstimate) for the manifest.
struct Estimator {
  const ze_rbln_decoder_desc_t& m;
  const CompileOptions& o;
  std::vector<ze_device_handle_t> devs;

  // rows: the program's; tps: rows per sequence (1 + K for a verify); ctx:
  // the context of a sequence's last row after the step (a prefill chunk:
  // row r attends r + 1); logits for every row (a prefill chunk: one).
  ze_rbln_cost_t cost(ze_rbln_graph_kind_t kind, uint32_t rows, uint32_t tps, int32_t ctx) const {
    ze_rbln_graph_desc_t gd{};
    gd.kind = kind;
    gd.rows = rows;
    gd.tokens_per_seq = tps;
    gd.max_seq_len = static_cast<uint32_t>(o.max_len);
    gd.model = &m;
    gd.num_devices = static_cast<uint32_t>(o.tp);
    gd.devices = devs.data();
    std::vector<int32_t> ctxs(rows);
    for (uint32_t r = 0; r < rows; ++r)
      ctxs[r] = kind == ZE_RBLN_GRAPH_PREFILL ? std::min<int32_t>(ctx, int32_t(r) + 1)
                                              : ctx - int32_t(tps - 1 - r % tps);
    ze_rbln_cost_t c{};
    ze_check(zeRblnGraphEstimate(&gd, ctxs.data(), kind == ZE_RBLN_GRAPH_PREFILL ? 1 : rows, &c),
             "compile: estimate");
    return c;
  }
  static nlohmann::json json(const ze_rbln_cost_t& c) {
    return nlohmann::json{{"total_s", c.total_s}, {"compute_s", c.compute_s}, {"memory_s", c.memory_s},
                          {"link_s", c.link_s}, {"overhead_s", c.overhead_s}, {"flops_per_chip", c.flops},
                          {"dram_bytes_per_chip", c.dram_bytes}, {"link_bytes_per_chip", c.link_bytes}};
  }
  // A decode (tps 1) or verify program of batch b, estimated at context 1024
  // (or max_seq_len if shorter) and at max_seq_len.
  nlohmann::json step_program(const char* kind_name, ze_rbln_graph_kind_t kind, int32_t b,
                              uint32_t tps) const {
    const int32_t near = int32_t(std::min<int64_t>(1024, o.max_len)), full = int32_t(o.max_len);
    const uint32_t rows = uint32_t(b) * tps;
    const ze_rbln_cost_t at_near = cost(kind, rows, tps, near);
    nlohmann::json p = {{"name", cat(kind_name, "_b", b)},
                        {"kind", kind_name},
                        {"batch", b},
                        {"tokens", tps},
                        {"estimate_at_ctx_1024", json(at_near)},
                        {"estimate_at_max_seq_len", json(cost(kind, rows, tps, full))}};
    if (kind == ZE_RBLN_GRAPH_VERIFY)  // what verifying K proposals costs over a plain decode step
      p["decode_ratio_at_ctx_1024"] =
          at_near.total_s / cost(ZE_RBLN_GRAPH_DECODE, uint32_t(b), 1, near).total_s;
    return p;
  }
};

// The programs (prefill chunk, decode buckets, a verify per decode bucket
// when compiled with --num-speculative-tokens) and their estimated cost, for
// the manifest.
nlohmann::json programs_with_estimates(const Driver& d, const ze_rbln_decoder_desc_t& m,
                                       const CompileOptions& o, const std::vector<int32_t>& buckets,
                                       int64_t chunk) {
  const Estimator est{m, o,
                      std::vector<ze_device_handle_t>(d.chips.begin(), d.chips.begin() + o.tp)};
  nlohmann::json programs = nlohmann::json::array();
  programs.push_back(
      {{"name", cat("prefill_c", chunk)},
       {"kind", "prefill"},
       {"batch", 1},
       {"tokens", chunk},
       {"estimate_first_chunk",
        Estimator::json(est.cost(ZE_RBLN_GRAPH_PREFILL, uint32_t(chunk), 1, int32_t(chunk)))}});
  for (int32_t b : buckets)
    programs.push_back(est.step_program("decode", ZE_RBLN_GRAPH_DECODE, b, 1));
  if (o.spec > 0)
    for (int32_t b : buckets)
      programs.push_back(est.step_program("verify", ZE_RBLN_GRAPH_VERIFY, b, uint32_t(o.spec + 1)));
  return programs;
}

void write_summary(halo_compile_args* a, const nlohmann::json& j) {
  if (a->summary && a->summary_capacity > 0) {
    const std::string t = j.dump();
    const size_t k = std::min(t.size(), a->summary_capacity - 1);
    std::memcpy(a->summary, t.data(), k);
    a->summary[k] = '\0';
  }
}

using Sources = std::map<std::string, Src, std::less<>>;

// The given weights by name, checked to be contiguous.
Sources read_sources(const halo_compile_args* a) {
  if (a->num_weights > 0 && a->weights == nullptr) invalid("compile: weights=NULL with num_weights=", a->num_weights);
  Sources src;
  for (size_t i = 0; i < a->num_weights; ++i) {
    const halo_named_tensor& w = a->weights[i];
    if (!w.name || !w.tensor) invalid("compile: weights[", i, "] has a NULL name or tensor");
    const DLTensor* t = w.tensor;
    if (t->strides != nullptr) {
      int64_t expect = 1;
      for (int k = t->ndim - 1; k >= 0; --k) {
        if (t->shape[k] != 1 && t->strides[k] != expect) invalid("compile: weight '", w.name, "' is not contiguous");
        expect *= t->shape[k];
      }
    }
    Src sv;
    sv.data = static_cast<const char*>(t->data) + t->byte_offset;
    sv.dtype = src_dtype(w.name, t->dtype);
    sv.shape.assign(t->shape, t->shape + t->ndim);
    src.emplace(w.name, std::move(sv));
  }
  return src;
}

const Src& find_src(const Sources& src, const std::string& name,
                    std::initializer_list<int64_t> shape) {
  auto it = src.find(name);
  if (it == src.end()) invalid("compile: weight '", name, "' is missing");
  if (it->second.shape != std::vector<int64_t>(shape))
    invalid("compile: weight '", name, "' has an unexpected shape");
  return it->second;
}

using QSources = std::map<std::string, QSrc, std::less<>>;

// A matrix as given: plain or quantized (exactly one is set).
struct Mat {
  const Src* plain = nullptr;
  const QSrc* q = nullptr;
};

Mat find_mat(const Sources& src, const QSources& qs, const std::string& name,
             std::initializer_list<int64_t> shape) {
  auto it = qs.find(name);
  if (it == qs.end()) return Mat{&find_src(src, name, shape), nullptr};
  if (src.count(name)) invalid("compile: weight '", name, "' is given both plain and quantized");
  if (it->second.values.shape != std::vector<int64_t>(shape))
    invalid("compile: quantized weight '", name, "' has an unexpected shape");
  return Mat{nullptr, &it->second};
}

// True for a matrix rbln may store as int8 (kQuantSlots).
bool quantizable(std::string_view name) {
  for (const QuantSlot& q : kQuantSlots) {
    const std::string_view abi = q.abi;
    if (q.bit == ZE_RBLN_QUANT_LM_HEAD) {
      if (name == abi) return true;
    } else if (name.starts_with(HALO_WEIGHT_LAYER_PREFIX) && name.size() > abi.size() &&
               name.ends_with(abi) && name[name.size() - abi.size() - 1] == '.') {
      return true;
    }
  }
  return false;
}

// True if the n floats of t (fp32/fp16/bf16) are all zero: GPTQ's 8-bit
// checkpoints store the zero point of symmetric weights as offsets of 0.
bool all_zero(const char* name, const DLTensor* t, int64_t n) {
  const char* p = static_cast<const char*>(t->data) + t->byte_offset;
  std::vector<float> f(static_cast<size_t>(n));
  kernels::to_f32(p, src_dtype(name, t->dtype), f.data(), f.size());
  return std::all_of(f.begin(), f.end(), [](float v) { return v == 0.0f; });
}

// The quantized weights (ABI v1.4), checked: int8, symmetric (no offsets, or all 0),
// group == cols or a multiple of 16 dividing cols (check_quantized_tensor),
// and a projection matrix.
QSources read_quantized(const halo_compile_args* a) {
  QSources out;
  if (a->struct_size < HALO_STRUCT_SIZE(halo_compile_args, num_quantized_weights) ||
      a->num_quantized_weights == 0)
    return out;
  if (a->quantized_weights == nullptr)
    invalid("compile: quantized_weights=NULL with num_quantized_weights=",
            a->num_quantized_weights);
  for (size_t i = 0; i < a->num_quantized_weights; ++i) {
    const halo_quantized_tensor& q = a->quantized_weights[i];
    check_quantized_tensor("compile", q);
    if (q.type != HALO_QUANT_INT8)
      invalid("compile: quantized weight '", q.name, "' is ", halo_quant_type_name(q.type),
              ": the rbln device runs int8 weights only");
    if (q.offsets && !all_zero(q.name, q.offsets, q.rows * (q.cols / q.group_size)))
      invalid("compile: quantized weight '", q.name,
              "' has non-zero offsets (asymmetric int8): the rbln device runs symmetric int8 only");
    if (!quantizable(q.name))
      invalid("compile: weight '", q.name,
              "' cannot be int8 on rbln: only q/k/v/o_proj, gate/up/down_proj and lm_head");
    QSrc qs;
    qs.values = Src{static_cast<const char*>(q.values->data) + q.values->byte_offset,
                    DType::F32,
                    {q.rows, q.cols},
                    true};
    qs.scales = Src{static_cast<const char*>(q.scales->data) + q.scales->byte_offset,
                    src_dtype(q.name, q.scales->dtype),
                    {q.rows, q.cols / q.group_size}};
    qs.group = q.group_size;
    if (!out.emplace(q.name, std::move(qs)).second)
      invalid("compile: quantized weight '", q.name, "' is given twice");
  }
  return out;
}

// The model's quant_group: 0 when every matrix has one scale per row, else
// the one group size all share (a per-row matrix as wide as it included).
uint32_t quant_group(const QSources& qs) {
  int64_t group = 0;
  for (const auto& [name, q] : qs)
    if (q.group != q.values.shape[1]) group = q.group;
  for (const auto& [name, q] : qs)
    if (group != 0 && q.group != group)
      invalid("compile: quantized weight '", name, "' has group_size=", q.group, " but others ",
              group, ": rbln compiles one group size per model (or one scale per output channel)");
  return static_cast<uint32_t>(group);
}

// Sets the model's quant_mask and quant_group: the same matrices quantized in
// every layer (the programs are the same for every layer).
void set_quant_layout(ze_rbln_decoder_desc_t& m, const QSources& qs) {
  if (qs.empty()) return;
  m.quant_group = quant_group(qs);
  for (const QuantSlot& s : kQuantSlots) {
    if (s.bit == ZE_RBLN_QUANT_LM_HEAD) {
      if (qs.count(s.abi)) m.quant_mask |= s.bit;
      continue;
    }
    uint32_t count = 0;
    for (uint32_t l = 0; l < m.layers; ++l)
      count += qs.count(cat(HALO_WEIGHT_LAYER_PREFIX, l, ".", s.abi)) ? 1 : 0;
    if (count == m.layers) m.quant_mask |= s.bit;
    if (count != 0 && count != m.layers)
      invalid("compile: ", s.abi, " is quantized in ", count, " of ", m.layers,
              " layers; rbln needs the same matrices quantized in every layer");
  }
}

// Refuses a tensor-parallel split of o_proj or down_proj (by input columns)
// that cuts through a quantization group (UNIMPLEMENTED: the layout is one
// rbln runs, this split of it is not).
void check_tp_groups(const ze_rbln_decoder_desc_t& m, uint32_t n) {
  const uint32_t G = m.quant_group;
  if (G == 0 || n == 1) return;
  for (uint32_t c = 0; c < n; ++c) {
    const uint64_t q_lo = uint64_t(ze_rbln_split(m.heads, c, n)) * m.head_dim;
    const uint64_t i_lo = ze_rbln_split(m.intermediate, c, n);
    if ((m.quant_mask & (1u << ZE_RBLN_L_O)) && q_lo % G != 0)
      fail(HALO_STATUS_UNIMPLEMENTED, "compile: --tensor-parallel-size=", n, " splits o_proj at input column ", q_lo,
              ", inside a quantization group of ", G, " (the split must fall on group boundaries)");
    if ((m.quant_mask & (1u << ZE_RBLN_L_DOWN)) && i_lo % G != 0)
      fail(HALO_STATUS_UNIMPLEMENTED, "compile: --tensor-parallel-size=", n, " splits down_proj at input column ", i_lo,
              " of intermediate_size=", m.intermediate, ", inside a quantization group of ", G,
              " (the split must fall on group boundaries)");
  }
}

// The manifest's "quantization": what is stored and how (null: none).
nlohmann::json quantization_json(const ze_rbln_decoder_desc_t& m) {
  if (m.quant_mask == 0) return nullptr;
  nlohmann::json names = nlohmann::json::array();
  for (const QuantSlot& s : kQuantSlots)
    if (m.quant_mask & s.bit) names.push_back(s.chip);
  return {{"type", "int8"},
          {"weights", names},
          {"scale_dtype", "fp32"},
          {"group_size", m.quant_group},  // 0: one scale per output row
          {"layout",
           "<slot>: int8 [rows, cols]; <slot>.scales: fp32 [rows, cols / group]; "
           "w = scale * q (weight-only, symmetric)"}};
}

// The model's global weights, looked up once for every chip.
struct GlobalWeights {
  const Src* embed;
  Mat lm;
  const Src* fnorm;
};

// The tensors of one chip file, sliced from the sources. A plain matrix is
// converted to the compiled dtype; an int8 one keeps its values and gets its
// scales (as fp32) beside it, "<slot>.scales", sliced the same way.
struct ChipShards {
  DType dt;
  std::vector<Out> outs;

  // Rows [lo, lo + cnt) of a matrix, or elements of a vector, in dtype t.
  void rows(uint32_t slot, const Src& sv, DType t, int64_t lo, int64_t cnt) {
    const int64_t cols = sv.shape.size() > 1 ? sv.shape[1] : 1;
    Out o{slot_name(slot), t, {}, &sv, lo, cnt, 0, cols};
    o.shape = sv.shape.size() > 1 ? std::vector<int64_t>{cnt, cols} : std::vector<int64_t>{cnt};
    if (sv.shape.size() == 1) {  // a vector: rows are elements
      o.row_lo = 0;
      o.rows = 1;
      o.col_lo = lo;
      o.cols = cnt;
    }
    outs.push_back(o);
  }
  // A row split (column parallel): values and scales by rows.
  void mrows(uint32_t slot, const Mat& w, int64_t lo, int64_t cnt) {
    if (!w.q) return rows(slot, *w.plain, dt, lo, cnt);
    rows(slot, w.q->values, DType::F32, lo, cnt);
    outs.push_back(Out{scales_name(slot_name(slot)),
                       DType::F32,
                       {cnt, w.q->scales.shape[1]},
                       &w.q->scales,
                       lo,
                       cnt,
                       0,
                       w.q->scales.shape[1]});
  }
  // A column split (row parallel, o and down): values by columns, scales by
  // groups (lo and cnt are multiples of the group: check_tp_groups), or the
  // whole row's scale when there is one per row.
  void mcols(uint32_t slot, const Mat& w, int64_t lo, int64_t cnt) {
    const Src& sv = w.q ? w.q->values : *w.plain;
    outs.push_back(Out{slot_name(slot), dt, {sv.shape[0], cnt}, &sv, 0, sv.shape[0], lo, cnt});
    if (!w.q) return;
    const int64_t groups = w.q->scales.shape[1], g_lo = groups == 1 ? 0 : lo / w.q->group,
                  g_cnt = groups == 1 ? 1 : cnt / w.q->group;
    outs.push_back(Out{scales_name(slot_name(slot)),
                       DType::F32,
                       {sv.shape[0], g_cnt},
                       &w.q->scales,
                       0,
                       sv.shape[0],
                       g_lo,
                       g_cnt});
  }
};

// The tensors of chip c of n: the global weights, then every layer's, each
// sliced to the chip's share of heads, intermediate rows and vocabulary
// (norms whole, in f32; o_proj and down_proj sliced by columns).
std::vector<Out> chip_tensors(const ze_rbln_decoder_desc_t& m, const Sources& src,
                              const QSources& qs, const GlobalWeights& g, DType dt, uint32_t c,
                              uint32_t n) {
  const int64_t H = m.hidden, hd = m.head_dim;
  const int64_t V = m.vocab, I = m.intermediate, NQ = int64_t(m.heads) * hd,
                NKV = int64_t(m.kv_heads) * hd;
  ChipShards sh{dt, {}};
  const int64_t q_lo = ze_rbln_split(m.heads, c, n), nq = ze_rbln_split(m.heads, c + 1, n) - q_lo;
  const int64_t kv_lo = ze_rbln_kv_lo(&m, c, n), nkv = ze_rbln_kv_hi(&m, c, n) - kv_lo;
  const int64_t i_lo = ze_rbln_split(m.intermediate, c, n),
                ni = ze_rbln_split(m.intermediate, c + 1, n) - i_lo;
  const int64_t v_lo = ze_rbln_split(m.vocab, c, n), nv = ze_rbln_split(m.vocab, c + 1, n) - v_lo;
  sh.rows(ZE_RBLN_W_EMBED, *g.embed, dt, 0, V);
  sh.rows(ZE_RBLN_W_FINAL_NORM, *g.fnorm, DType::F32, 0, H);
  sh.mrows(ZE_RBLN_W_LM_HEAD, g.lm, v_lo, nv);
  for (uint32_t l = 0; l < m.layers; ++l) {
    const std::string p = cat(HALO_WEIGHT_LAYER_PREFIX, l, ".");
    const uint32_t b = ZE_RBLN_W_GLOBAL + l * ZE_RBLN_L_SLOTS;
    auto mat = [&](const char* name, std::initializer_list<int64_t> shape) {
      return find_mat(src, qs, p + name, shape);
    };
    sh.rows(b + ZE_RBLN_L_ATTN_NORM, find_src(src, p + HALO_WEIGHT_ATTN_NORM, {H}), DType::F32, 0,
            H);
    sh.mrows(b + ZE_RBLN_L_Q, mat(HALO_WEIGHT_Q_PROJ, {NQ, H}), q_lo * hd, nq * hd);
    sh.mrows(b + ZE_RBLN_L_K, mat(HALO_WEIGHT_K_PROJ, {NKV, H}), kv_lo * hd, nkv * hd);
    sh.mrows(b + ZE_RBLN_L_V, mat(HALO_WEIGHT_V_PROJ, {NKV, H}), kv_lo * hd, nkv * hd);
    if (m.flags & ZE_RBLN_MODEL_QKV_BIAS) {
      sh.rows(b + ZE_RBLN_L_QB, find_src(src, p + HALO_WEIGHT_Q_BIAS, {NQ}), DType::F32, q_lo * hd,
              nq * hd);
      sh.rows(b + ZE_RBLN_L_KB, find_src(src, p + HALO_WEIGHT_K_BIAS, {NKV}), DType::F32,
              kv_lo * hd, nkv * hd);
      sh.rows(b + ZE_RBLN_L_VB, find_src(src, p + HALO_WEIGHT_V_BIAS, {NKV}), DType::F32,
              kv_lo * hd, nkv * hd);
    }
    if (m.flags & ZE_RBLN_MODEL_QK_NORM) {
      sh.rows(b + ZE_RBLN_L_QN, find_src(src, p + HALO_WEIGHT_Q_NORM, {hd}), DType::F32, 0, hd);
      sh.rows(b + ZE_RBLN_L_KN, find_src(src, p + HALO_WEIGHT_K_NORM, {hd}), DType::F32, 0, hd);
    }
    sh.mcols(b + ZE_RBLN_L_O, mat(HALO_WEIGHT_O_PROJ, {H, NQ}), q_lo * hd, nq * hd);
    sh.rows(b + ZE_RBLN_L_MLP_NORM, find_src(src, p + HALO_WEIGHT_MLP_NORM, {H}), DType::F32, 0, H);
    sh.mrows(b + ZE_RBLN_L_GATE, mat(HALO_WEIGHT_GATE_PROJ, {I, H}), i_lo, ni);
    sh.mrows(b + ZE_RBLN_L_UP, mat(HALO_WEIGHT_UP_PROJ, {I, H}), i_lo, ni);
    sh.mcols(b + ZE_RBLN_L_DOWN, mat(HALO_WEIGHT_DOWN_PROJ, {H, I}), i_lo, ni);
  }
  return std::move(sh.outs);
}

// programs/<name>.json: each program as its graph descriptor.
void write_programs(const fs::path& out, const nlohmann::json& manifest, int64_t chunk,
                    int64_t max_len, int64_t tp, const std::string& dtype_name) {
  for (const auto& p : manifest["programs"]) {
    nlohmann::json g = p;
    const bool prefill = p["kind"] == "prefill";
    g["graph"] = {
        {"rows", prefill ? chunk : p["batch"].get<int64_t>() * p["tokens"].get<int64_t>()},
        {"tokens_per_seq", prefill ? 1 : p["tokens"].get<int64_t>()},
        {"max_seq_len", max_len},
        {"num_devices", tp},
        {"weight_dtype", dtype_name},
        {"model", manifest["spec"]}};
    std::ofstream f(out / "programs" / (p["name"].get<std::string>() + ".json"));
    f << g.dump(2) << "\n";
    if (!f) fail(HALO_STATUS_INTERNAL, "compile: cannot write the programs of ", out.string());
  }
}

}  // namespace

// Checks, then writes the summary (the manifest, also for a dry run or a model
// that does not fit), then the chip files, programs and manifest.
void compile(halo_compile_args* a) {
  check_args(a, "compile: args");
  if (a->struct_size <
      HALO_STRUCT_SIZE(halo_compile_args, summary_capacity))  // v1.4 appended quantized_weights
    invalid("compile: args->struct_size=", a->struct_size, " is too small");
  if (a->device_index != 0)
    fail(HALO_STATUS_OUT_OF_RANGE, "compile: device_index=", a->device_index, " is outside [0, 1)");
  if (a->spec == nullptr) invalid("compile: spec is NULL");
  const halo_model_spec& s = *a->spec;
  const CompileOptions o = read_options(a, s);
  Driver& d = driver(o.profile);
  const int64_t chunk = d.props.prefill_chunk_size;
  validate(s, o, d);
  const bool kv_replicated = s.num_kv_heads % o.tp != 0;
  const CompiledDtype cd = choose_dtype(o.dtype, a);
  const uint32_t ze_dt = cd.dt == DType::F16 ? ZE_RBLN_DTYPE_FP16 : ZE_RBLN_DTYPE_BF16;
  const std::vector<int32_t> buckets = decode_buckets(o.buckets, o.batch);
  ModelDims dims = model_dims(s, ze_dt);
  const QSources qs = read_quantized(a);
  set_quant_layout(dims.desc, qs);
  const ze_rbln_decoder_desc_t& m = dims.desc;
  check_tp_groups(m, static_cast<uint32_t>(o.tp));

  std::string refuse;
  nlohmann::json mem =
      memory_per_chip(m, o, kernels::dtype_size(cd.dt), chunk, d.props.memory_per_chip, refuse);
  nlohmann::json manifest = {
      {"format", kFormat},
      {"target", "rbln"},
      {"compiler_version", kCompilerVersion},
      {"compiler_major", kCompilerMajor},
      {"device", d.props.name},
      {"device_profile", d.props.profile_path},
      {"spec", spec_to_json(s)},
      {"batch_size", o.batch},
      {"max_seq_len", o.max_len},
      {"kv_block_size", o.max_len},
      {"kv_cache_mode", "eager"},
      {"kv_cache_dtype", "fp32"},
      {"prefill_chunk_size", chunk},
      {"decode_buckets", buckets},
      {"num_speculative_tokens", o.spec},
      {"tensor_parallel_size", o.tp},
      {"chips", nlohmann::json::array()},
      {"dtype", cd.name},
      {"quantization", quantization_json(m)},
      {"kv_heads_replicated", kv_replicated},
      {"programs", programs_with_estimates(d, m, o, buckets, chunk)},
      {"memory_per_chip", mem},
  };
  for (int64_t c = 0; c < o.tp; ++c) manifest["chips"].push_back(c);
  for (int64_t c = 0; c < o.tp; ++c)
    manifest["weights"].push_back({{"chip", c}, {"file", cat("chip", c, ".safetensors")}});
  write_summary(a, manifest);
  if (!refuse.empty()) fail(HALO_STATUS_OUT_OF_MEMORY, refuse);
  if (o.dry) return;

  // Weights, sharded per chip.
  const Sources src = read_sources(a);
  std::error_code ec;
  fs::create_directories(fs::path(a->out_dir ? a->out_dir : "") / "programs", ec);
  if (ec || !a->out_dir)
    fail(HALO_STATUS_INTERNAL, "compile: cannot create ",
         a->out_dir ? a->out_dir : "(NULL out_dir)", ": ", ec.message());
  const fs::path out = a->out_dir;
  const bool tied = s.flags & HALO_MODEL_TIED_EMBEDDINGS;
  const int64_t V = m.vocab, H = m.hidden;
  GlobalWeights g{};
  g.embed = &find_src(src, HALO_WEIGHT_EMBED_TOKENS, {V, H});
  g.lm = tied ? Mat{g.embed, nullptr} : find_mat(src, qs, HALO_WEIGHT_LM_HEAD, {V, H});
  g.fnorm = &find_src(src, HALO_WEIGHT_FINAL_NORM, {H});
  const uint32_t n = static_cast<uint32_t>(o.tp);
  for (uint32_t c = 0; c < n; ++c)
    write_chip_file(out / cat("chip", c, ".safetensors"), chip_tensors(m, src, qs, g, cd.dt, c, n));
  write_programs(out, manifest, chunk, o.max_len, o.tp, cd.name);
  std::ofstream f(out / "manifest.json");
  f << manifest.dump(2) << "\n";
  if (!f) fail(HALO_STATUS_INTERNAL, "compile: cannot write ", (out / "manifest.json").string());
}

}  // namespace halo::rbln
