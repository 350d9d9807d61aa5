#include "reference_model.h"

#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>
#include <random>
#include <stdexcept>

#include "halo/kernels/dtype.h"

namespace halo::test {

const halo_plugin_api* api() {
  static const halo_plugin_api* table = [] {
    void* h = dlopen(HALO_CPU_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) throw std::runtime_error(std::string("dlopen: ") + dlerror());
    auto get = reinterpret_cast<halo_plugin_get_api_fn>(dlsym(h, HALO_PLUGIN_ENTRY_SYMBOL));
    if (get == nullptr) throw std::runtime_error("no " HALO_PLUGIN_ENTRY_SYMBOL);
    return get();  // the library stays loaded for the whole test run
  }();
  return table;
}

Status take(halo_error* e) {
  Status s;
  if (e == nullptr) return s;
  s.code = api()->error_code(e);
  const char* m = api()->error_message(e);
  s.message = m ? m : "";
  api()->error_destroy(e);
  return s;
}

Device open_device(int threads) {
  halo_device_open_args a{};
  a.struct_size = sizeof a;
  const std::string t = std::to_string(threads);
  halo_option opt{"threads", t.c_str()};
  if (threads > 0) {
    a.options = &opt;
    a.num_options = 1;
  }
  const Status s = take(api()->device_open(&a));
  EXPECT_EQ(s.code, HALO_STATUS_OK) << s.message;
  return Device(a.device);
}

// ------------------------------------------------------------------ model

namespace {
enum Kind { kMatrix, kNorm, kBias, kEmbed };
}

TestModel::TestModel(const Config& c) : cfg(c) {
  const int64_t V = c.vocab, H = c.hidden, I = c.inter, NQ = int64_t{c.heads} * c.head_dim,
                NKV = int64_t{c.kv_heads} * c.head_dim;
  add(HALO_WEIGHT_EMBED_TOKENS, {V, H}, kEmbed);
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = HALO_WEIGHT_LAYER_PREFIX + std::to_string(l) + ".";
    add(p + HALO_WEIGHT_ATTN_NORM, {H}, kNorm);
    add(p + HALO_WEIGHT_Q_PROJ, {NQ, H}, kMatrix);
    add(p + HALO_WEIGHT_K_PROJ, {NKV, H}, kMatrix);
    add(p + HALO_WEIGHT_V_PROJ, {NKV, H}, kMatrix);
    if (c.flags & HALO_MODEL_QKV_BIAS) {
      add(p + HALO_WEIGHT_Q_BIAS, {NQ}, kBias);
      add(p + HALO_WEIGHT_K_BIAS, {NKV}, kBias);
      add(p + HALO_WEIGHT_V_BIAS, {NKV}, kBias);
    }
    if (c.flags & HALO_MODEL_QK_NORM) {
      add(p + HALO_WEIGHT_Q_NORM, {c.head_dim}, kNorm);
      add(p + HALO_WEIGHT_K_NORM, {c.head_dim}, kNorm);
    }
    add(p + HALO_WEIGHT_O_PROJ, {H, NQ}, kMatrix);
    add(p + HALO_WEIGHT_MLP_NORM, {H}, kNorm);
    add(p + HALO_WEIGHT_GATE_PROJ, {I, H}, kMatrix);
    add(p + HALO_WEIGHT_UP_PROJ, {I, H}, kMatrix);
    add(p + HALO_WEIGHT_DOWN_PROJ, {H, I}, kMatrix);
  }
  add(HALO_WEIGHT_FINAL_NORM, {H}, kNorm);
  if (!(c.flags & HALO_MODEL_TIED_EMBEDDINGS)) add(HALO_WEIGHT_LM_HEAD, {V, H}, kMatrix);

  // One arena; every tensor is a view with a byte_offset (as with fused checkpoints).
  size_t total = 0;
  for (auto& t : tensors_) {
    t.offset = total;
    total += (t.values.size() * (t.dtype.bits / 8) + 63) / 64 * 64 + 64;
  }
  arena_.assign(total / 8 + 1, 0);
  auto* base = reinterpret_cast<char*>(arena_.data());
  dl_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    Tensor& t = tensors_[i];
    for (size_t j = 0; j < t.values.size(); ++j) {
      if (t.dtype.bits == 32) {
        std::memcpy(base + t.offset + 4 * j, &t.values[j], 4);
      } else {
        const uint16_t h = t.dtype.code == kDLBfloat ? kernels::f32_to_bf16(t.values[j])
                                                     : kernels::f32_to_f16(t.values[j]);
        std::memcpy(base + t.offset + 2 * j, &h, 2);
      }
    }
    DLTensor& d = dl_[i];
    d.data = base;
    d.byte_offset = t.offset;
    d.device = {kDLCPU, 0};
    d.ndim = static_cast<int>(t.shape.size());
    d.dtype = t.dtype;
    d.shape = t.shape.data();
    d.strides = nullptr;
  }
  for (size_t i = 0; i < tensors_.size(); ++i) named.push_back({tensors_[i].name.c_str(), &dl_[i]});

  spec.struct_size = sizeof spec;
  spec.architecture = "TestForCausalLM";
  spec.vocab_size = c.vocab;
  spec.hidden_size = c.hidden;
  spec.intermediate_size = c.inter;
  spec.num_layers = c.layers;
  spec.num_heads = c.heads;
  spec.num_kv_heads = c.kv_heads;
  spec.head_dim = c.head_dim;
  spec.max_position_embeddings = c.max_pos;
  spec.rms_norm_eps = c.eps;
  spec.rope_theta = c.theta;
  spec.rope_scaling = c.scaling;
  spec.rope_factor = c.factor;
  spec.rope_low_freq_factor = c.low;
  spec.rope_high_freq_factor = c.high;
  spec.rope_original_max_position = c.orig_max;
  spec.activation = c.act;
  spec.flags = c.flags;
}

void TestModel::add(const std::string& name, std::vector<int64_t> shape, int kind) {
  std::mt19937 rng(cfg.seed * 7919u + static_cast<uint32_t>(tensors_.size()) * 104729u);
  size_t n = 1;
  for (auto d : shape) n *= static_cast<size_t>(d);
  const double in = static_cast<double>(shape.back());
  std::uniform_real_distribution<double> u(-1.0, 1.0);
  Tensor t;
  t.name = name;
  t.shape = std::move(shape);
  t.values.resize(n);
  for (auto& v : t.values) {
    double x = u(rng);
    switch (kind) {
      case kMatrix:
        x *= std::sqrt(3.0 / in);
        break;
      case kNorm:
        x = 1.0 + 0.2 * x;
        break;
      case kBias:
        x *= 0.2;
        break;
      default:
        break;
    }
    v = static_cast<float>(x);
  }
  WeightType wt = cfg.wt;
  if (wt == WeightType::Mixed) wt = static_cast<WeightType>(tensors_.size() % 3);
  switch (wt) {
    case WeightType::BF16:
      t.dtype = {kDLBfloat, 16, 1};
      for (auto& v : t.values) v = kernels::bf16_to_f32(kernels::f32_to_bf16(v));
      break;
    case WeightType::F16:
      t.dtype = {kDLFloat, 16, 1};
      for (auto& v : t.values) v = kernels::f16_to_f32(kernels::f32_to_f16(v));
      break;
    default:
      t.dtype = {kDLFloat, 32, 1};
  }
  index_[t.name] = tensors_.size();
  tensors_.push_back(std::move(t));
}

const Tensor& TestModel::tensor(const std::string& name) const {
  return tensors_.at(index_.at(name));
}
const std::vector<float>& TestModel::w(const std::string& name) const {
  return tensor(name).values;
}
const DLTensor* TestModel::dl(const std::string& name) const { return &dl_.at(index_.at(name)); }
void TestModel::set_reference_values(const std::string& name, std::vector<float> v) {
  tensors_.at(index_.at(name)).values = std::move(v);
}

// -------------------------------------------------------------- reference

namespace {

using Mat = std::vector<std::vector<double>>;

std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<float>& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double r = 1.0 / std::sqrt(ss / static_cast<double>(x.size()) + eps);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = x[i] * r * w[i];
  return out;
}

// y = W x (+ b), W [out, in] row-major
std::vector<double> linear(const std::vector<float>& W, const std::vector<double>& x, size_t out,
                           const std::vector<float>* b = nullptr) {
  std::vector<double> y(out);
  for (size_t o = 0; o < out; ++o) {
    double s = b ? (*b)[o] : 0.0;
    for (size_t i = 0; i < x.size(); ++i) s += static_cast<double>(W[o * x.size() + i]) * x[i];
    y[o] = s;
  }
  return y;
}

std::vector<double> inv_freq(const Config& c) {
  const int half = c.head_dim / 2;
  std::vector<double> f(half);
  for (int i = 0; i < half; ++i) f[i] = 1.0 / std::pow(double(c.theta), 2.0 * i / c.head_dim);
  if (c.scaling == HALO_ROPE_SCALING_LINEAR) {
    for (auto& v : f) v /= c.factor;
  } else if (c.scaling == HALO_ROPE_SCALING_LLAMA3) {
    // The loop form of HF's llama3 rope (transformers <= 4.42).
    const double low_wl = c.orig_max / double(c.low), high_wl = c.orig_max / double(c.high);
    for (auto& v : f) {
      const double wl = 2 * std::numbers::pi / v;
      if (wl < high_wl) {
        // high frequency: unchanged
      } else if (wl > low_wl) {
        v = v / c.factor;
      } else {
        const double smooth = (c.orig_max / wl - c.low) / (double(c.high) - c.low);
        v = (1 - smooth) * v / c.factor + smooth * v;
      }
    }
  }
  return f;
}

void rope(std::vector<double>& v, int heads, int hd, int pos, const std::vector<double>& f) {
  for (int h = 0; h < heads; ++h) {
    double* x = v.data() + h * hd;
    for (int i = 0; i < hd / 2; ++i) {
      const double a = pos * f[i], c = std::cos(a), s = std::sin(a);
      const double x0 = x[i], x1 = x[i + hd / 2];
      x[i] = x0 * c - x1 * s;
      x[i + hd / 2] = x1 * c + x0 * s;
    }
  }
}

}  // namespace

std::vector<std::vector<double>> reference_forward(const TestModel& m,
                                                   const std::vector<int>& tokens,
                                                   const std::vector<int>& positions) {
  const Config& c = m.cfg;
  const size_t n = tokens.size(), H = c.hidden, hd = c.head_dim;
  const int group = c.heads / c.kv_heads;
  const auto f = inv_freq(c);
  Mat x(n, std::vector<double>(H));
  const auto& E = m.w(HALO_WEIGHT_EMBED_TOKENS);
  for (size_t t = 0; t < n; ++t)
    for (size_t i = 0; i < H; ++i) x[t][i] = E[tokens[t] * H + i];
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = HALO_WEIGHT_LAYER_PREFIX + std::to_string(l) + ".";
    const bool bias = c.flags & HALO_MODEL_QKV_BIAS;
    Mat q(n), k(n), v(n);
    for (size_t t = 0; t < n; ++t) {
      const auto h = rmsnorm(x[t], m.w(p + HALO_WEIGHT_ATTN_NORM), c.eps);
      q[t] = linear(m.w(p + HALO_WEIGHT_Q_PROJ), h, c.heads * hd,
                    bias ? &m.w(p + HALO_WEIGHT_Q_BIAS) : nullptr);
      k[t] = linear(m.w(p + HALO_WEIGHT_K_PROJ), h, c.kv_heads * hd,
                    bias ? &m.w(p + HALO_WEIGHT_K_BIAS) : nullptr);
      v[t] = linear(m.w(p + HALO_WEIGHT_V_PROJ), h, c.kv_heads * hd,
                    bias ? &m.w(p + HALO_WEIGHT_V_BIAS) : nullptr);
      if (c.flags & HALO_MODEL_QK_NORM) {
        for (int hh = 0; hh < c.heads; ++hh) {
          std::vector<double> seg(q[t].begin() + hh * hd, q[t].begin() + (hh + 1) * hd);
          seg = rmsnorm(seg, m.w(p + HALO_WEIGHT_Q_NORM), c.eps);
          std::copy(seg.begin(), seg.end(), q[t].begin() + hh * hd);
        }
        for (int hh = 0; hh < c.kv_heads; ++hh) {
          std::vector<double> seg(k[t].begin() + hh * hd, k[t].begin() + (hh + 1) * hd);
          seg = rmsnorm(seg, m.w(p + HALO_WEIGHT_K_NORM), c.eps);
          std::copy(seg.begin(), seg.end(), k[t].begin() + hh * hd);
        }
      }
      rope(q[t], c.heads, hd, positions[t], f);
      rope(k[t], c.kv_heads, hd, positions[t], f);
    }
    for (size_t t = 0; t < n; ++t) {
      std::vector<double> att(c.heads * hd, 0.0);
      for (int hh = 0; hh < c.heads; ++hh) {
        const int kvh = hh / group;
        std::vector<double> s(t + 1);
        double mx = -1e300;
        for (size_t j = 0; j <= t; ++j) {
          double d = 0;
          for (size_t i = 0; i < hd; ++i) d += q[t][hh * hd + i] * k[j][kvh * hd + i];
          s[j] = d / std::sqrt(double(hd));
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (auto& e : s) sum += (e = std::exp(e - mx));
        for (size_t j = 0; j <= t; ++j)
          for (size_t i = 0; i < hd; ++i) att[hh * hd + i] += s[j] / sum * v[j][kvh * hd + i];
      }
      const auto o = linear(m.w(p + HALO_WEIGHT_O_PROJ), att, H);
      for (size_t i = 0; i < H; ++i) x[t][i] += o[i];
      const auto h = rmsnorm(x[t], m.w(p + HALO_WEIGHT_MLP_NORM), c.eps);
      auto g = linear(m.w(p + HALO_WEIGHT_GATE_PROJ), h, c.inter);
      const auto u = linear(m.w(p + HALO_WEIGHT_UP_PROJ), h, c.inter);
      for (int i = 0; i < c.inter; ++i) {
        const double z = g[i];
        const double a =
            c.act == HALO_ACTIVATION_SILU
                ? z / (1 + std::exp(-z))
                : 0.5 * z *
                      (1 + std::tanh(std::sqrt(2 / std::numbers::pi) * (z + 0.044715 * z * z * z)));
        g[i] = a * u[i];
      }
      const auto d = linear(m.w(p + HALO_WEIGHT_DOWN_PROJ), g, H);
      for (size_t i = 0; i < H; ++i) x[t][i] += d[i];
    }
  }
  const auto& lm = (c.flags & HALO_MODEL_TIED_EMBEDDINGS) ? m.w(HALO_WEIGHT_EMBED_TOKENS)
                                                          : m.w(HALO_WEIGHT_LM_HEAD);
  Mat logits(n);
  for (size_t t = 0; t < n; ++t)
    logits[t] = linear(lm, rmsnorm(x[t], m.w(HALO_WEIGHT_FINAL_NORM), c.eps), c.vocab);
  return logits;
}

// ----------------------------------------------------------------- runner

Runner::Runner(const TestModel& m, int threads, int bs, int nb, std::vector<halo_option> options,
               const std::vector<halo_named_tensor>* weights,
               const std::vector<halo_quantized_tensor>* quantized)
    : block_size(bs), num_blocks(nb), vocab(m.cfg.vocab) {
  device = open_device(threads);
  if (!device) return;
  limits.struct_size = sizeof limits;
  limits.block_size = bs;
  halo_prepare_args p{};
  p.struct_size = sizeof p;
  p.device = device.get();
  p.spec = &m.spec;
  p.weights = weights ? weights->data() : m.named.data();
  p.num_weights = weights ? weights->size() : m.named.size();
  p.quantized_weights = quantized ? quantized->data() : nullptr;
  p.num_quantized_weights = quantized ? quantized->size() : 0;
  p.limits = &limits;
  p.options = options.data();
  p.num_options = options.size();
  Status s = take(api()->prepare(&p));
  prepare_status = s;
  if (options.empty()) {
    EXPECT_EQ(s.code, HALO_STATUS_OK) << s.message;  // with options, the caller checks prepare_status
  }
  exec.reset(p.executable);
  if (!exec) return;
  halo_kv_cache_create_args k{};
  k.struct_size = sizeof k;
  k.executable = exec.get();
  k.num_blocks = nb;
  k.block_size = bs;
  s = take(api()->kv_cache_create(&k));
  EXPECT_EQ(s.code, HALO_STATUS_OK) << s.message;
  kv.reset(k.kv_cache);
}

Status run_step(Runner& r, const std::vector<StepSeq>& batch,
                std::vector<std::vector<float>>* logits, int max_blocks_per_seq) {
  std::vector<int32_t> tokens, positions, query_start{0}, context_lens, block_tables,
      logits_indices;
  std::vector<int64_t> slots;
  int mbps = max_blocks_per_seq;
  for (const auto& b : batch) mbps = std::max<int>(mbps, static_cast<int>(b.seq->blocks.size()));
  for (const auto& b : batch) {
    Seq& s = *b.seq;
    for (int j = 0; j < b.n_new; ++j) {
      const int idx = s.cached + j;
      tokens.push_back(s.tokens.at(idx));
      positions.push_back(idx);
      slots.push_back(int64_t{s.blocks.at(idx / r.block_size)} * r.block_size + idx % r.block_size);
      if (b.all_logits || j == b.n_new - 1)
        logits_indices.push_back(static_cast<int32_t>(tokens.size()) - 1);
    }
    query_start.push_back(static_cast<int32_t>(tokens.size()));
    context_lens.push_back(s.cached + b.n_new);
    for (int j = 0; j < mbps; ++j)
      block_tables.push_back(j < static_cast<int>(s.blocks.size()) ? s.blocks[j] : -1);
  }
  std::vector<float> out(logits_indices.size() * static_cast<size_t>(r.vocab));
  int64_t shape[2] = {static_cast<int64_t>(logits_indices.size()), r.vocab};
  DLTensor lt{};
  lt.data = out.data();
  lt.device = {kDLCPU, 0};
  lt.ndim = 2;
  lt.dtype = {kDLFloat, 32, 1};
  lt.shape = shape;
  halo_execute_args a{};
  a.struct_size = sizeof a;
  a.executable = r.exec.get();
  a.kv_cache = r.kv.get();
  a.num_tokens = static_cast<int32_t>(tokens.size());
  a.token_ids = tokens.data();
  a.positions = positions.data();
  a.slot_mapping = slots.data();
  a.num_seqs = static_cast<int32_t>(batch.size());
  a.query_start = query_start.data();
  a.context_lens = context_lens.data();
  a.block_tables = block_tables.data();
  a.max_blocks_per_seq = mbps;
  a.num_logits = static_cast<int32_t>(logits_indices.size());
  a.logits_indices = logits_indices.data();
  a.logits = &lt;
  Status st = take(api()->execute(&a));
  if (st.code != HALO_STATUS_OK) return st;
  for (const auto& b : batch) b.seq->cached += b.n_new;
  if (logits) {
    logits->clear();
    for (size_t i = 0; i < logits_indices.size(); ++i)
      logits->emplace_back(out.begin() + static_cast<std::ptrdiff_t>(i * r.vocab),
                           out.begin() + static_cast<std::ptrdiff_t>((i + 1) * r.vocab));
  }
  return st;
}

double rel_err(const std::vector<float>& a, const std::vector<double>& b) {
  double mx = 1.0, err = 0.0;
  for (double v : b) mx = std::max(mx, std::abs(v));
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) err = std::max(err, std::abs(a[i] - b[i]));
  if (a.size() != b.size()) return 1e30;
  return err / mx;
}

double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  return rel_err(a, std::vector<double>(b.begin(), b.end()));
}

std::vector<int> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(0, vocab - 1);
  std::vector<int> t(n);
  for (auto& v : t) v = d(rng);
  return t;
}

}  // namespace halo::test
