// oneDNN (2.6 API) bf16 matmuls; see onednn.h.
//
// Packing: the sources are rounded to one bf16 [N, K] row-major buffer (the
// logical K x N weight in oneDNN's "ba" tag), then a probe primitive for a
// representative M (64) is created with the weight layout left to oneDNN
// (format_tag::any) and the weight is reordered once into the layout it asks
// for (brgemm on AVX512-BF16 picks a VNNI-blocked BA16a64b2a). Primitives for
// other M are created with the weight descriptor fixed to that layout, so no
// call ever reorders weights. Runtime-M primitives (DNNL_RUNTIME_DIM_VAL) are
// not used: with a fixed blocked weight, oneDNN 2.6.3 falls back to
// "ref:any", and with format_tag::any it picks gemm:jit over a plain layout.
//
// Caching: a primitive depends on M, on whether there is a bias and on the
// OpenMP thread count (oneDNN's brgemm plans its work split for the threads
// present at creation), so Linear keeps a small list keyed by the three; a
// decode loop with a fixed batch size creates nothing after its first step.
// The output is always dense [M, N] for oneDNN (a row stride other than N
// makes it choose gemm:jit); for ldy != N it goes through a scratch buffer.
//
// Threads and libgomp's spin-wait: after a parallel region libgomp's idle
// threads spin before sleeping (GOMP_SPINCOUNT, by default 300000 `pause`s
// with OMP_WAIT_POLICY unset, about 8 ms here), competing with
// halo::kernels::ThreadPool's workers for the same cores; see
// apply_recommended_omp_env() in the header. The disabled test
// OneDnn.DISABLED_OpenMpSpinVersusThreadPool prints the effect for the
// environment it runs in.
#include "halo/onednn/onednn.h"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <dnnl.hpp>
#include <mutex>
#include <stdexcept>
#include <unordered_map>

namespace halo::onednn {
namespace {

using dnnl::memory;
using tag = dnnl::memory::format_tag;
using dt = dnnl::memory::data_type;
using halo::kernels::DType;

constexpr memory::dim kProbeM = 64;

[[noreturn]] void fail(const char* what, const dnnl::error& e) {
  throw std::runtime_error(std::string("halo_onednn: ") + what + ": " + e.what());
}

// The process-wide CPU engine; throws dnnl::error if oneDNN cannot start.
const dnnl::engine& cpu_engine() {
  static const dnnl::engine eng(dnnl::engine::kind::cpu, 0);
  return eng;
}

// Threads requested with set_num_threads (0: OpenMP's default, captured once).
std::atomic<int> g_threads{0};
int default_threads() {
  static const int n = std::max(1, omp_get_max_threads());
  return n;
}

// Applies the requested thread count to the calling thread's OpenMP ICV (it
// is per thread) and returns it; cheap enough to run on every call.
int apply_threads() {
  const int want = num_threads();
  if (omp_get_max_threads() != want) omp_set_num_threads(want);
  return want;
}

// Round to nearest even, NaN stays NaN; same as halo::kernels::f32_to_bf16
// (inline here so the per-call activation loop vectorizes).
inline uint16_t to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void convert_rows(const float* x, size_t M, size_t ldx, size_t K, uint16_t* out, int nthr) {
  const long long rows = static_cast<long long>(M);
  const bool par = nthr > 1 && M > 1 && M * K >= (size_t{1} << 16);
#pragma omp parallel for num_threads(nthr) schedule(static) if (par)
  for (long long m = 0; m < rows; ++m) {
    const float* src = x + static_cast<size_t>(m) * ldx;
    uint16_t* dst = out + static_cast<size_t>(m) * K;
    for (size_t k = 0; k < K; ++k) dst[k] = to_bf16(src[k]);
  }
}

dnnl::matmul::primitive_desc make_pd(memory::dim M, memory::dim K, memory::dim N,
                                     const memory::desc& wei, bool bias) {
  const memory::desc src({M, K}, dt::bf16, tag::ab);
  const memory::desc dst({M, N}, dt::f32, tag::ab);
  if (bias) {
    const memory::desc b({1, N}, dt::f32, tag::ab);
    return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, b, dst), cpu_engine());
  }
  return dnnl::matmul::primitive_desc(dnnl::matmul::desc(src, wei, dst), cpu_engine());
}

struct Probe {
  bool ok = false;
  std::string impl;
};

const Probe& probe() {
  static const Probe p = [] {
    Probe r;
    try {
      const memory::desc wei({256, 256}, dt::bf16, tag::any);
      auto pd = make_pd(kProbeM, 256, 256, wei, false);
      r.impl = pd.impl_info_str();
      const bool native =
          r.impl.find("bf16") != std::string::npos || r.impl.find("amx") != std::string::npos;
      const bool optimized = r.impl.rfind("ref", 0) != 0;
      r.ok = native && optimized;
    } catch (const std::exception&) {
      r.ok = false;
    }
    return r;
  }();
  return p;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

bool available() { return probe().ok; }

std::string isa_name() { return probe().impl; }

void set_num_threads(int n) {
  default_threads();  // capture OpenMP's default before changing it
  g_threads.store(n > 0 ? n : 0, std::memory_order_relaxed);
  apply_threads();
}

int num_threads() {
  const int n = g_threads.load(std::memory_order_relaxed);
  return n > 0 ? n : default_threads();
}

std::string spin_env() {
  std::string out;
  for (const char* name : {"OMP_WAIT_POLICY", "GOMP_SPINCOUNT"}) {
    if (const char* v = std::getenv(name)) {
      if (!out.empty()) out += ' ';
      out += std::string(name) + "=" + v;
    }
  }
  return out.empty() ? "libgomp default wait policy" : out;
}

// ---------------------------------------------------------------------------

struct Linear::Impl {
  struct Entry {
    size_t m = 0;
    bool bias = false;
    int nthr = 0;
    dnnl::matmul prim;
    memory src, dst, bias_mem;
    std::unordered_map<int, memory> args;
  };

  size_t n = 0, k = 0;
  memory::desc wei_md;  // the packed layout every primitive uses
  memory wei;
  std::string impl;
  dnnl::stream stream;
  std::vector<Entry> cache;
  size_t created = 0;
  std::vector<uint16_t> x_bf16;
  std::vector<float> y_dense;
  std::mutex mu;

  Entry& get(size_t M, bool bias, int nthr) {
    for (Entry& e : cache)
      if (e.m == M && e.bias == bias && e.nthr == nthr) return e;
    const auto m = static_cast<memory::dim>(M);
    auto pd = make_pd(m, static_cast<memory::dim>(k), static_cast<memory::dim>(n), wei_md, bias);
    if (pd.weights_desc() != wei_md)
      throw std::runtime_error("halo_onednn: primitive wants another weight layout");
    Entry e;
    e.m = M;
    e.bias = bias;
    e.nthr = nthr;
    e.prim = dnnl::matmul(pd);
    e.src = memory(pd.src_desc(), cpu_engine(), DNNL_MEMORY_NONE);
    e.dst = memory(pd.dst_desc(), cpu_engine(), DNNL_MEMORY_NONE);
    e.args = {{DNNL_ARG_SRC, e.src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, e.dst}};
    if (bias) {
      e.bias_mem = memory(pd.bias_desc(), cpu_engine(), DNNL_MEMORY_NONE);
      e.args.emplace(DNNL_ARG_BIAS, e.bias_mem);
    }
    ++created;
    cache.push_back(std::move(e));
    return cache.back();
  }
};

Linear::Linear(const std::vector<halo::kernels::WeightSource>& sources, size_t K)
    : impl_(std::make_unique<Impl>()) {
  Impl& s = *impl_;
  s.k = K;
  for (const auto& src : sources) {
    if (src.rows > 0 && src.data == nullptr)
      throw std::invalid_argument("halo_onednn: Linear source without data");
    s.n += src.rows;
  }
  if (s.n == 0 || K == 0) throw std::invalid_argument("halo_onednn: Linear with N == 0 or K == 0");

  // Stack the sources as one bf16 [N, K] row-major matrix.
  std::vector<uint16_t> plain(s.n * K);
  size_t row0 = 0;
  for (const auto& src : sources) {
    const size_t count = src.rows * K;
    uint16_t* out = plain.data() + row0 * K;
    switch (src.dtype) {
      case DType::BF16:
        std::memcpy(out, src.data, count * sizeof(uint16_t));
        break;
      case DType::F32: {
        const auto* in = static_cast<const float*>(src.data);
        for (size_t i = 0; i < count; ++i) out[i] = halo::kernels::f32_to_bf16(in[i]);
        break;
      }
      case DType::F16: {
        const auto* in = static_cast<const uint16_t*>(src.data);
        for (size_t i = 0; i < count; ++i)
          out[i] = halo::kernels::f32_to_bf16(halo::kernels::f16_to_f32(in[i]));
        break;
      }
      default:
        throw std::invalid_argument("halo_onednn: unsupported weight dtype");
    }
    row0 += src.rows;
  }

  try {
    apply_threads();
    const auto n = static_cast<memory::dim>(s.n), k = static_cast<memory::dim>(K);
    auto pd = make_pd(kProbeM, k, n, memory::desc({k, n}, dt::bf16, tag::any), false);
    s.impl = pd.impl_info_str();
    s.wei_md = pd.weights_desc();
    s.stream = dnnl::stream(cpu_engine());
    memory user(memory::desc({k, n}, dt::bf16, tag::ba), cpu_engine(), plain.data());
    s.wei = memory(s.wei_md, cpu_engine());
    dnnl::reorder(user, s.wei).execute(s.stream, user, s.wei);
    s.stream.wait();
  } catch (const dnnl::error& e) {
    fail("packing weights", e);
  }
}

Linear::~Linear() = default;
Linear::Linear(Linear&&) noexcept = default;
Linear& Linear::operator=(Linear&&) noexcept = default;

size_t Linear::N() const { return impl_->n; }
size_t Linear::K() const { return impl_->k; }
size_t Linear::weight_bytes() const { return impl_->wei_md.get_size(); }
std::string Linear::impl() const { return impl_->impl; }
size_t Linear::primitives_created() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->created;
}

void Linear::forward(const float* x, size_t M, size_t ldx, const float* bias, float* y,
                     size_t ldy) {
  if (M == 0) return;
  Impl& s = *impl_;
  if (ldx < s.k || ldy < s.n) throw std::invalid_argument("halo_onednn: row stride too small");
  std::lock_guard<std::mutex> lock(s.mu);
  try {
    const int nthr = apply_threads();
    Impl::Entry& e = s.get(M, bias != nullptr, nthr);
    if (s.x_bf16.size() < M * s.k) s.x_bf16.resize(M * s.k);
    convert_rows(x, M, ldx, s.k, s.x_bf16.data(), nthr);
    const bool dense = ldy == s.n;
    if (!dense && s.y_dense.size() < M * s.n) s.y_dense.resize(M * s.n);
    float* out = dense ? y : s.y_dense.data();
    e.src.set_data_handle(s.x_bf16.data());
    e.dst.set_data_handle(out);
    if (bias) e.bias_mem.set_data_handle(const_cast<float*>(bias));
    e.prim.execute(s.stream, e.args);
    s.stream.wait();
    if (!dense)
      for (size_t m = 0; m < M; ++m) std::memcpy(y + m * ldy, out + m * s.n, s.n * sizeof(float));
  } catch (const dnnl::error& e) {
    fail("matmul", e);
  }
}

// ---------------------------------------------------------------------------

Peak measure_bf16_matmul_peak(double budget_s) {
  if (!available()) throw std::runtime_error("halo_onednn: oneDNN bf16 matmul not available");
  struct Shape {
    memory::dim m, n, k;
  };
  std::vector<Shape> shapes = {{2048, 2048, 2048}, {512, 5632, 2048}};
  if (budget_s >= 1.0) shapes.push_back({1024, 11264, 2048});
  const double per_shape = budget_s / static_cast<double>(shapes.size());
  Peak best;
  try {
    apply_threads();
    dnnl::stream stream(cpu_engine());
    for (const Shape& sh : shapes) {
      auto pd = make_pd(sh.m, sh.k, sh.n, memory::desc({sh.k, sh.n}, dt::bf16, tag::any), false);
      memory src(pd.src_desc(), cpu_engine()), wei(pd.weights_desc(), cpu_engine()),
          dst(pd.dst_desc(), cpu_engine());
      // Small normal values; the layout of the (packed) weight is irrelevant here.
      auto fill = [](memory& mem, size_t salt) {
        auto* p = static_cast<uint16_t*>(mem.get_data_handle());
        const size_t count = mem.get_desc().get_size() / sizeof(uint16_t);
        for (size_t i = 0; i < count; ++i)
          p[i] = halo::kernels::f32_to_bf16(static_cast<float>((i * 7 + salt) % 17) / 16.0f - 0.5f);
      };
      fill(src, 1);
      fill(wei, 5);
      dnnl::matmul prim(pd);
      const std::unordered_map<int, memory> args = {
          {DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wei}, {DNNL_ARG_DST, dst}};
      prim.execute(stream, args);  // warm-up: page faults, caches, thread team
      stream.wait();
      const double flops =
          2.0 * static_cast<double>(sh.m) * static_cast<double>(sh.n) * static_cast<double>(sh.k);
      const double start = now_s();
      for (int rep = 0; rep < 100; ++rep) {
        const double t0 = now_s();
        prim.execute(stream, args);
        stream.wait();
        const double t = now_s() - t0;
        if (flops / t > best.flops_per_s) {
          best.flops_per_s = flops / t;
          best.impl = pd.impl_info_str();
          best.m = static_cast<size_t>(sh.m);
          best.n = static_cast<size_t>(sh.n);
          best.k = static_cast<size_t>(sh.k);
          best.seconds = t;
        }
        if (now_s() - start >= per_shape) break;
      }
    }
  } catch (const dnnl::error& e) {
    fail("peak measurement", e);
  }
  return best;
}

}  // namespace halo::onednn
