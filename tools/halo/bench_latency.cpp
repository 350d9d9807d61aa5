// `halo bench latency`: per-step prefill and decode timing of one device at a
// few batch sizes, each figure beside the rooflines measured in the same run:
// the host's read bandwidth (by this tool) and the device's bf16 matmul peak
// (by its plugin, ABI v1.3 device_measure_peak).
//
// It drives the plugin ABI directly (no scheduler, no sampler), so a timed
// interval is exactly the execute calls of the step it names. The model is a
// Hugging Face directory or a generated one kept in memory (random weights of
// a preset shape), so a 1.1B-parameter model needs no download.
#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <bit>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <random>
#include <string_view>
#include <thread>
#include <type_traits>

#include "bench_stats.h"
#include "commands.h"
#include "common/error.h"
#include "device/plugin.h"
#include "model/model_loader.h"
#include "model/quantize.h"
#include "roofline.h"


namespace halo::tools {
namespace {

using clock_type = std::chrono::steady_clock;

struct LatencyOptions {
  std::string model_dir;
  std::string preset;  // empty: tinyllama-1.1b unless --model is given
  int hidden = 0, layers = 0, heads = 0, kv_heads = 0, intermediate = 0, vocab = 0;
  std::string dtype;  // empty: the preset's (bf16)
  std::string batch_sizes = "1,4,16,64";
  int input_len = 512;
  int output_len = 16;
  int warmup = 2;
  int64_t max_prefill_tokens = 8192;
  double roofline_budget = 1.0;
  int roofline_buffer_mib = 1024;
  std::string output_json;
  int verify_tokens = 0;  // > 1: also time verify steps of this many query tokens per sequence
  engine::EngineConfig engine;
};

// ---------------------------------------------------------------- the model

struct Shape {
  int vocab, hidden, intermediate, layers, heads, kv_heads;
};

const std::vector<std::pair<std::string, Shape>>& presets() {
  static const std::vector<std::pair<std::string, Shape>> p = {
      {"tinyllama-1.1b", {32000, 2048, 5632, 22, 32, 4}},
      {"tiny", {256, 64, 128, 2, 4, 2}},
  };
  return p;
}

struct DType {
  const char* name;
  DLDataType dl;
};
DType parse_dtype(const std::string& s) {
  if (s == "bf16" || s == "bfloat16") return {"bf16", {kDLBfloat, 16, 1}};
  if (s == "fp16" || s == "float16") return {"fp16", {kDLFloat, 16, 1}};
  if (s == "fp32" || s == "float32") return {"fp32", {kDLFloat, 32, 1}};
  throw Error(fmt::format("--dtype {}: expected bf16, fp16 or fp32", s));
}

std::string dtype_name(DLDataType d) {
  if (d.code == kDLBfloat && d.bits == 16) return "bf16";
  if (d.code == kDLFloat && d.bits == 16) return "fp16";
  if (d.code == kDLFloat && d.bits == 32) return "fp32";
  return fmt::format("code{}x{}", static_cast<int>(d.code), static_cast<int>(d.bits));
}

uint64_t numel(const DLTensor& t) {
  uint64_t n = 1;
  for (int d = 0; d < t.ndim; ++d) n *= static_cast<uint64_t>(t.shape[d]);
  return n;
}

// A Llama-shaped model with random weights, all in one host allocation.
struct GeneratedModel {
  std::string architecture = "LlamaForCausalLM";
  std::vector<std::string> names;
  std::vector<std::array<int64_t, 2>> shapes;
  std::vector<DLTensor> tensors;
  std::vector<halo_named_tensor> weights;
  void* memory = nullptr;
  size_t memory_bytes = 0;
  ~GeneratedModel() {
    if (memory) munmap(memory, memory_bytes);
  }
};

// Not under a sanitizer: the clones' ifunc resolver runs during relocation,
// before the sanitizer's runtime is up, and its instrumented code crashes there.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__) && \
    !defined(__SANITIZE_ADDRESS__)
#define HALO_FILL_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#else
#define HALO_FILL_CLONES
#endif

inline uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Uniform values of standard deviation 0.02 (|x| < 0.035), four per 64-bit
// hash of (key, group of four): counter based, so the weights do not depend
// on how the work is split between threads.
HALO_FILL_CLONES void random_floats(float* out, uint64_t first_group, size_t groups, uint64_t key) {
  const float scale = static_cast<float>(0.02 * 1.7320508075688772 / 32768.0);
  for (size_t g = 0; g < groups; ++g) {
    const uint64_t h = mix64(key + (first_group + g) * 0x9E3779B97F4A7C15ull);
    for (int k = 0; k < 4; ++k)
      out[4 * g + k] =
          (static_cast<float>(static_cast<int32_t>((h >> (16 * k)) & 0xFFFF)) - 32768.0f) * scale;
  }
}

HALO_FILL_CLONES void store_bf16(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) {  // round to nearest even (the values are finite)
    const uint32_t b = std::bit_cast<uint32_t>(in[i]);
    out[i] = static_cast<uint16_t>((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
  }
}

HALO_FILL_CLONES void store_fp16(const float* in, _Float16* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = static_cast<_Float16>(in[i]);
}

// Elements [begin, end) of a tensor (begin a multiple of 4): random, or 1.0.
void fill_range(const DLTensor& t, uint64_t begin, uint64_t end, bool ones, uint64_t key) {
  constexpr size_t kBlock = 4096;
  alignas(64) float tmp[kBlock];
  char* base = static_cast<char*>(t.data);
  for (uint64_t b = begin; b < end; b += kBlock) {
    const size_t n = static_cast<size_t>(std::min<uint64_t>(kBlock, end - b));
    if (ones)
      std::fill(tmp, tmp + n, 1.0f);
    else
      random_floats(tmp, b / 4, (n + 3) / 4, key);
    if (t.dtype.bits == 32)
      std::memcpy(base + b * 4, tmp, n * 4);
    else if (t.dtype.code == kDLBfloat)
      store_bf16(tmp, reinterpret_cast<uint16_t*>(base) + b, n);
    else
      store_fp16(tmp, reinterpret_cast<_Float16*>(base) + b, n);
  }
}

// Fills the tensors of `m` (random values, norm weights 1.0) with `threads`
// threads.
void fill_weights(const GeneratedModel& m, uint64_t seed, int threads) {
  // Work items of at most 4M elements, each with its own seed, taken by the
  // threads from a counter: the values do not depend on the thread count.
  struct Item {
    size_t tensor;
    uint64_t begin, end;
  };
  std::vector<Item> items;
  const uint64_t chunk = 1u << 22;
  for (size_t i = 0; i < m.tensors.size(); ++i)
    for (uint64_t b = 0, n = numel(m.tensors[i]); b < n; b += chunk)
      items.push_back({i, b, std::min(n, b + chunk)});
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < items.size();) {
      const Item& it = items[k];
      const DLTensor& t = m.tensors[it.tensor];
      const bool ones = t.ndim == 1;  // norm weights
      fill_range(t, it.begin, it.end, ones, mix64(seed * 0x9E3779B97F4A7C15ull + it.tensor + 1));
    }
  };
  std::vector<std::thread> pool;
  for (int t = 1; t < threads; ++t) pool.emplace_back(work);
  work();
  for (auto& th : pool) th.join();
}

std::shared_ptr<GeneratedModel> generate_model(const Shape& s, const DType& dt, uint64_t seed,
                                               int threads, halo_model_spec& spec,
                                               int max_position) {
  auto m = std::make_shared<GeneratedModel>();
  const int64_t V = s.vocab, H = s.hidden, I = s.intermediate;
  const int64_t hd = H / s.heads, NQ = s.heads * hd, NKV = s.kv_heads * hd;
  auto add = [&](std::string name, int64_t rows, int64_t cols) {
    m->names.push_back(std::move(name));
    m->shapes.push_back({rows, cols});
  };
  add(HALO_WEIGHT_EMBED_TOKENS, V, H);
  for (int i = 0; i < s.layers; ++i) {
    const std::string p = HALO_WEIGHT_LAYER_PREFIX + std::to_string(i) + ".";
    add(p + HALO_WEIGHT_ATTN_NORM, H, 0);
    add(p + HALO_WEIGHT_Q_PROJ, NQ, H);
    add(p + HALO_WEIGHT_K_PROJ, NKV, H);
    add(p + HALO_WEIGHT_V_PROJ, NKV, H);
    add(p + HALO_WEIGHT_O_PROJ, H, NQ);
    add(p + HALO_WEIGHT_MLP_NORM, H, 0);
    add(p + HALO_WEIGHT_GATE_PROJ, I, H);
    add(p + HALO_WEIGHT_UP_PROJ, I, H);
    add(p + HALO_WEIGHT_DOWN_PROJ, H, I);
  }
  add(HALO_WEIGHT_FINAL_NORM, H, 0);
  add(HALO_WEIGHT_LM_HEAD, V, H);

  const size_t esize = dt.dl.bits / 8;
  std::vector<uint64_t> offset(m->names.size());
  uint64_t total = 0;  // bytes, every tensor 64-byte aligned
  for (size_t i = 0; i < m->names.size(); ++i) {
    offset[i] = total;
    const uint64_t n = static_cast<uint64_t>(m->shapes[i][0]) *
                       static_cast<uint64_t>(std::max<int64_t>(1, m->shapes[i][1]));
    total += (n * esize + 63) / 64 * 64;
  }
  // Pre-faulted in one call: a first touch page by page costs seconds for
  // 2 GiB (and far more in some VMs).
  total = std::max<uint64_t>(4096, total);
  void* mem = mmap(nullptr, total, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (mem == MAP_FAILED)
    throw Error(
        fmt::format("cannot allocate {:.2f} GiB for the generated weights", total / 1073741824.0));
  m->memory = mem;
  m->memory_bytes = total;
  m->tensors.resize(m->names.size());
  for (size_t i = 0; i < m->names.size(); ++i) {
    DLTensor& t = m->tensors[i];
    t.data = static_cast<char*>(m->memory) + offset[i];
    t.device = {kDLCPU, 0};
    t.ndim = m->shapes[i][1] > 0 ? 2 : 1;
    t.dtype = dt.dl;
    t.shape = m->shapes[i].data();
    t.strides = nullptr;
    t.byte_offset = 0;
    m->weights.push_back({m->names[i].c_str(), &t});
  }

  fill_weights(*m, seed, threads);

  spec = halo_model_spec{};
  spec.struct_size = sizeof(spec);
  spec.architecture = m->architecture.c_str();
  spec.vocab_size = s.vocab;
  spec.hidden_size = s.hidden;
  spec.intermediate_size = s.intermediate;
  spec.num_layers = s.layers;
  spec.num_heads = s.heads;
  spec.num_kv_heads = s.kv_heads;
  spec.head_dim = static_cast<int32_t>(hd);
  spec.max_position_embeddings = max_position;
  spec.rms_norm_eps = 1e-5f;
  spec.rope_theta = 10000.0f;
  spec.rope_scaling = HALO_ROPE_SCALING_NONE;
  spec.activation = HALO_ACTIVATION_SILU;
  spec.flags = 0;
  return m;
}

struct BenchModel {
  std::string description;
  halo_model_spec spec{};
  std::vector<halo_named_tensor> weights;
  std::vector<halo_quantized_tensor> quantized;  // ABI v1.4
  std::shared_ptr<const void> keepalive;  // owner of the spec strings and weight memory
  std::string weight_dtype;               // "bf16", ... or "mixed"
  size_t compiled_elem_bytes = 2;         // for a compiled model (no weights here)
};

// --quantization on a generated model: the weights move into a WeightStore
// that quantizes the projections (as LoadedModel::load does for a file).
void quantize_generated(BenchModel& bm, const engine::EngineConfig& e) {
  if (e.quantization == "none" || e.quantization.empty()) return;
  struct Quantized {
    std::shared_ptr<const void> generated;
    model::WeightStore store;
  };
  auto q = std::make_shared<Quantized>();
  q->generated = bm.keepalive;
  for (const halo_named_tensor& w : bm.weights)
    q->store.add(w.name, model::TensorView{w.tensor->data, w.tensor->byte_offset, w.tensor->dtype,
                                           std::vector<int64_t>(w.tensor->shape,
                                                                w.tensor->shape + w.tensor->ndim)});
  model::quantize_weights(q->store, bm.spec, {e.quantization, e.quantization_group_size});
  bm.weights.assign(q->store.plain().begin(), q->store.plain().end());
  bm.quantized.assign(q->store.quantized().begin(), q->store.quantized().end());
  bm.keepalive = q;
}

BenchModel make_model(const LatencyOptions& o, int threads) {
  BenchModel bm;
  const bool overrides = o.hidden || o.layers || o.heads || o.kv_heads || o.intermediate ||
                         o.vocab || !o.dtype.empty();
  if (!o.model_dir.empty()) {
    if (!o.preset.empty()) throw Error("--model and --preset exclude each other");
    if (overrides)
      throw Error(
          "--hidden/--layers/--heads/--kv-heads/--intermediate/--vocab/--dtype shape a generated "
          "model "
          "(--preset), not --model");
    auto model = std::make_shared<model::LoadedModel>(
        model::LoadedModel::load(o.model_dir, engine::load_options(o.engine)));
    bm.spec = model->config().spec;
    bm.weights.assign(model->weights().begin(), model->weights().end());
    bm.quantized.assign(model->quantized_weights().begin(), model->quantized_weights().end());
    bm.description = o.model_dir;
    std::string td = model->config().torch_dtype;
    bm.compiled_elem_bytes = td == "float32" ? 4 : 2;
    bm.keepalive = model;
  } else {
    const std::string name = o.preset.empty() ? "tinyllama-1.1b" : o.preset;
    Shape s{};
    bool found = false;
    for (const auto& [n, sh] : presets())
      if (n == name) s = sh, found = true;
    if (!found)
      throw Error(fmt::format("--preset {}: unknown preset; choose tinyllama-1.1b or tiny", name));
    auto over = [](const char* flag, int v, int& field) {
      if (v < 0) throw Error(fmt::format("{}={} must be positive", flag, v));
      if (v > 0) field = v;
    };
    over("--hidden", o.hidden, s.hidden);
    over("--layers", o.layers, s.layers);
    over("--heads", o.heads, s.heads);
    over("--kv-heads", o.kv_heads, s.kv_heads);
    over("--intermediate", o.intermediate, s.intermediate);
    over("--vocab", o.vocab, s.vocab);
    if (s.hidden % s.heads != 0)
      throw Error(fmt::format("--hidden={} is not a multiple of --heads={}", s.hidden, s.heads));
    if ((s.hidden / s.heads) % 2 != 0)
      throw Error(fmt::format("head_dim = --hidden/--heads = {} must be even (rotary embeddings)",
                              s.hidden / s.heads));
    if (s.heads % s.kv_heads != 0)
      throw Error(
          fmt::format("--heads={} is not a multiple of --kv-heads={}", s.heads, s.kv_heads));
    const DType dt = parse_dtype(o.dtype.empty() ? "bf16" : o.dtype);
    const int max_position = std::max(2048, o.input_len + o.output_len);
    const auto t0 = clock_type::now();
    auto m = generate_model(s, dt, o.engine.seed, threads, bm.spec, max_position);
    bm.weights = m->weights;
    bm.keepalive = m;
    bm.description = fmt::format("preset {} (generated, random weights)", name);
    spdlog::info("generated {} weights ({}) in {:.2f} s", name, dt.name,
                 std::chrono::duration<double>(clock_type::now() - t0).count());
    quantize_generated(bm, o.engine);
  }
  std::string dt;
  for (const auto& w : bm.weights) {
    std::string n = dtype_name(w.tensor->dtype);
    dt = dt.empty() || dt == n ? n : "mixed";
  }
  bm.weight_dtype = dt.empty() ? "compiled" : dt;
  std::string qt;
  for (const auto& q : bm.quantized) {
    std::string n = halo_quant_type_name(q.type);
    qt = qt.empty() || qt == n ? n : "mixed";
  }
  if (!qt.empty()) bm.weight_dtype = fmt::format("{} projections, {} rest", qt, bm.weight_dtype);
  return bm;
}

// ------------------------------------------------------------- work models

struct Costs {
  uint64_t parameters = 0;        // every weight element
  uint64_t matmul_params = 0;     // q/k/v/o/gate/up/down of all layers
  uint64_t lm_head_params = 0;    // V*H
  double attn_flops_per_ctx = 0;  // 4 * heads * head_dim * layers, per token per context position
  uint64_t stream_bytes = 0;      // bytes a decode step reads of every weight but the embedding
  uint64_t embed_row_bytes = 0;   // one embedding row
};

Costs model_costs(const BenchModel& bm) {
  const halo_model_spec& s = bm.spec;
  Costs c;
  const uint64_t H = s.hidden_size, I = s.intermediate_size, V = s.vocab_size;
  const uint64_t NQ = uint64_t(s.num_heads) * s.head_dim,
                 NKV = uint64_t(s.num_kv_heads) * s.head_dim;
  c.matmul_params = uint64_t(s.num_layers) * (H * NQ + 2 * H * NKV + NQ * H + 3 * H * I);
  c.lm_head_params = V * H;
  c.attn_flops_per_ctx = 4.0 * s.num_heads * s.head_dim * s.num_layers;
  const bool tied = (s.flags & HALO_MODEL_TIED_EMBEDDINGS) != 0;
  if (bm.weights.empty()) {  // compiled model: estimate from the shape and torch_dtype
    const uint64_t e = bm.compiled_elem_bytes;
    c.parameters = c.matmul_params + (tied ? 1 : 2) * V * H + (2 * uint64_t(s.num_layers) + 1) * H;
    c.stream_bytes = (c.parameters - V * H) * e + (tied ? V * H * e : 0);
    c.embed_row_bytes = H * e;
    return c;
  }
  for (const auto& w : bm.weights) {
    const uint64_t n = numel(*w.tensor), e = w.tensor->dtype.bits / 8u;
    c.parameters += n;
    if (std::string_view(w.name) == HALO_WEIGHT_EMBED_TOKENS) {
      c.embed_row_bytes = H * e;
      if (tied) c.stream_bytes += n * e;  // read again as the lm_head
    } else {
      c.stream_bytes += n * e;
    }
  }
  for (const auto& q : bm.quantized) {  // values, scales and offsets, as stored
    const uint64_t n = uint64_t(q.rows) * uint64_t(q.cols);
    const uint64_t scale_bytes = numel(*q.scales) * (q.scales->dtype.bits / 8u);
    c.parameters += n;
    c.stream_bytes += (q.type == HALO_QUANT_UINT4 ? n / 2 : n) + scale_bytes * (q.offsets ? 2 : 1);
  }
  return c;
}

// ------------------------------------------------------------------ a step

// What one sequence computes in one step.
struct Piece {
  int seq;
  int start;  // first sequence index computed
  int count;  // tokens computed
};

class Stepper {
 public:
  Stepper(device::KvCache& kv, int vocab, int blocks_per_seq)
      : kv_(kv), vocab_(vocab), bps_(blocks_per_seq), bs_(kv.block_size()) {}

  // Runs one execute over `pieces`; `token_at(seq, pos)` gives the token ids.
  // Logits are asked for the last row of a piece that ends at `logits_from`
  // or later (the engine's rule: a sequence that has caught up samples).
  // A piece asks for the logits of its last `rows_per_piece` rows (a verify
  // asks for every row). Returns the seconds of the execute call.
  template <class TokenAt>
  double run(const std::vector<Piece>& pieces, TokenAt&& token_at, int logits_from,
             int* logits_rows, int rows_per_piece = 1) {
    in_.begin(pieces.size(), bps_);
    for (const Piece& p : pieces) {
      blocks_.resize(static_cast<size_t>(bps_));
      for (int b = 0; b < bps_; ++b) blocks_[static_cast<size_t>(b)] = block_of(p.seq, b);
      in_.add_sequence([&](int pos) { return token_at(p.seq, pos); }, p.start, p.count, blocks_,
                       bs_);
      const auto last = static_cast<int32_t>(in_.token_ids.size()) - 1;
      if (p.start + p.count >= logits_from)
        for (int32_t row = last - std::min(rows_per_piece, p.count) + 1; row <= last; ++row)
          in_.request_logits(row);
    }
    if (logits_rows) *logits_rows = static_cast<int>(in_.logits_indices.size());
    const auto t0 = clock_type::now();
    kv_.execute(in_, vocab_, logits_);
    return std::chrono::duration<double>(clock_type::now() - t0).count();
  }

 private:
  int32_t block_of(int seq, int k) const {
    return seq * bps_ + k;
  }  // sequence s owns blocks [s*bps, (s+1)*bps)

  device::KvCache& kv_;
  int vocab_, bps_, bs_;
  device::StepInputs in_;
  std::vector<int32_t> blocks_;  // one piece's block table
  std::vector<float> logits_;
};

// Prompt steps as a scheduler would cut them: at most max_seqs sequences and
// max_tokens tokens per step, a prompt split across steps only when chunked.
// Empty when a prompt cannot fit a step without chunking.
std::vector<std::vector<Piece>> plan_prefill(int batch, int input_len, int max_tokens, int max_seqs,
                                             bool chunked) {
  std::vector<std::vector<Piece>> steps;
  std::vector<int> done(static_cast<size_t>(batch), 0);
  int s = 0;
  if (!chunked && input_len > max_tokens) return steps;
  while (s < batch) {
    std::vector<Piece> step;
    int budget = max_tokens;
    for (int q = s; q < batch && budget > 0 && static_cast<int>(step.size()) < max_seqs; ++q) {
      const int left = input_len - done[q];
      const int take = chunked ? std::min(left, budget) : (left <= budget ? left : 0);
      if (take == 0) break;
      step.push_back({q, done[q], take});
      done[q] += take;
      budget -= take;
    }
    while (s < batch && done[s] == input_len) ++s;
    steps.push_back(std::move(step));
  }
  return steps;
}

std::vector<int> parse_batch_sizes(const std::string& text) {
  std::vector<int> out;
  size_t i = 0;
  while (i <= text.size()) {
    size_t j = text.find(',', i);
    if (j == std::string::npos) j = text.size();
    const std::string item = text.substr(i, j - i);
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v <= 0 || v > 1000000)
      throw Error(
          fmt::format("--batch-sizes={}: '{}' is not a positive integer (expected e.g. 1,4,16,64)",
                      text, item));
    out.push_back(static_cast<int>(v));
    i = j + 1;
  }
  return out;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  while (b >= 1024.0 && u < 4) b /= 1024.0, ++u;
  return fmt::format("{:.2f} {}", b, units[u]);
}

// ------------------------------------------------------------------- run

// Checks the flags that need no device, so a bad one fails before any probe
// runs. Returns the batch sizes.
std::vector<int> check_latency_flags(const LatencyOptions& o) {
  const std::vector<int> batches = parse_batch_sizes(o.batch_sizes);
  if (o.input_len <= 0) throw Error(fmt::format("--input-len={} must be positive", o.input_len));
  if (o.output_len <= 0) throw Error(fmt::format("--output-len={} must be positive", o.output_len));
  if (o.warmup < 0) throw Error(fmt::format("--warmup={} must not be negative", o.warmup));
  if (o.max_prefill_tokens < 0)
    throw Error(fmt::format("--max-prefill-tokens={} must not be negative", o.max_prefill_tokens));
  if (!(o.roofline_budget > 0))
    throw Error(fmt::format("--roofline-budget={} must be positive", o.roofline_budget));
  if (o.roofline_buffer_mib <= 0)
    throw Error(fmt::format("--roofline-buffer-mib={} must be positive", o.roofline_buffer_mib));
  if (!o.model_dir.empty() && !o.preset.empty())
    throw Error("--model and --preset exclude each other");
  if (o.model_dir.empty() && !o.preset.empty()) {
    bool known = false;
    for (const auto& [n, s] : presets()) known |= n == o.preset;
    if (!known)
      throw Error(
          fmt::format("--preset {}: unknown preset; choose tinyllama-1.1b or tiny", o.preset));
  }
  if (!o.dtype.empty()) parse_dtype(o.dtype);
  (void)engine::parse_kv_cache_dtype(o.engine.kv_cache_dtype);  // a bad flag fails before the probes
  return batches;
}

// The rooflines: the host's read bandwidth and the device's bf16 matmul peak
// (0 when unavailable), with their JSON record.
struct Roofline {
  nlohmann::ordered_json json;
  ReadBandwidth bw;
  double peak = 0;
  std::string peak_note;
};

Roofline measure_roofline(const LatencyOptions& o, const device::Device& dev, bool host_device) {
  Roofline r;
  nlohmann::ordered_json& roof = r.json;
  roof["measured_on"] = "host";
  roof["applies_to_device"] = host_device;
  r.bw = measure_read_bandwidth(static_cast<size_t>(o.roofline_buffer_mib) << 20, o.engine.threads,
                                o.roofline_budget);
  const ReadBandwidth& bw = r.bw;
  roof["read_bandwidth_bytes_per_s"] = bw.bytes_per_s;
  roof["read_bandwidth_gb_per_s"] = bw.bytes_per_s / 1e9;
  roof["read_bandwidth_buffer_bytes"] = bw.buffer_bytes;
  roof["read_bandwidth_threads"] = bw.threads;
  roof["read_bandwidth_passes"] = bw.passes;
  roof["read_bandwidth_best_gb_per_s"] = bw.best_bytes_per_s / 1e9;
  roof["read_bandwidth_probe_seconds"] = bw.seconds;
  // The device's bf16 matmul peak, from its plugin (ABI v1.3 device_measure_peak).
  try {
    if (const auto p = dev.measure_peak(HALO_COMPUTE_DTYPE_BF16, o.roofline_budget)) {
      r.peak = p->flops_per_s;
      roof["matmul_peak_flops_per_s"] = p->flops_per_s;
      roof["matmul_peak_tflops_per_s"] = p->flops_per_s / 1e12;
      roof["matmul_peak_method"] = p->method;
      r.peak_note = fmt::format("{:.2f} TFLOP/s bf16 ({})", p->flops_per_s / 1e12, p->method);
    } else {
      r.peak_note =
          fmt::format("unavailable (the {} plugin does not measure it)", dev.plugin().name());
      roof["matmul_peak_unavailable"] = r.peak_note;
    }
  } catch (const std::exception& e) {
    r.peak_note = fmt::format("unavailable ({})", e.what());
    roof["matmul_peak_unavailable"] = e.what();
  }
  return r;
}

// The KV cache of a run: every sequence of the largest runnable batch owns
// its blocks.
struct KvLayout {
  int block_size = 0;
  int blocks_per_seq = 0;
  int64_t num_blocks = 0;
  double bytes = 0;
  double bytes_per_token = 0;
};

KvLayout plan_kv_cache(const LatencyOptions& o, const std::vector<int>& batches,
                       const halo_limits& lim) {
  KvLayout kv;
  const int bs = lim.block_size;
  kv.block_size = bs;
  kv.blocks_per_seq = (o.input_len + o.output_len + std::max(0, o.verify_tokens - 1) + bs - 1) / bs;
  int max_runnable = 0;
  for (int b : batches)
    if (b <= lim.max_num_seqs) max_runnable = std::max(max_runnable, b);
  kv.num_blocks = int64_t(std::max(1, max_runnable)) * kv.blocks_per_seq;
  kv.bytes = double(kv.num_blocks) * double(lim.kv_bytes_per_block);
  if (lim.kv_memory_available > 0 && kv.bytes > double(lim.kv_memory_available))
    throw Error(fmt::format(
        "the KV cache for batch {} x {} tokens needs {} but the device has {} left after the "
        "weights; use smaller --batch-sizes or --input-len",
        max_runnable, o.input_len + o.output_len, human_bytes(kv.bytes),
        human_bytes(double(lim.kv_memory_available))));
  if (kv.num_blocks > std::numeric_limits<int32_t>::max())
    throw Error("the KV cache needs more than 2^31 blocks");
  kv.bytes_per_token = double(lim.kv_bytes_per_block) / bs;
  return kv;
}

// What the stages of a run after the set-up read.
struct LatencyRun {
  const LatencyOptions& o;
  const BenchModel& bm;
  const Costs& costs;
  const device::Plugin& plugin;
  const device::Device& dev;
  bool host_device;
  double prepare_s;
  const halo_limits& lim;
  std::string kv_dtype;  // the agreed KV cache dtype, or "not reported" (ABI < 1.2)
  bool chunked;          // chunked prefill on
  const KvLayout& kv;
  const Roofline& roof;
};

// Random prompt and decode token ids, one stream for the whole run.
struct TokenSource {
  std::mt19937_64 rng;
  std::uniform_int_distribution<int32_t> id;
  int32_t next() { return id(rng); }
};

void print_header(const LatencyRun& r) {
  const halo_model_spec& spec = r.bm.spec;
  const halo_limits& lim = r.lim;
  const ReadBandwidth& bw = r.roof.bw;
  fmt::print("model            {}\n", r.bm.description);
  fmt::print(
      "shape            vocab {} hidden {} intermediate {} layers {} heads {} kv_heads {} head_dim "
      "{} "
      "({:.1f}M parameters, weights {})\n",
      spec.vocab_size, spec.hidden_size, spec.intermediate_size, spec.num_layers, spec.num_heads,
      spec.num_kv_heads, spec.head_dim, r.costs.parameters / 1e6, r.bm.weight_dtype);
  fmt::print("device           {} ({}, {}), prepared in {:.2f} s\n", r.plugin.name(),
             r.dev.info().name, device::kind_name(r.dev.info().kind), r.prepare_s);
  fmt::print(
      "limits           max_num_seqs {} max_model_len {} max_num_batched_tokens {} block_size {} "
      "chunked_prefill {}\n",
      lim.max_num_seqs, lim.max_model_len, lim.max_num_batched_tokens, r.kv.block_size, r.chunked);
  fmt::print("KV cache         {} blocks ({}), {} ({:.0f} bytes/token)\n", r.kv.num_blocks,
             human_bytes(r.kv.bytes), r.kv_dtype, r.kv.bytes_per_token);
  fmt::print(
      "read bandwidth   {:.2f} GB/s (host, {} threads, {} buffer, median of {} passes; best "
      "{:.2f})\n",
      bw.bytes_per_s / 1e9, bw.threads, human_bytes(double(bw.buffer_bytes)), bw.passes,
      bw.best_bytes_per_s / 1e9);
  fmt::print("matmul peak      {}\n", r.roof.peak_note);
  if (!r.host_device)
    fmt::print(
        "note             the roofline is the host's; it may not apply to device '{}' ({})\n",
        r.plugin.name(), device::kind_name(r.dev.info().kind));
  fmt::print(
      "workload         input_len {} (prefill prompt = decode context), output_len {} decode "
      "steps, "
      "warmup {}\n\n",
      r.o.input_len, r.o.output_len, r.o.warmup);
}

// Prefill of B random prompts of input_len tokens, timed over the planned
// steps; its JSON record ("skipped" when it does not run). The prompts are
// drawn even when skipped, so the decode tokens stay the same.
nlohmann::ordered_json bench_prefill(const LatencyRun& r, int B, Stepper& stepper,
                                     TokenSource& tokens, bool& prefilled) {
  const LatencyOptions& o = r.o;
  const halo_limits& lim = r.lim;
  nlohmann::ordered_json pj;
  std::vector<std::vector<int32_t>> prompt(static_cast<size_t>(B),
                                           std::vector<int32_t>(static_cast<size_t>(o.input_len)));
  for (auto& p : prompt)
    for (auto& t : p) t = tokens.next();
  auto prompt_token = [&](int s, int pos) { return prompt[s][pos]; };
  const int64_t prefill_tokens = int64_t(B) * o.input_len;
  auto plan = plan_prefill(B, o.input_len, lim.max_num_batched_tokens, lim.max_num_seqs, r.chunked);
  if (prefill_tokens > o.max_prefill_tokens) {
    pj["skipped"] = fmt::format("batch {} x input_len {} = {} tokens > --max-prefill-tokens {}", B,
                                o.input_len, prefill_tokens, o.max_prefill_tokens);
    return pj;
  }
  if (plan.empty()) {
    pj["skipped"] = fmt::format(
        "input_len {} > max_num_batched_tokens {} and the prompt cannot be split "
        "(chunked prefill off)",
        o.input_len, lim.max_num_batched_tokens);
    return pj;
  }
  spdlog::info("batch {}: prefill of {} tokens in {} steps", B, prefill_tokens, plan.size());
  for (int w = 0; w < o.warmup; ++w) stepper.run(plan[0], prompt_token, o.input_len, nullptr);
  double seconds = 0;
  int logits_rows = 0;
  for (const auto& step : plan) {
    int rows_here = 0;
    seconds += stepper.run(step, prompt_token, o.input_len, &rows_here);
    logits_rows += rows_here;
  }
  prefilled = true;
  const double n = o.input_len;
  const double flops = 2.0 * double(r.costs.matmul_params) * double(prefill_tokens) +
                       2.0 * double(r.costs.lm_head_params) * logits_rows +
                       r.costs.attn_flops_per_ctx * B * (n * (n + 1) / 2);
  pj["tokens"] = prefill_tokens;
  pj["steps"] = plan.size();
  pj["logits_rows"] = logits_rows;
  pj["ms"] = seconds * 1e3;
  pj["tokens_per_s"] = double(prefill_tokens) / seconds;
  pj["flops"] = flops;
  pj["flops_per_s"] = flops / seconds;
  pj["tflops_per_s"] = flops / seconds / 1e12;
  if (r.roof.peak > 0) pj["fraction_of_matmul_peak"] = flops / seconds / r.roof.peak;
  return pj;
}

// output_len decode steps of B tokens each, at contexts input_len+1 ..
// input_len+output_len; its JSON record. Notes go to `notes`.
nlohmann::ordered_json bench_decode(const LatencyRun& r, int B, Stepper& stepper,
                                    TokenSource& tokens, bool prefilled,
                                    std::vector<std::string>& notes) {
  const LatencyOptions& o = r.o;
  nlohmann::ordered_json dj;
  if (B > r.lim.max_num_batched_tokens) {
    dj["skipped"] =
        fmt::format("batch {} > max_num_batched_tokens {}", B, r.lim.max_num_batched_tokens);
    notes.push_back(
        fmt::format("batch {}: decode skipped: {}", B, dj["skipped"].get<std::string>()));
    return dj;
  }
  std::vector<int32_t> step_tokens(static_cast<size_t>(B));
  auto decode_token = [&](int s, int) { return step_tokens[s]; };
  auto pieces_at = [&](int pos) {
    std::vector<Piece> p;
    for (int s = 0; s < B; ++s) p.push_back({s, pos, 1});
    return p;
  };
  spdlog::info("batch {}: {} decode steps", B, o.output_len);
  for (int w = 0; w < o.warmup; ++w) {
    for (auto& t : step_tokens) t = tokens.next();
    stepper.run(pieces_at(o.input_len), decode_token, 0, nullptr);
  }
  std::vector<double> ms;
  for (int i = 0; i < o.output_len; ++i) {
    for (auto& t : step_tokens) t = tokens.next();
    ms.push_back(1e3 * stepper.run(pieces_at(o.input_len + i), decode_token, 0, nullptr));
  }
  const double p50 = percentile(ms, 50), p90 = percentile(ms, 90);
  const double mean_ctx = o.input_len + (o.output_len + 1) / 2.0;
  const double weight_bytes =
      double(r.costs.stream_bytes) + double(B) * double(r.costs.embed_row_bytes);
  const double kv_read = double(B) * mean_ctx * r.kv.bytes_per_token;
  const double bytes = weight_bytes + kv_read;
  const double flops = 2.0 * double(r.costs.matmul_params + r.costs.lm_head_params) * B +
                       r.costs.attn_flops_per_ctx * B * mean_ctx;
  dj["kv_source"] = prefilled ? "prefill" : "unfilled";
  dj["context_len_first"] = o.input_len + 1;
  dj["context_len_last"] = o.input_len + o.output_len;
  dj["steps"] = o.output_len;
  dj["step_ms"] = ms;
  dj["step_ms_p50"] = p50;
  dj["step_ms_p90"] = p90;
  dj["step_ms_mean"] = std::accumulate(ms.begin(), ms.end(), 0.0) / ms.size();
  dj["tokens_per_s"] = B / (p50 / 1e3);
  dj["weight_bytes_per_step"] = weight_bytes;
  dj["kv_bytes_per_step"] = kv_read;
  dj["bytes_per_step"] = bytes;
  dj["bytes_per_s"] = bytes / (p50 / 1e3);
  dj["gb_per_s"] = bytes / (p50 / 1e3) / 1e9;
  if (r.roof.bw.bytes_per_s > 0)
    dj["fraction_of_read_bandwidth"] = bytes / (p50 / 1e3) / r.roof.bw.bytes_per_s;
  dj["flops_per_step"] = flops;
  dj["tflops_per_s"] = flops / (p50 / 1e3) / 1e12;
  if (!prefilled)
    notes.push_back(
        fmt::format("batch {}: decode attends over KV blocks no prefill wrote (the contents do not "
                    "change the work)",
                    B));
  return dj;
}

// Speculative decoding's verify: output_len steps in which each of the B
// sequences computes verify_tokens query tokens (its last token and the
// proposals) with logits for each, at the decode steps' contexts. Its cost
// against the decode step's is what each accepted proposal saves from.
nlohmann::ordered_json bench_verify(const LatencyRun& r, int B, Stepper& stepper, TokenSource& tokens,
                                    const nlohmann::ordered_json& decode) {
  const LatencyOptions& o = r.o;
  const int q = o.verify_tokens;
  nlohmann::ordered_json vj;
  if (B * q > r.lim.max_num_batched_tokens) {
    vj["skipped"] = fmt::format("batch {} x {} > max_num_batched_tokens {}", B, q, r.lim.max_num_batched_tokens);
    return vj;
  }
  std::vector<int32_t> step_tokens(static_cast<size_t>(B) * static_cast<size_t>(q));
  auto verify_token = [&](int s, int pos) { return step_tokens[static_cast<size_t>(s * q + pos % q)]; };
  auto pieces_at = [&](int pos) {
    std::vector<Piece> p;
    for (int s = 0; s < B; ++s) p.push_back({s, pos, q});
    return p;
  };
  spdlog::info("batch {}: {} verify steps of {} tokens", B, o.output_len, q);
  for (int w = 0; w < o.warmup; ++w) {
    for (auto& t : step_tokens) t = tokens.next();
    stepper.run(pieces_at(o.input_len), verify_token, 0, nullptr, q);
  }
  std::vector<double> ms;
  for (int i = 0; i < o.output_len; ++i) {
    for (auto& t : step_tokens) t = tokens.next();
    ms.push_back(1e3 * stepper.run(pieces_at(o.input_len + i), verify_token, 0, nullptr, q));
  }
  const double p50 = percentile(ms, 50);
  vj["query_tokens"] = q;
  vj["step_ms"] = ms;
  vj["step_ms_p50"] = p50;
  vj["step_ms_p90"] = percentile(ms, 90);
  vj["cost_vs_decode"] = p50 / decode["step_ms_p50"].get<double>();
  return vj;
}

// One row of the table and of the JSON "batches": batch size B's prefill and
// decode. Notes (skips, unfilled KV) go to `notes`.
nlohmann::ordered_json bench_batch(const LatencyRun& r, int B, Stepper& stepper,
                                   TokenSource& tokens, std::vector<std::string>& notes) {
  nlohmann::ordered_json row;
  row["batch_size"] = B;
  nlohmann::ordered_json pj, dj;
  if (B > r.lim.max_num_seqs) {
    const std::string why =
        fmt::format("batch {} > max_num_seqs {} the device agreed", B, r.lim.max_num_seqs);
    pj["skipped"] = why;
    dj["skipped"] = why;
    notes.push_back(why);
    row["prefill"] = pj;
    row["decode"] = dj;
    return row;
  }
  bool prefilled = false;
  pj = bench_prefill(r, B, stepper, tokens, prefilled);
  if (pj.contains("skipped"))
    notes.push_back(
        fmt::format("batch {}: prefill skipped: {}", B, pj["skipped"].get<std::string>()));
  dj = bench_decode(r, B, stepper, tokens, prefilled, notes);
  if (r.o.verify_tokens > 1 && !dj.contains("skipped")) dj["verify"] = bench_verify(r, B, stepper, tokens, dj);
  row["prefill"] = pj;
  row["decode"] = dj;
  return row;
}

void print_verify(const nlohmann::ordered_json& rows, int q) {
  fmt::print("\nverify steps of {} query tokens per sequence (speculative decoding):\n", q);
  for (const auto& row : rows) {
    if (!row["decode"].contains("verify")) continue;
    const auto& v = row["decode"]["verify"];
    if (v.contains("skipped")) {
      fmt::print("  batch {:>4}: skipped: {}\n", row["batch_size"].get<int>(), v["skipped"].get<std::string>());
      continue;
    }
    fmt::print("  batch {:>4}: verify {:.3f} ms (p90 {:.3f}) = {:.2f}x the decode step\n",
               row["batch_size"].get<int>(), v["step_ms_p50"].get<double>(), v["step_ms_p90"].get<double>(),
               v["cost_vs_decode"].get<double>());
  }
}

void print_table(const nlohmann::ordered_json& rows) {
  auto num = [](const nlohmann::ordered_json& j, const char* key, const char* fmt_spec,
                double scale = 1) {
    if (!j.contains(key)) return std::string("-");
    return fmt::format(fmt::runtime(fmt_spec), j[key].get<double>() * scale);
  };
  fmt::print("{:>6} | {:>11} {:>10} {:>8} {:>7} | {:>10} {:>10} {:>10} {:>8} {:>7}\n", "batch",
             "prefill ms", "tok/s", "TFLOP/s", "% peak", "decode ms", "p90 ms", "tok/s", "GB/s",
             "% bw");
  fmt::print("{:-<6}-+-{:-<11}-{:-<10}-{:-<8}-{:-<7}-+-{:-<10}-{:-<10}-{:-<10}-{:-<8}-{:-<7}\n", "",
             "", "", "", "", "", "", "", "", "");
  for (const auto& r : rows) {
    const auto& p = r["prefill"];
    const auto& d = r["decode"];
    fmt::print("{:>6} | {:>11} {:>10} {:>8} {:>7} | {:>10} {:>10} {:>10} {:>8} {:>7}\n",
               r["batch_size"].get<int>(), num(p, "ms", "{:.2f}"), num(p, "tokens_per_s", "{:.1f}"),
               num(p, "tflops_per_s", "{:.3f}"), num(p, "fraction_of_matmul_peak", "{:.1f}", 100),
               num(d, "step_ms_p50", "{:.3f}"), num(d, "step_ms_p90", "{:.3f}"),
               num(d, "tokens_per_s", "{:.1f}"), num(d, "gb_per_s", "{:.2f}"),
               num(d, "fraction_of_read_bandwidth", "{:.1f}", 100));
  }
}

// The notes after the table, then how the FLOPs and bytes are counted.
void print_notes(const LatencyRun& r, std::vector<std::string> notes) {
  // Weights that fit the last-level cache are read from it, above the DRAM roofline.
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const double llc_bytes = llc > 0 ? double(llc) : 32.0 * 1048576;
  if (r.host_device && double(r.costs.stream_bytes) < 2 * llc_bytes)
    notes.push_back(
        fmt::format("the weights ({}) fit in or near the last-level cache ({}{}): decode may read "
                    "them from cache, above the DRAM bandwidth roofline",
                    human_bytes(double(r.costs.stream_bytes)), human_bytes(llc_bytes),
                    llc > 0 ? "" : ", assumed"));
  if (!notes.empty()) fmt::print("\n");
  for (const auto& n : notes) fmt::print("note: {}\n", n);
  fmt::print(
      "\nprefill FLOPs = 2 x {:.1f}M matmul params x tokens + 2 x lm_head params x logits rows + "
      "attention "
      "4 x heads x head_dim x layers x sum of context; decode bytes/step = {} of weights "
      "(embedding rows "
      "added per token) + KV {:.0f} bytes/token x batch x mean context\n",
      r.costs.matmul_params / 1e6, human_bytes(double(r.costs.stream_bytes)), r.kv.bytes_per_token);
}

void write_json(const LatencyRun& r, const nlohmann::ordered_json& rows) {
  const LatencyOptions& o = r.o;
  const halo_model_spec& spec = r.bm.spec;
  const halo_limits& lim = r.lim;
  nlohmann::ordered_json out;
  out["model"] = r.bm.description;
  out["shape"] = {{"vocab_size", spec.vocab_size},
                  {"hidden_size", spec.hidden_size},
                  {"intermediate_size", spec.intermediate_size},
                  {"num_layers", spec.num_layers},
                  {"num_heads", spec.num_heads},
                  {"num_kv_heads", spec.num_kv_heads},
                  {"head_dim", spec.head_dim},
                  {"tied_embeddings", (spec.flags & HALO_MODEL_TIED_EMBEDDINGS) != 0},
                  {"weight_dtype", r.bm.weight_dtype}};
  out["parameters"] = r.costs.parameters;
  out["matmul_parameters"] = r.costs.matmul_params;
  out["lm_head_parameters"] = r.costs.lm_head_params;
  out["weight_stream_bytes"] = r.costs.stream_bytes;
  out["embedding_row_bytes"] = r.costs.embed_row_bytes;
  out["device"] = r.plugin.name();
  out["device_name"] = r.dev.info().name;
  out["device_kind"] = device::kind_name(r.dev.info().kind);
  out["threads"] = o.engine.threads;
  out["prepare_seconds"] = r.prepare_s;
  out["limits"] = {{"max_num_seqs", lim.max_num_seqs},
                   {"max_model_len", lim.max_model_len},
                   {"max_num_batched_tokens", lim.max_num_batched_tokens},
                   {"block_size", r.kv.block_size},
                   {"chunked_prefill", r.chunked},
                   {"kv_bytes_per_block", lim.kv_bytes_per_block},
                   {"kv_bytes_per_token", r.kv.bytes_per_token},
                   {"kv_blocks", r.kv.num_blocks},
                   {"kv_cache_dtype", r.kv_dtype}};
  out["input_len"] = o.input_len;
  out["output_len"] = o.output_len;
  out["warmup"] = o.warmup;
  out["max_prefill_tokens"] = o.max_prefill_tokens;
  out["roofline"] = r.roof.json;
  out["batches"] = rows;
  std::ofstream f(o.output_json);
  if (!f) throw Error(fmt::format("--output-json {}: cannot write", o.output_json));
  f << out.dump(2) << "\n";
}

void run_latency(const LatencyOptions& o) {
  const std::vector<int> batches = check_latency_flags(o);
  const int max_batch = *std::max_element(batches.begin(), batches.end());
  const int host_threads =
      o.engine.threads > 0 ? o.engine.threads
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));

  auto plugin = device::Plugin::load(o.engine.device);
  device::Options options = o.engine.plugin_options;
  if (o.engine.threads > 0) options.emplace_back("threads", std::to_string(o.engine.threads));
  auto dev = std::make_shared<device::Device>(plugin, o.engine.device_index, options);
  const bool host_device = dev->info().kind == HALO_DEVICE_KIND_CPU;

  BenchModel bm = make_model(o, host_threads);
  const halo_model_spec& spec = bm.spec;
  const Costs costs = model_costs(bm);
  if (o.input_len + o.output_len > spec.max_position_embeddings)
    throw Error(fmt::format(
        "--input-len={} + --output-len={} exceeds the model's max_position_embeddings={}",
        o.input_len, o.output_len, spec.max_position_embeddings));

  // Rooflines, before the device takes its copy of the weights.
  const Roofline roof = measure_roofline(o, *dev, host_device);

  // Limits: room for the largest batch at input_len + output_len tokens,
  // proposed and checked as the engine does.
  const auto& e = o.engine;
  halo_limits fallback{};
  fallback.max_num_seqs = max_batch;
  fallback.max_model_len = o.input_len + o.output_len + std::max(0, o.verify_tokens - 1);
  fallback.max_num_batched_tokens = std::max({2048, o.input_len, max_batch});
  halo_limits lim = engine::propose_limits(e, *plugin, fallback);
  const auto tp = clock_type::now();
  auto exe =
      std::make_shared<device::Executable>(dev, spec, bm.weights, lim, options, bm.quantized);
  const double prepare_s = std::chrono::duration<double>(clock_type::now() - tp).count();
  lim = exe->limits();
  engine::check_agreed_limits(e, lim, *plugin);
  const bool has_kv_dtype = plugin->api().abi_minor >= 2;
  if (lim.max_model_len < o.input_len + o.output_len + std::max(0, o.verify_tokens - 1))
    throw Error(fmt::format(
        "plugin '{}' agreed max_model_len={}, less than --input-len={} + --output-len={}",
        plugin->name(), lim.max_model_len, o.input_len, o.output_len));
  const std::string kv_dtype =
      has_kv_dtype ? halo_kv_dtype_name(lim.kv_cache_dtype) : "not reported";
  const bool chunked = e.enable_chunked_prefill && (lim.capabilities & HALO_CAP_CHUNKED_PREFILL);

  const KvLayout kvl = plan_kv_cache(o, batches, lim);
  device::KvCache kv(exe, static_cast<int>(kvl.num_blocks), kvl.block_size);
  Stepper stepper(kv, spec.vocab_size, kvl.blocks_per_seq);
  const LatencyRun run{o,         bm,  costs,    *plugin, *dev, host_device,
                       prepare_s, lim, kv_dtype, chunked, kvl,  roof};

  print_header(run);
  std::fflush(stdout);
  TokenSource tokens{std::mt19937_64(o.engine.seed ^ 0x6A09E667F3BCC908ull),
                     std::uniform_int_distribution<int32_t>(0, spec.vocab_size - 1)};
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::vector<std::string> notes;
  for (int B : batches) rows.push_back(bench_batch(run, B, stepper, tokens, notes));

  print_table(rows);
  if (o.verify_tokens > 1) print_verify(rows, o.verify_tokens);
  print_notes(run, std::move(notes));
  if (!o.output_json.empty()) write_json(run, rows);
}

}  // namespace

void add_bench_latency_command(CLI::App& bench) {
  auto o = std::make_shared<LatencyOptions>();
  auto* cmd = bench.add_subcommand(
      "latency",
      "Per-step prefill and decode latency at several batch sizes, beside the host roofline");
  cmd->add_option("--model", o->model_dir,
                  "Hugging Face model directory (instead of a generated --preset)");
  cmd->add_option(
      "--preset", o->preset,
      "Generated model with random weights, kept in memory: tinyllama-1.1b (default) or tiny");
  cmd->add_option("--hidden", o->hidden, "Override the preset's hidden size");
  cmd->add_option("--layers", o->layers, "Override the preset's layer count");
  cmd->add_option("--heads", o->heads, "Override the preset's attention heads");
  cmd->add_option("--kv-heads", o->kv_heads, "Override the preset's KV heads");
  cmd->add_option("--intermediate", o->intermediate, "Override the preset's MLP size");
  cmd->add_option("--vocab", o->vocab, "Override the preset's vocabulary size");
  cmd->add_option("--dtype", o->dtype,
                  "Weight type of a generated model: bf16 (default), fp16 or fp32");
  cmd->add_option("--batch-sizes", o->batch_sizes, "Comma-separated batch sizes")
      ->capture_default_str();
  cmd->add_option("--input-len", o->input_len, "Prompt tokens per sequence (= the decode context)")
      ->capture_default_str();
  cmd->add_option("--output-len", o->output_len, "Decode steps timed per batch size")
      ->capture_default_str();
  cmd->add_option("--warmup", o->warmup, "Untimed steps before each timed phase")
      ->capture_default_str();
  cmd->add_option("--max-prefill-tokens", o->max_prefill_tokens,
                  "Skip the prefill of a batch with more tokens than this")
      ->capture_default_str();
  cmd->add_option("--roofline-budget", o->roofline_budget,
                  "Seconds for each roofline probe (bandwidth, matmul)")
      ->capture_default_str();
  cmd->add_option("--roofline-buffer-mib", o->roofline_buffer_mib,
                  "Buffer the bandwidth probe streams (keep it well above the last-level cache)")
      ->capture_default_str();
  cmd->add_option("--output-json", o->output_json, "Write the results as JSON to this file");
  cmd->add_option("--verify-tokens", o->verify_tokens,
                  "Also time verify steps (speculative decoding) of this many query tokens per sequence, "
                  "e.g. 5 for 4 proposals")
      ->check(CLI::Range(0, 64));
  add_engine_options(*cmd, o->engine);
  cmd->callback([o] { run_latency(*o); });
}

}  // namespace halo::tools
