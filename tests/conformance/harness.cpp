#include "harness.h"

#include <dlfcn.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <numeric>
#include <random>
#include <sstream>

namespace conf {

Settings& settings() {
  static Settings s;
  return s;
}

// ---------------------------------------------------------------- plugins

namespace {

Lib load(const std::string& path) {
  Lib lib;
  lib.path = path;
  lib.handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib.handle == nullptr) {
    const char* e = dlerror();
    lib.load_error = "dlopen(" + path + "): " + (e ? e : "unknown error");
    return lib;
  }
  auto get = reinterpret_cast<halo_plugin_get_api_fn>(dlsym(lib.handle, HALO_PLUGIN_ENTRY_SYMBOL));
  if (get == nullptr) {
    lib.load_error = path + " does not export " HALO_PLUGIN_ENTRY_SYMBOL;
    return lib;
  }
  lib.api = get();
  if (lib.api == nullptr) lib.load_error = path + ": " HALO_PLUGIN_ENTRY_SYMBOL " returned NULL";
  return lib;  // never dlclose'd: the ABI allows unloading only when nothing is alive
}

}  // namespace

const Lib& plugin() {
  static const Lib lib = load(settings().plugin_path);
  return lib;
}

const Lib* reference() {
  static const Lib lib =
      settings().reference_path.empty() ? Lib{} : load(settings().reference_path);
  return lib.api ? &lib : nullptr;
}

bool testing_reference() {
  const Lib* r = reference();
  return r != nullptr && r->handle == plugin().handle;
}

const char* code_name(halo_status_code code) { return halo_status_name(code); }

std::string describe(const Status& s) {
  return std::string(code_name(s.code)) + (s.message.empty() ? "" : ": " + s.message);
}

Status take(const halo_plugin_api* api, halo_error* e) {
  Status s;
  if (e == nullptr) return s;
  s.code = api->error_code(e);
  const char* m = api->error_message(e);
  s.message = m ? m : "";
  api->error_destroy(e);
  if (s.code == HALO_STATUS_OK) {  // an error object must carry an error code
    s.code = static_cast<halo_status_code>(-1);
    s.message = "(error object with code OK) " + s.message;
  }
  return s;
}

int device_count(const Lib& lib) {
  halo_device_count_args a{};
  a.struct_size = sizeof a;
  const Status s = take(lib.api, lib.api->device_count(&a));
  return s.ok() ? a.count : -1;
}

halo_device_properties properties(const Lib& lib, int index) {
  halo_device_properties p{};
  p.struct_size = sizeof p;
  halo_device_get_properties_args a{};
  a.struct_size = sizeof a;
  a.device_index = index;
  a.properties = &p;
  const Status s = take(lib.api, lib.api->device_get_properties(&a));
  if (!s.ok()) p.struct_size = 0;  // marks failure
  return p;
}

namespace {
std::vector<halo_option> c_options(const OptionList& o) {
  std::vector<halo_option> out;
  for (const auto& [k, v] : o) out.push_back({k.c_str(), v.c_str()});
  return out;
}
}  // namespace

DevicePtr open_device(const Lib& lib, int index, const OptionList& options, Status* status) {
  const auto opts = c_options(options);
  halo_device_open_args a{};
  a.struct_size = sizeof a;
  a.device_index = index;
  a.options = opts.empty() ? nullptr : opts.data();
  a.num_options = opts.size();
  Status s = take(lib.api, lib.api->device_open(&a));
  if (status) *status = s;
  if (!s.ok()) return nullptr;
  const halo_plugin_api* api = lib.api;
  return DevicePtr(a.device, [api](halo_device* d) { api->device_destroy(d); });
}

// --------------------------------------------------------------- isolation

Outcome isolated(const std::function<Status()>& call, bool also_in_process) {
  Outcome out;
  int fds[2];
  if (pipe(fds) != 0) {
    out.crashed = true;
    out.crash = "pipe() failed";
    return out;
  }
  fflush(nullptr);
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    alarm(30);  // a hang is a failure too
    std::string msg;
    try {
      const Status s = call();
      msg = std::to_string(static_cast<int>(s.code)) + "\n" + s.message;
    } catch (...) {
      msg = "EXCEPTION\n";
    }
    size_t off = 0;
    while (off < msg.size()) {
      const ssize_t n = write(fds[1], msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += static_cast<size_t>(n);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  char buf[4096];
  for (ssize_t n; (n = read(fds[0], buf, sizeof buf)) > 0;) got.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int wstatus = 0;
  waitpid(pid, &wstatus, 0);
  if (WIFSIGNALED(wstatus)) {
    const int sig = WTERMSIG(wstatus);
    out.crashed = true;
    out.crash = std::string("the call crashed the process with signal ") + std::to_string(sig) +
                " (" + strsignal(sig) +
                (sig == SIGABRT ? "; an exception reaching a noexcept boundary aborts" : "") +
                (sig == SIGALRM ? "; it hung for 30 s" : "") + ")";
    return out;
  }
  if (!WIFEXITED(wstatus) || WEXITSTATUS(wstatus) != 0 || got.empty()) {
    out.crashed = true;
    out.crash =
        "the call ended the process (exit status " + std::to_string(WEXITSTATUS(wstatus)) + ")";
    return out;
  }
  if (got.rfind("EXCEPTION", 0) == 0) {
    out.threw = true;
    return out;
  }
  const size_t nl = got.find('\n');
  out.status.code = static_cast<halo_status_code>(std::stoi(got.substr(0, nl)));
  out.status.message = got.substr(nl + 1);
  if (also_in_process) {
    try {
      out.status = call();
    } catch (...) {
      out.threw = true;
    }
  }
  return out;
}

// ------------------------------------------------------------------ models

const char* dtype_name(WeightDtype d) {
  switch (d) {
    case WeightDtype::F32:
      return "fp32";
    case WeightDtype::BF16:
      return "bf16";
    case WeightDtype::F16:
      return "fp16";
    case WeightDtype::Mixed:
      return "mixed";
  }
  return "?";
}

WeightDtype preferred_dtype() {
  const std::string& forced = settings().model_dtype;
  if (forced == "fp32") return WeightDtype::F32;
  if (forced == "bf16") return WeightDtype::BF16;
  if (forced == "fp16") return WeightDtype::F16;
  const uint32_t caps = properties(plugin(), settings().device).capabilities;
  if (caps & HALO_CAP_DTYPE_FP32) return WeightDtype::F32;
  if (caps & HALO_CAP_DTYPE_BF16) return WeightDtype::BF16;
  if (caps & HALO_CAP_DTYPE_FP16) return WeightDtype::F16;
  return WeightDtype::F32;
}

bool uses_compile() {
  const halo_plugin_api* api = plugin().api;
  if (api == nullptr || api->struct_size < HALO_STRUCT_SIZE(halo_plugin_api, compile) ||
      api->compile == nullptr)
    return false;
  return !settings().compile_options.empty() ||
         (properties(plugin(), settings().device).capabilities & HALO_CAP_STATIC_SHAPES) != 0;
}

uint32_t dtype_cap(WeightDtype d) {
  switch (d) {
    case WeightDtype::F32:
      return HALO_CAP_DTYPE_FP32;
    case WeightDtype::BF16:
      return HALO_CAP_DTYPE_BF16;
    case WeightDtype::F16:
      return HALO_CAP_DTYPE_FP16;
    case WeightDtype::Mixed:
      return HALO_CAP_DTYPE_FP32 | HALO_CAP_DTYPE_BF16 | HALO_CAP_DTYPE_FP16;
  }
  return 0;
}

std::vector<ModelConfig> model_families() {
  std::vector<ModelConfig> out;
  ModelConfig llama;  // GQA 4 heads over 2 kv heads
  llama.family = "llama";
  out.push_back(llama);
  ModelConfig mistral = llama;  // multi-query: one kv head
  mistral.family = "mistral";
  mistral.kv_heads = 1;
  mistral.theta = 1e6f;
  mistral.seed = 2;
  out.push_back(mistral);
  ModelConfig llama3 = llama;
  llama3.family = "llama3";
  llama3.scaling = HALO_ROPE_SCALING_LLAMA3;
  llama3.factor = 8.f;
  llama3.low = 1.f;
  llama3.high = 4.f;
  llama3.orig_max = 16;
  llama3.theta = 500000.f;
  llama3.seed = 3;
  out.push_back(llama3);
  ModelConfig qwen2 = llama;
  qwen2.family = "qwen2";
  qwen2.flags = HALO_MODEL_QKV_BIAS | HALO_MODEL_TIED_EMBEDDINGS;
  qwen2.eps = 1e-6f;
  qwen2.seed = 4;
  out.push_back(qwen2);
  ModelConfig qwen3 = llama;
  qwen3.family = "qwen3";
  qwen3.flags = HALO_MODEL_QK_NORM;
  qwen3.head_dim = 16;  // heads * head_dim = 64 != hidden = 48
  qwen3.seed = 5;
  out.push_back(qwen3);
  ModelConfig gelu = llama;
  gelu.family = "gelu";
  gelu.act = HALO_ACTIVATION_GELU_TANH;
  gelu.scaling = HALO_ROPE_SCALING_LINEAR;
  gelu.factor = 2.f;
  gelu.heads = 3;
  gelu.kv_heads = 3;
  gelu.head_dim = 16;
  gelu.seed = 6;
  out.push_back(gelu);
  return out;
}

std::string tp_cannot_split(const ModelConfig& c) {
  for (const auto& [k, v] : settings().compile_options) {
    if (k != "tensor_parallel_size" && k != settings().tp_option) continue;
    const int tp = std::atoi(v.c_str());
    if (tp > 1 && c.heads % tp != 0)
      return c.family + " has " + std::to_string(c.heads) + " query heads, not divisible by tensor_parallel_size=" +
             std::to_string(tp);
  }
  return "";
}

ModelConfig family(const std::string& name) {
  for (const auto& c : model_families())
    if (c.family == name) return c;
  return model_families().front();
}

namespace {

uint16_t to_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even (inputs are finite)
  return static_cast<uint16_t>(u >> 16);
}

float from_bf16(uint16_t h) {
  const uint32_t u = uint32_t{h} << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

uint16_t to_f16(float f) {  // inputs are small finite numbers; round to nearest even
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint32_t sign = (u >> 16) & 0x8000u;
  const float a = std::fabs(f);
  if (a < 6.103515625e-05f) {  // subnormal
    const uint32_t m = static_cast<uint32_t>(std::nearbyint(a * 16777216.0f));
    return static_cast<uint16_t>(sign | m);
  }
  int e;
  const float m = std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
  uint32_t mant = static_cast<uint32_t>(std::nearbyint((m * 2.f - 1.f) * 1024.f));
  int exp = e - 1 + 15;
  if (mant == 1024) {
    mant = 0;
    ++exp;
  }
  return static_cast<uint16_t>(sign | (static_cast<uint32_t>(exp) << 10) | mant);
}

float from_f16(uint16_t h) {
  const int e = (h >> 10) & 31, m = h & 1023;
  const float v = e == 0 ? std::ldexp(static_cast<float>(m), -24)
                         : std::ldexp(static_cast<float>(1024 + m), e - 25);
  return (h & 0x8000u) ? -v : v;
}

// Stores v as a scale of dtype t at p; returns the value stored.
float put_scale(DLDataType t, float v, uint8_t* p) {
  if (t.bits == 32) {
    std::memcpy(p, &v, 4);
    return v;
  }
  const uint16_t h = t.code == kDLBfloat ? to_bf16(v) : to_f16(v);
  std::memcpy(p, &h, 2);
  return t.code == kDLBfloat ? from_bf16(h) : from_f16(h);
}

DLTensor host_tensor(void* data, DLDataType dt, std::vector<int64_t>& shape) {
  DLTensor d{};
  d.data = data;
  d.device = {kDLCPU, 0};
  d.ndim = static_cast<int>(shape.size());
  d.dtype = dt;
  d.shape = shape.data();
  return d;
}

}  // namespace

uint32_t QuantScheme::types() const {
  uint32_t t = HALO_DTYPE_BIT(format.type);
  for (const auto& [suffix, f] : overrides)
    if (f) t |= HALO_DTYPE_BIT(f->type);
  return t;
}

std::optional<QuantFormat> QuantScheme::format_for(const std::string& weight) const {
  for (const auto& [suffix, f] : overrides)
    if (weight.ends_with(suffix)) return f;
  return format;
}

std::vector<QuantScheme> quant_schemes() {
  const DLDataType f32{kDLFloat, 32, 1}, f16{kDLFloat, 16, 1}, bf16{kDLBfloat, 16, 1};
  std::vector<QuantScheme> out;
  out.push_back({"int8_channel_f32", {HALO_QUANT_INT8, 0, false, f32}, {}});
  out.push_back({"int8_g32_f16", {HALO_QUANT_INT8, 32, false, f16}, {}});
  out.push_back(
      {"int8_g48_f32", {HALO_QUANT_INT8, 48, false, f32}, {}});  // a multiple of 16, not of 32
  out.push_back({"uint4_g32_f16", {HALO_QUANT_UINT4, 32, true, f16}, {}});
  out.push_back({"uint4_g32_f32", {HALO_QUANT_UINT4, 32, true, f32}, {}});
  out.push_back({"uint4_g32_bf16", {HALO_QUANT_UINT4, 32, true, bf16}, {}});
  out.push_back({"mixed",
                 {HALO_QUANT_UINT4, 32, true, f16},
                 {{HALO_WEIGHT_V_PROJ, QuantFormat{HALO_QUANT_INT8, 16, false, f16}},
                  {HALO_WEIGHT_DOWN_PROJ, QuantFormat{HALO_QUANT_INT8, 0, false, f32}},
                  {HALO_WEIGHT_UP_PROJ, std::nullopt},
                  {HALO_WEIGHT_LM_HEAD, QuantFormat{HALO_QUANT_INT8, 32, false, f16}}}});
  return out;
}

// Quantizes w [rows, K] with f into a new tensor named `name` and replaces w
// by its dequantized values, computed as the ABI defines them in fp32:
// scale * q + offset, with scale and offset as stored.
void Model::quantize(const std::string& name, const QuantFormat& f, std::vector<float>& w,
                     int64_t rows, int64_t K) {
  auto q = std::make_unique<Q>();
  q->name = name;
  const bool u4 = f.type == HALO_QUANT_UINT4;
  const int64_t G = f.group > 0 ? f.group : K, ng = K / G;
  const size_t es = f.scale_dtype.bits / 8;
  const int qmin = u4 ? 0 : (f.asymmetric ? -128 : -127), qmax = u4 ? 15 : 127;
  q->values.assign(static_cast<size_t>(rows * (u4 ? K / 2 : K)), 0);
  q->scales.assign(static_cast<size_t>(rows * ng) * es, 0);
  if (f.asymmetric) q->offsets.assign(q->scales.size(), 0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t g = 0; g < ng; ++g) {
      float* x = w.data() + r * K + g * G;
      const auto [lo, hi] = std::minmax_element(x, x + G);
      float amax = std::max(std::fabs(*lo), std::fabs(*hi));
      float sc = f.asymmetric ? (*hi - *lo) / float(qmax - qmin) : amax / float(qmax);
      const size_t at = static_cast<size_t>(r * ng + g) * es;
      sc = put_scale(f.scale_dtype, sc, &q->scales[at]);
      const float off =
          f.asymmetric ? put_scale(f.scale_dtype, *lo - float(qmin) * sc, &q->offsets[at]) : 0.f;
      for (int64_t k = 0; k < G; ++k) {
        const float v = sc > 0 ? std::nearbyint((x[k] - off) / sc) : 0.f;
        const int qi = std::clamp(static_cast<int>(v), qmin, qmax);
        const int64_t e = r * K + g * G + k;
        if (u4)
          q->values[static_cast<size_t>(e / 2)] |= static_cast<uint8_t>(qi << (e % 2 ? 4 : 0));
        else
          q->values[static_cast<size_t>(e)] = static_cast<uint8_t>(static_cast<int8_t>(qi));
        x[k] = sc * static_cast<float>(qi) + off;
      }
    }
  q->vshape = {rows, u4 ? K / 2 : K};
  q->sshape = {rows, ng};
  q->v = host_tensor(q->values.data(), u4 ? DLDataType{kDLUInt, 8, 1} : DLDataType{kDLInt, 8, 1},
                     q->vshape);
  q->s = host_tensor(q->scales.data(), f.scale_dtype, q->sshape);
  q->o = host_tensor(q->offsets.data(), f.scale_dtype, q->sshape);
  halo_quantized_tensor t{};
  t.type = f.type;
  t.group_size = static_cast<int32_t>(G);
  t.rows = rows;
  t.cols = K;
  t.values = &q->v;
  t.scales = &q->s;
  t.offsets = f.asymmetric ? &q->o : nullptr;
  quantized.push_back(t);  // name set once q_ stops moving (below)
  q_.push_back(std::move(q));
}

const halo_quantized_tensor* Model::find_quantized(const std::string& name) const {
  for (const auto& t : quantized)
    if (name == t.name) return &t;
  return nullptr;
}

std::vector<float> Model::weight_f32(const std::string& name) const {
  for (const auto& w : weights) {
    if (name != w.name) continue;
    const DLTensor& t = *w.tensor;
    size_t n = 1;
    for (int d = 0; d < t.ndim; ++d) n *= static_cast<size_t>(t.shape[d]);
    const char* p = static_cast<const char*>(t.data) + t.byte_offset;
    std::vector<float> v(n);
    for (size_t j = 0; j < n; ++j) {
      if (t.dtype.bits == 32) {
        std::memcpy(&v[j], p + 4 * j, 4);
      } else {
        uint16_t h;
        std::memcpy(&h, p + 2 * j, 2);
        v[j] = t.dtype.code == kDLBfloat ? from_bf16(h) : from_f16(h);
      }
    }
    return v;
  }
  return {};
}

Model::Model(const ModelConfig& c, const QuantScheme* quant) : cfg(c) {
  const int64_t V = c.vocab, H = c.hidden, I = c.inter, NQ = int64_t{c.heads} * c.head_dim,
                NKV = int64_t{c.kv_heads} * c.head_dim;
  enum Kind { kMatrix, kNorm, kBias, kEmbed };
  std::vector<std::pair<Kind, std::vector<float>>> values;
  std::mt19937 rng(c.seed * 2654435761u + 17u);
  auto add = [&](const std::string& name, std::vector<int64_t> shape, Kind kind) {
    size_t n = 1;
    for (auto d : shape) n *= static_cast<size_t>(d);
    std::uniform_real_distribution<double> u(-1.0, 1.0);
    std::vector<float> v(n);
    const double in = static_cast<double>(shape.back());
    for (auto& x : v) {
      double r = u(rng);
      if (kind == kMatrix) r *= std::sqrt(3.0 / in);
      if (kind == kNorm) r = 1.0 + 0.2 * r;
      if (kind == kBias) r *= 0.2;
      x = static_cast<float>(r);
    }
    T t;
    t.name = name;
    t.shape = std::move(shape);
    WeightDtype d = c.dtype;
    if (d == WeightDtype::Mixed) d = static_cast<WeightDtype>(tensors_.size() % 3);
    const std::optional<QuantFormat> qf =
        quant && kind == kMatrix ? quant->format_for(t.name) : std::nullopt;
    if (qf) {  // the reference gets the dequantized values exactly: fp32
      quantize(t.name, *qf, v, t.shape[0], t.shape[1]);
      d = WeightDtype::F32;
    }
    t.dtype = d == WeightDtype::F32    ? DLDataType{kDLFloat, 32, 1}
              : d == WeightDtype::BF16 ? DLDataType{kDLBfloat, 16, 1}
                                       : DLDataType{kDLFloat, 16, 1};
    tensors_.push_back(std::move(t));
    values.emplace_back(kind, std::move(v));
  };
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

  size_t total = 0;
  for (size_t i = 0; i < tensors_.size(); ++i) {
    tensors_[i].offset = total;
    total += (values[i].second.size() * tensors_[i].dtype.bits / 8 + 63) / 64 * 64 + 64;
  }
  arena_.assign(total / 8 + 1, 0);
  char* base = reinterpret_cast<char*>(arena_.data());
  dl_.resize(tensors_.size());
  for (size_t i = 0; i < tensors_.size(); ++i) {
    T& t = tensors_[i];
    const auto& v = values[i].second;
    for (size_t j = 0; j < v.size(); ++j) {
      if (t.dtype.bits == 32) {
        std::memcpy(base + t.offset + 4 * j, &v[j], 4);
      } else {
        const uint16_t h = t.dtype.code == kDLBfloat ? to_bf16(v[j]) : to_f16(v[j]);
        std::memcpy(base + t.offset + 2 * j, &h, 2);
      }
    }
    DLTensor& d = dl_[i];
    d.data = base;
    d.byte_offset = t.offset;  // every weight is a view into one arena, as with fused checkpoints
    d.device = {kDLCPU, 0};
    d.ndim = static_cast<int>(t.shape.size());
    d.dtype = t.dtype;
    d.shape = t.shape.data();
    d.strides = nullptr;
  }
  for (size_t i = 0; i < tensors_.size(); ++i)
    weights.push_back({tensors_[i].name.c_str(), &dl_[i]});
  for (size_t i = 0; i < q_.size(); ++i) quantized[i].name = q_[i]->name.c_str();
  for (const auto& w : weights)
    if (find_quantized(w.name) == nullptr) plain.push_back(w);

  spec.struct_size = sizeof spec;
  spec.architecture = "ConformanceForCausalLM";
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

// ----------------------------------------------------------------- sessions

std::optional<Session> make_session(const Lib& lib, int index, const Model& m,
                                    const SessionOptions& o, Status* status) {
  Status dummy;
  Status& st = status ? *status : dummy;
  const bool under_test = &lib == &plugin();
  OptionList dev_opts = o.device_options, prep_opts = o.prepare_options;
  if (o.use_settings_options && under_test) {
    dev_opts.insert(dev_opts.end(), settings().device_options.begin(),
                    settings().device_options.end());
    prep_opts.insert(prep_opts.end(), settings().prepare_options.begin(),
                     settings().prepare_options.end());
  }
  // The CPU plugin serves as the reference through its reference kernels
  // (its prepare option kernels=reference), passed to the reference only:
  // plugins refuse options they do not take (ABI v1.3).
  if (reference() != nullptr && &lib == reference()) prep_opts.push_back({"kernels", "reference"});
  Session s;
  s.lib = &lib;
  s.vocab = m.cfg.vocab;
  s.device_caps = properties(lib, index).capabilities;
  s.device = open_device(lib, index, dev_opts, &st);
  if (!s.device) {
    st.message = "device_open: " + st.message;
    return std::nullopt;
  }
  const std::vector<halo_named_tensor>& weights = o.weights ? *o.weights : m.weights;
  // A static-shape device runs models compiled ahead of time: compile into a
  // scratch directory (once per model and options) and prepare from it.
  halo_model_spec spec = m.spec;
  bool compiled = false;
  if (under_test && uses_compile()) {
    OptionList comp = o.compile_options;
    if (o.use_settings_options)
      comp.insert(comp.end(), settings().compile_options.begin(), settings().compile_options.end());
    auto has = [&](const char* k) {
      return std::any_of(comp.begin(), comp.end(), [&](const auto& kv) { return kv.first == k; });
    };
    if (!has("batch_size") && o.proposal.max_num_seqs > 0)
      comp.emplace_back("batch_size", std::to_string(o.proposal.max_num_seqs));
    if (!has("max_seq_len") && o.proposal.max_model_len > 0)
      comp.emplace_back("max_seq_len", std::to_string(o.proposal.max_model_len));
    if (!has("num_speculative_tokens") && o.proposal.num_speculative_tokens > 0)
      comp.emplace_back("num_speculative_tokens", std::to_string(o.proposal.num_speculative_tokens));
    // Keyed by content: models come and go at the same addresses.
    const ModelConfig& mc = m.cfg;
    std::string key = mc.family + "|" + dtype_name(mc.dtype) + "|" + std::to_string(mc.seed) + "|" +
                      std::to_string(mc.vocab) + "|" + std::to_string(mc.heads) + "|" +
                      std::to_string(mc.kv_heads) + "|" + std::to_string(mc.head_dim) + "|" +
                      std::to_string(mc.flags) + "|" + std::to_string(index) + "|" +
                      std::to_string(weights.size()) + "|" +
                      std::to_string(o.quantized ? o.quantized->size() : 0);
    for (const auto& [k, v] : comp) key += "|" + k + "=" + v;
    if (o.quantized)
      for (const auto& q : *o.quantized)
        key += "|" + std::string(q.name) + ":" + std::to_string(q.type) + "/" +
               std::to_string(q.group_size) + "/" + std::to_string(q.scales->dtype.bits) +
               (q.offsets ? "a" : "s");
    static std::map<std::string, std::string> cache;  // key -> compiled directory
    static const std::string& root = []() -> const std::string& {
      static std::string r;
      static pid_t owner = getpid();
      char tmpl[] = "/tmp/halo-conformance-XXXXXX";
      const char* d = mkdtemp(tmpl);
      r = d ? d : "/tmp/halo-conformance";
      std::atexit([] {  // the process that made it removes it (forked children _exit)
        std::error_code ec;
        if (getpid() == owner) std::filesystem::remove_all(r, ec);
      });
      return r;
    }();
    auto it = cache.find(key);
    if (it == cache.end()) {
      const std::string dir = root + "/model" + std::to_string(cache.size());
      const auto copts = c_options(comp);
      std::vector<char> summary(4096, 0);
      halo_compile_args ca{};
      ca.struct_size = sizeof ca;
      ca.device_index = index;
      ca.spec = &m.spec;
      ca.weights = weights.data();
      ca.num_weights = weights.size();
      ca.quantized_weights = o.quantized ? o.quantized->data() : nullptr;
      ca.num_quantized_weights = o.quantized ? o.quantized->size() : 0;
      ca.options = copts.empty() ? nullptr : copts.data();
      ca.num_options = copts.size();
      ca.out_dir = dir.c_str();
      ca.summary = summary.data();
      ca.summary_capacity = summary.size();
      st = take(lib.api, lib.api->compile(&ca));
      if (!st.ok()) {
        st.message = "compile: " + st.message;
        return std::nullopt;
      }
      it = cache.emplace(key, dir).first;
    }
    spec.compiled_model_dir = it->second.c_str();
    spec.compiled_target = lib.api->plugin_name;
    compiled = true;
  }
  const auto copts = c_options(prep_opts);
  // An older caller's limits end at limits_size: fill the rest with a pattern
  // the plugin must leave alone.
  struct {
    halo_limits lim;
    unsigned char tail[16];
  } mem;
  std::memset(&mem, 0, sizeof mem);
  const size_t lsize = o.limits_size ? std::min(o.limits_size, sizeof(halo_limits)) : sizeof(halo_limits);
  std::memset(reinterpret_cast<unsigned char*>(&mem) + lsize, 0xEE, sizeof mem - lsize);
  halo_limits& lim = mem.lim;
  lim.struct_size = lsize;
  lim.max_num_seqs = o.proposal.max_num_seqs;
  lim.max_model_len = o.proposal.max_model_len;
  lim.max_num_batched_tokens = o.proposal.max_num_batched_tokens;
  lim.block_size = o.proposal.block_size;
  if (lsize >= HALO_STRUCT_SIZE(halo_limits, num_speculative_tokens))
    lim.num_speculative_tokens = o.proposal.num_speculative_tokens;
  if (lsize >= HALO_STRUCT_SIZE(halo_limits, max_lora_rank)) {
    lim.max_loras = o.proposal.max_loras;
    lim.max_lora_rank = o.proposal.max_lora_rank;
  }
  halo_prepare_args a{};
  a.struct_size = o.prepare_args_size ? o.prepare_args_size : sizeof a;
  a.device = s.device.get();
  a.spec = &spec;
  a.weights = compiled ? nullptr : weights.data();
  a.num_weights = compiled ? 0 : weights.size();
  if (o.quantized && !compiled) {
    a.quantized_weights = o.quantized->data();
    a.num_quantized_weights = o.quantized->size();
  }
  a.limits = &lim;
  a.options = copts.empty() ? nullptr : copts.data();
  a.num_options = copts.size();
  st = take(lib.api, lib.api->prepare(&a));
  if (!st.ok()) {
    st.message = "prepare: " + st.message;
    return std::nullopt;
  }
  const halo_plugin_api* api = lib.api;
  s.exec = ExecPtr(a.executable, [api](halo_executable* e) { api->executable_destroy(e); });
  const unsigned char* raw = reinterpret_cast<const unsigned char*>(&mem);
  for (size_t i = lsize; i < sizeof mem; ++i)
    if (raw[i] != 0xEE) {
      st.code = HALO_STATUS_INTERNAL;
      st.message = "prepare wrote byte " + std::to_string(i) + " of halo_limits, past the caller's struct_size=" +
                   std::to_string(lsize);
      return std::nullopt;
    }
  s.limits = lim;
  if (lsize < sizeof(halo_limits))  // what an older caller knows of the answer
    std::memset(reinterpret_cast<unsigned char*>(&s.limits) + lsize, 0, sizeof(halo_limits) - lsize);
  if (lim.block_size <= 0 || lim.max_model_len <= 0 || lim.max_num_seqs <= 0 ||
      lim.max_num_batched_tokens <= 0) {
    st.code = HALO_STATUS_INTERNAL;
    st.message = "prepare agreed non-positive limits";
    return std::nullopt;
  }
  int blocks = o.num_blocks;
  if (blocks == 0) {
    const int per_seq = (std::min(lim.max_model_len, 160) + lim.block_size - 1) / lim.block_size;
    // A static-shape device may hold exactly its compiled batch of sequences.
    blocks = (s.device_caps & HALO_CAP_STATIC_SHAPES)
                 ? std::min(lim.max_num_seqs, 16) * per_seq
                 : std::min(lim.max_num_seqs, 16) * per_seq * 2 + 4;
  }
  st = new_kv_cache(s, blocks);
  if (!st.ok()) {
    st.message = "kv_cache_create: " + st.message;
    return std::nullopt;
  }
  return s;
}

Status new_kv_cache(Session& s, int num_blocks) {
  halo_kv_cache_create_args a{};
  a.struct_size = sizeof a;
  a.executable = s.exec.get();
  a.num_blocks = num_blocks;
  a.block_size = s.limits.block_size;
  Status st = take(s.lib->api, s.lib->api->kv_cache_create(&a));
  if (!st.ok()) return st;
  const halo_plugin_api* api = s.lib->api;
  s.kv = KvPtr(a.kv_cache, [api](halo_kv_cache* k) { api->kv_cache_destroy(k); });
  s.num_blocks = num_blocks;
  return st;
}

Status run_step(Session& s, const std::vector<Chunk>& batch, std::vector<std::vector<float>>* rows,
                const StepExtras& extras) {
  const int bs = s.limits.block_size;
  std::vector<int32_t> tokens, positions, query_start{0}, context_lens, logits_indices;
  std::vector<int64_t> slots;
  int max_blocks = 1;
  for (const Chunk& c : batch)
    max_blocks = std::max(max_blocks, (c.seq->cached + c.n_new + bs - 1) / bs);
  max_blocks += extras.extra_blocks_per_seq;
  std::vector<int32_t> tables(batch.size() * static_cast<size_t>(max_blocks), -1);
  for (size_t i = 0; i < batch.size(); ++i) {
    const Chunk& c = batch[i];
    const Seq& q = *c.seq;
    for (int j = 0; j < c.n_new; ++j) {
      const int idx = q.cached + j;
      tokens.push_back(q.tokens.at(static_cast<size_t>(idx)));
      positions.push_back(idx);
      const int32_t block = q.blocks.at(static_cast<size_t>(idx / bs));
      slots.push_back(int64_t{block} * bs + idx % bs);
      if (c.all_logits || (c.logits && j == c.n_new - 1))
        logits_indices.push_back(static_cast<int32_t>(tokens.size() - 1));
    }
    query_start.push_back(static_cast<int32_t>(tokens.size()));
    context_lens.push_back(q.cached + c.n_new);
    const int need = (q.cached + c.n_new + bs - 1) / bs;
    for (int j = 0; j < need; ++j)
      tables[i * static_cast<size_t>(max_blocks) + static_cast<size_t>(j)] =
          q.blocks.at(static_cast<size_t>(j));
  }
  std::vector<int32_t> order(logits_indices.size());
  std::iota(order.begin(), order.end(), 0);
  if (!extras.logits_order.empty()) order = extras.logits_order;
  std::vector<int32_t> asked;
  for (int32_t o : order) asked.push_back(logits_indices.at(static_cast<size_t>(o)));
  std::vector<float> out(asked.size() * static_cast<size_t>(s.vocab), NAN);
  std::vector<int64_t> shape{static_cast<int64_t>(asked.size()), s.vocab};
  DLTensor lg = host_tensor(out.data(), {kDLFloat, 32, 1}, shape);
  const auto hsize = static_cast<size_t>(extras.hidden_size);
  std::vector<float> hid(asked.size() * hsize, NAN);
  std::vector<int64_t> hshape{static_cast<int64_t>(asked.size()), extras.hidden_size};
  DLTensor hs = host_tensor(hid.data(), {kDLFloat, 32, 1}, hshape);
  halo_execute_args a{};
  a.struct_size = sizeof a;
  a.executable = s.exec.get();
  a.kv_cache = s.kv.get();
  a.num_tokens = static_cast<int32_t>(tokens.size());
  a.token_ids = tokens.data();
  a.positions = positions.data();
  a.slot_mapping = slots.data();
  a.num_seqs = static_cast<int32_t>(batch.size());
  a.query_start = query_start.data();
  a.context_lens = context_lens.data();
  a.block_tables = tables.data();
  a.max_blocks_per_seq = max_blocks;
  a.num_logits = static_cast<int32_t>(asked.size());
  a.logits_indices = asked.empty() ? nullptr : asked.data();
  a.logits = asked.empty() ? nullptr : &lg;
  a.hidden_states = hsize > 0 && !asked.empty() ? &hs : nullptr;
  a.lora_slots = extras.lora_slots ? extras.lora_slots->data() : nullptr;
  Status st = take(s.lib->api, s.lib->api->execute(&a));
  if (!st.ok()) return st;
  for (const Chunk& c : batch) c.seq->cached += c.n_new;
  // Back to natural order.
  auto unpermute = [&](const std::vector<float>& flat, size_t width, std::vector<std::vector<float>>& to) {
    to.assign(asked.size(), {});
    for (size_t i = 0; i < order.size(); ++i)
      to[static_cast<size_t>(order[i])].assign(flat.begin() + static_cast<ptrdiff_t>(i * width),
                                              flat.begin() + static_cast<ptrdiff_t>((i + 1) * width));
  };
  if (rows) unpermute(out, static_cast<size_t>(s.vocab), *rows);
  if (extras.hidden) unpermute(hid, hsize, *extras.hidden);
  return st;
}

BlockPool::BlockPool(int num_blocks, uint32_t shuffle_seed) {
  for (int i = num_blocks - 1; i >= 0; --i)
    free_.push_back(i);  // take() pops from the back: 0, 1, 2, ...
  if (shuffle_seed != 0) {
    std::mt19937 rng(shuffle_seed);
    std::shuffle(free_.begin(), free_.end(), rng);
  }
}

int32_t BlockPool::take() {
  if (free_.empty()) return -1;
  const int32_t b = free_.back();
  free_.pop_back();
  return b;
}

void BlockPool::give(int32_t b) { free_.push_back(b); }

bool BlockPool::reserve(Seq& seq, int tokens, int block_size) {
  while (static_cast<int>(seq.blocks.size()) * block_size < tokens) {
    const int32_t b = take();
    if (b < 0) return false;
    seq.blocks.push_back(b);
  }
  return true;
}

int argmax(const std::vector<float>& row) {
  return static_cast<int>(std::max_element(row.begin(), row.end()) - row.begin());
}

WorkloadResult run_workload(Session& s, const Workload& w) {
  WorkloadResult r;
  const halo_limits& L = s.limits;
  const bool chunked = (L.capabilities & HALO_CAP_CHUNKED_PREFILL) != 0;
  const bool mixed = w.mixed && (L.capabilities & HALO_CAP_MIXED_BATCH) != 0;
  const size_t n = w.prompts.size();
  std::vector<Seq> seqs(n);
  for (size_t i = 0; i < n; ++i) seqs[i].tokens = w.prompts[i];
  r.rows.resize(n);
  r.argmax.resize(n);
  BlockPool pool(s.num_blocks, w.shuffle_seed);
  auto done = [&](size_t i) { return static_cast<int>(r.rows[i].size()) >= w.outputs; };
  auto prefilling = [&](size_t i) {
    return seqs[i].cached < static_cast<int>(w.prompts[i].size());
  };
  std::vector<size_t> running;  // admitted sequences, at most max_num_seqs
  size_t next = 0;
  for (int guard = 0; guard < 100000; ++guard) {
    // Retire finished sequences and free their blocks; admit new ones.
    for (auto it = running.begin(); it != running.end();) {
      if (done(*it)) {
        for (int32_t b : seqs[*it].blocks) pool.give(b);
        seqs[*it].blocks.clear();
        it = running.erase(it);
      } else {
        ++it;
      }
    }
    while (next < n && static_cast<int>(running.size()) < L.max_num_seqs) running.push_back(next++);
    if (running.empty()) break;
    const bool any_prefill = std::any_of(running.begin(), running.end(), prefilling);
    std::vector<Chunk> batch;
    int budget = L.max_num_batched_tokens;
    for (size_t i : running) {  // decodes first, as vLLM schedules them
      if (prefilling(i) || budget < 1 || (!mixed && any_prefill)) continue;
      batch.push_back({&seqs[i], 1});
      budget -= 1;
    }
    // A static-shape device without mixed batches runs one compiled prefill at a time.
    const bool one_prefill = !mixed && (s.device_caps & HALO_CAP_STATIC_SHAPES) != 0;
    int prefills = 0;
    for (size_t i : running) {
      if (!prefilling(i) || budget < 1 || (one_prefill && prefills > 0)) continue;
      ++prefills;
      const int left = static_cast<int>(w.prompts[i].size()) - seqs[i].cached;
      int take = left;
      if (chunked && w.chunk > 0) take = std::min(take, w.chunk);
      if (take > budget) {
        if (!chunked) continue;  // whole prompts only
        take = budget;
      }
      batch.push_back({&seqs[i], take, take == left});
      budget -= take;
    }
    if (batch.empty()) {
      r.status = {HALO_STATUS_INTERNAL,
                  "the workload cannot be scheduled within the agreed limits"};
      return r;
    }
    for (const Chunk& c : batch)
      if (!pool.reserve(*c.seq, c.seq->cached + c.n_new, L.block_size)) {
        r.status = {HALO_STATUS_INTERNAL, "the suite's KV cache is too small for its workload"};
        return r;
      }
    std::vector<std::vector<float>> rows;
    r.status = run_step(s, batch, &rows);
    ++r.steps;
    if (!r.status.ok()) return r;
    size_t k = 0;
    for (const Chunk& c : batch) {
      if (!c.logits) continue;
      const size_t i = static_cast<size_t>(c.seq - seqs.data());
      const auto& row = rows[k++];
      r.rows[i].push_back(row);
      const int am = argmax(row);
      r.argmax[i].push_back(am);
      if (!done(i)) {
        const size_t o = r.rows[i].size() - 1;
        seqs[i].tokens.push_back(w.forced ? (*w.forced)[i].at(o) : am);
      }
    }
  }
  return r;
}

std::vector<int32_t> random_tokens(int n, int vocab, uint32_t seed) {
  std::mt19937 rng(seed * 7919u + 1u);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

std::vector<std::vector<int32_t>> make_prompts(const Session& s, std::vector<int> lengths,
                                               int outputs, uint32_t seed) {
  const int cap = s.limits.max_model_len - outputs;
  const bool chunked = (s.limits.capabilities & HALO_CAP_CHUNKED_PREFILL) != 0;
  std::vector<std::vector<int32_t>> out;
  for (size_t i = 0; i < lengths.size(); ++i) {
    int n = std::max(1, std::min(lengths[i], cap));
    if (!chunked) n = std::min(n, s.limits.max_num_batched_tokens);
    out.push_back(random_tokens(n, s.vocab, seed + static_cast<uint32_t>(i) * 31u));
  }
  return out;
}

// ---------------------------------------------------------------- tolerance

// Measured max errors against the fp32 reference (docs/plugin-guide.md, "The
// default tolerance"): fp32 kernels <= 7e-7; bf16 (cpu bf16 GEMM + bf16 KV,
// rbln weights compiled to bf16) 5e-3 to 1.1e-2; fp16 weights <= 1.7e-3. Each
// bound is ~2-3x the worst case seen; fp32's 1e-3 leaves room for another
// summation order. int8 (ABI v1.4 quantized weights, compared with the
// reference on the dequantized weights, so only activation rounding counts):
// the cpu plugin's gemm_q, activations rounded to int8 in blocks of 32, gives
// 0.010 to 0.029 over the suite's 16 quantized cases, the same with an fp32 KV
// cache or bf16 plain weights (the int8 rounding dominates), and up to 0.034
// on narrower models (hidden 64); 8e-2 is ~2.4x the worst. fp8 runs on no plugin here: a loose
// bound that still catches wrong arithmetic. A vendor who knows better passes --tolerance.
double dtype_tolerance(int32_t d) {
  switch (d) {
    case HALO_COMPUTE_DTYPE_FP32: return 1e-3;
    case HALO_COMPUTE_DTYPE_FP16: return 5e-3;
    case HALO_COMPUTE_DTYPE_BF16: return 2e-2;
    case HALO_COMPUTE_DTYPE_FP8: return 1e-1;
    case HALO_COMPUTE_DTYPE_INT8: return 8e-2;
    default: return 0;
  }
}

namespace {
std::string fmt_tol(double v) {
  std::ostringstream os;
  os << v;
  return os.str();
}
}  // namespace

std::string tolerance_rule() {
  std::string t;
  for (int32_t d : {HALO_COMPUTE_DTYPE_FP32, HALO_COMPUTE_DTYPE_FP16, HALO_COMPUTE_DTYPE_BF16,
                    HALO_COMPUTE_DTYPE_FP8, HALO_COMPUTE_DTYPE_INT8})
    t += std::string(t.empty() ? "" : ", ") + halo_compute_dtype_name(d) + " " + fmt_tol(dtype_tolerance(d));
  return "per prepared model, from the compute dtype its prepare reports (limits.compute_dtype, ABI v1.3): " + t +
         "; a plugin older than v1.3 gets it inferred from limits.kv_cache_dtype";
}

Tolerance default_tolerance(uint32_t plugin_minor, const halo_limits& lim) {
  const bool has_compute = plugin_minor >= 3 && lim.struct_size >= HALO_STRUCT_SIZE(halo_limits, compute_dtype);
  const bool has_kv = plugin_minor >= 2 && lim.struct_size >= HALO_STRUCT_SIZE(halo_limits, kv_cache_dtype);
  // kv dtypes share their values with compute dtypes (FP32, BF16, FP16).
  const int32_t kv = has_kv ? lim.kv_cache_dtype : HALO_KV_DTYPE_AUTO;
  const double kv_tol = dtype_tolerance(kv);
  Tolerance t;
  if (has_compute && dtype_tolerance(lim.compute_dtype) > 0) {
    t.value = dtype_tolerance(lim.compute_dtype);
    t.why = std::string("compute dtype ") + halo_compute_dtype_name(lim.compute_dtype) + " reported by prepare";
    if (kv_tol > t.value) {  // a cache coarser than the arithmetic bounds the error
      t.value = kv_tol;
      t.why += std::string(", KV cache ") + halo_kv_dtype_name(kv) + " is coarser";
    }
    return t;
  }
  const std::string missing =
      has_compute ? "prepare reported compute_dtype " + std::to_string(lim.compute_dtype) + " (" +
                        halo_compute_dtype_name(lim.compute_dtype) + ")"
      : plugin_minor < 3 ? "the plugin speaks ABI v1." + std::to_string(plugin_minor) + ", before limits.compute_dtype"
                         : "limits.struct_size=" + std::to_string(lim.struct_size) + " has no compute_dtype";
  if (kv_tol > 0) {
    t.value = kv_tol;
    t.why = missing + ": inferred from kv_cache_dtype " + halo_kv_dtype_name(kv);
  } else {
    t.value = dtype_tolerance(HALO_COMPUTE_DTYPE_FP32);
    t.why = missing + " and no kv_cache_dtype: assuming fp32";
  }
  return t;
}

Tolerance tolerance_for(const Session& s) {
  if (settings().tolerance > 0) return {settings().tolerance, "--tolerance"};
  return default_tolerance(s.lib->api->abi_minor, s.limits);
}

std::string compare_rows(const std::vector<float>& got, const std::vector<float>& want,
                         double tol) {
  if (got.size() != want.size()) return "row sizes differ";
  double scale = 1.0, err = 0.0;
  size_t at = 0;
  for (size_t i = 0; i < want.size(); ++i) scale = std::max(scale, std::fabs(double{want[i]}));
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = std::fabs(double{got[i]} - double{want[i]});
    if (!(d <= err)) {  // NaN counts as the worst
      err = std::isnan(d) ? INFINITY : d;
      at = i;
      if (std::isnan(d)) break;
    }
  }
  if (err / scale <= tol) return "";
  std::ostringstream os;
  os << "max |got - want| / max(1, max|want|) = " << err / scale << " > tolerance " << tol
     << " (token id " << at << ": got " << got[at] << ", want " << want[at] << ")";
  return os.str();
}

double max_error(const WorkloadResult& got, const WorkloadResult& want) {
  double worst = 0;
  for (size_t i = 0; i < want.rows.size() && i < got.rows.size(); ++i)
    for (size_t o = 0; o < want.rows[i].size() && o < got.rows[i].size(); ++o) {
      const auto& g = got.rows[i][o];
      const auto& w = want.rows[i][o];
      if (g.size() != w.size()) return INFINITY;
      double scale = 1.0, err = 0.0;
      for (size_t k = 0; k < w.size(); ++k) {
        scale = std::max(scale, std::fabs(double{w[k]}));
        const double d = std::fabs(double{g[k]} - double{w[k]});
        err = std::isnan(d) ? INFINITY : std::max(err, d);
      }
      worst = std::max(worst, err / scale);
    }
  return worst;
}

std::string compare_results(const WorkloadResult& got, const WorkloadResult& want, double tol,
                            bool check_argmax) {
  if (got.rows.size() != want.rows.size()) return "different numbers of sequences";
  for (size_t i = 0; i < want.rows.size(); ++i) {
    if (got.rows[i].size() != want.rows[i].size())
      return "sequence " + std::to_string(i) + ": " + std::to_string(got.rows[i].size()) +
             " logits rows, want " + std::to_string(want.rows[i].size());
    for (size_t o = 0; o < want.rows[i].size(); ++o) {
      const std::string e = compare_rows(got.rows[i][o], want.rows[i][o], tol);
      if (!e.empty())
        return "sequence " + std::to_string(i) + ", output " + std::to_string(o) + " (context " +
               std::to_string(o) + " tokens past the prompt): " + e;
      if (check_argmax && got.argmax[i][o] != want.argmax[i][o]) {
        // A near tie is not a failure: the two argmaxes must then be within tolerance of each
        // other.
        const auto& w = want.rows[i][o];
        const double gap = std::fabs(double{w[static_cast<size_t>(want.argmax[i][o])]} -
                                     double{w[static_cast<size_t>(got.argmax[i][o])]});
        if (gap > tol)
          return "sequence " + std::to_string(i) + ", output " + std::to_string(o) +
                 ": greedy id " + std::to_string(got.argmax[i][o]) + ", reference " +
                 std::to_string(want.argmax[i][o]) +
                 " [contract: greedy ids match the reference plugin]";
      }
    }
  }
  return "";
}

}  // namespace conf
