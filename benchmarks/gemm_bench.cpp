// Matmul micro-benchmarks on TinyLlama-shaped layers: the packed bf16 kernel
// (gemm_bf16) against the old fp32-activation matmul_nt over bf16 weights
// and, when built with oneDNN, oneDNN's bf16 matmul with pre-packed weights
// (the same-run baseline), and the quantized gemm_q (int8 / uint4, group 32)
// on the same shapes. Counters: FLOP/s and weight bytes/s.
//
// Args: shape, M, copies. copies > 1 cycles through that many different
// weight matrices (> 2x L3 in all) so that M=1 reads its weights from DRAM;
// BM_ReadBandwidth gives the machine's 2-thread streaming read rate to
// compare with. HALO_BENCH_DRAM_MIB sizes the copies (default 128 MiB): a
// host with a larger last-level cache needs more (2048 on the 2-core Xeon
// CI machine, whose L3 is reported as 300 MiB).
//
// BM_GemmBf16Path compares gemm_bf16's AMX and AVX-512 paths (arg amx) on
// the same shapes and weights. On a shared machine, compare them within one
// run, interleaved:
//   gemm_bench --benchmark_filter=BM_GemmBf16Path --benchmark_repetitions=5
//     --benchmark_enable_random_interleaving=true --benchmark_min_time=0.3
#include <benchmark/benchmark.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "halo/kernels/gemm_bf16.h"
#include "halo/kernels/gemm_q.h"
#include "halo/kernels/kernels.h"

#ifdef HALO_BENCH_DNNL
#include <dnnl.hpp>
#endif

#if defined(__x86_64__)
#include <immintrin.h>
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

namespace k = halo::kernels;

namespace {

struct Shape {
  const char* name;
  size_t K, N;
};
constexpr Shape kShapes[] = {{"qkv", 2048, 2560},
                             {"o", 2048, 2048},
                             {"gate_up", 2048, 11264},
                             {"down", 5632, 2048},
                             {"gate", 2048, 5632}};  // shape 4: gemm_q comparison only

// 2 threads; HALO_BENCH_THREADS=1 gives per-core figures whose CPU time is
// the whole cost (useful on a shared machine, where real time is noisy).
k::ThreadPool& pool() {
  static k::ThreadPool p([] {
    const char* e = std::getenv("HALO_BENCH_THREADS");
    return e != nullptr && std::atoi(e) > 0 ? std::atoi(e) : 2;
  }());
  return p;
}

uint64_t rng_next(uint64_t& s) {
  s ^= s << 13;
  s ^= s >> 7;
  s ^= s << 17;
  return s;
}

// bf16 values in about [-1, 1).
std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  std::vector<uint16_t> v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
  for (auto& e : v) {
    const float f = static_cast<float>(rng_next(s) >> 40) / static_cast<float>(1 << 23) - 1.f;
    e = k::f32_to_bf16(f);
  }
  return v;
}

std::vector<float> random_f32(size_t n, uint64_t seed) {
  std::vector<float> v(n);
  uint64_t s = seed * 0x9e3779b97f4a7c15ull + 7;
  for (auto& e : v) e = static_cast<float>(rng_next(s) >> 40) / static_cast<float>(1 << 23) - 1.f;
  return v;
}

std::map<std::pair<int, int>, std::vector<uint16_t>>& raw_cache() {
  static std::map<std::pair<int, int>, std::vector<uint16_t>> cache;
  return cache;
}

// Raw [N, K] bf16 weights, one per (shape, copy), generated once.
const std::vector<uint16_t>& raw_weight(int shape, int copy) {
  auto& w = raw_cache()[{shape, copy}];
  if (w.empty())
    w = random_bf16(kShapes[shape].N * kShapes[shape].K,
                    static_cast<uint64_t>(shape * 100 + copy + 1));
  return w;
}

void set_counters(benchmark::State& state, size_t M, const Shape& s) {
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * M * s.N * s.K, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_B/s"] =
      benchmark::Counter(2.0 * s.N * s.K, benchmark::Counter::kIsIterationInvariantRate);
}

// Packed weights per (shape, copy), packed once (repetitions reuse them);
// the raw copy is dropped (made again if another benchmark wants it).
const k::PackedWeight& packed_weight(int shape, int copy) {
  static std::map<std::pair<int, int>, k::PackedWeight> cache;
  auto& w = cache[{shape, copy}];
  if (w.N() == 0) {
    w = k::PackedWeight::pack({{raw_weight(shape, copy).data(), k::DType::BF16, kShapes[shape].N}},
                              kShapes[shape].K);
    raw_cache().erase({shape, copy});
  }
  return w;
}

void run_gemm_bf16(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0));
  const size_t M = static_cast<size_t>(state.range(1));
  const int copies = static_cast<int>(state.range(2));
  const Shape& s = kShapes[shape];
  for (int c = 0; c < copies; ++c) packed_weight(shape, c);
  const auto x = random_f32(M * s.K, 3);
  std::vector<float> y(M * s.N);
  k::GemmScratch scratch;
  int c = 0;
  for (auto _ : state) {
    k::gemm_bf16(pool(), x.data(), M, s.K, packed_weight(shape, c), nullptr, y.data(), s.N,
                 scratch);
    benchmark::DoNotOptimize(y.data());
    if (++c == copies) c = 0;
  }
  set_counters(state, M, s);
  state.SetLabel(std::string(s.name) + " " + k::gemm_bf16_path());
}

// The default path (AMX where the CPU has it unless HALO_GEMM_AMX=0).
void BM_GemmBf16(benchmark::State& state) { run_gemm_bf16(state); }

// Arg amx: 1 = AMX, 0 = the AVX-512 path (AMX turned off for this run).
void BM_GemmBf16Path(benchmark::State& state) {
  const bool amx = state.range(3) != 0;
  if (!k::set_gemm_bf16_amx(amx)) {
    state.SkipWithError("no AMX on this CPU / OS");
    return;
  }
  run_gemm_bf16(state);
  k::set_gemm_bf16_amx(true);  // back to the default
}

void BM_MatmulNt(benchmark::State& state) {
  const int shape = static_cast<int>(state.range(0));
  const size_t M = static_cast<size_t>(state.range(1));
  const int copies = static_cast<int>(state.range(2));
  const Shape& s = kShapes[shape];
  for (int c = 0; c < copies; ++c) raw_weight(shape, c);
  const auto x = random_f32(M * s.K, 3);
  std::vector<float> y(M * s.N);
  int c = 0;
  for (auto _ : state) {
    k::matmul_nt(pool(), x.data(), M, s.K, raw_weight(shape, c).data(), k::DType::BF16, s.N,
                 nullptr, y.data());
    benchmark::DoNotOptimize(y.data());
    if (++c == copies) c = 0;
  }
  set_counters(state, M, s);
  state.SetLabel(s.name);
}

#ifdef HALO_BENCH_DNNL
// oneDNN bf16 matmul: bf16 src [M, K] (already converted, unlike the other
// two which convert fp32 activations inside the timed call), weights
// reordered once into the primitive's preferred layout, fp32 dst.
void BM_OneDnnBf16(benchmark::State& state) {
  using namespace dnnl;
  using dt = memory::data_type;
  using tag = memory::format_tag;
  const int shape = static_cast<int>(state.range(0));
  const size_t M = static_cast<size_t>(state.range(1));
  const int copies = static_cast<int>(state.range(2));
  const Shape& s = kShapes[shape];
  static engine eng(engine::kind::cpu, 0);
  stream strm(eng);
  const auto Mi = static_cast<memory::dim>(M), Ki = static_cast<memory::dim>(s.K),
             Ni = static_cast<memory::dim>(s.N);
  memory::desc a_md({Mi, Ki}, dt::bf16, tag::ab);
  memory::desc b_any({Ki, Ni}, dt::bf16, tag::any);
  memory::desc c_md({Mi, Ni}, dt::f32, tag::ab);
  matmul::primitive_desc pd(matmul::desc(a_md, b_any, c_md), eng);
  matmul prim(pd);
  // Weights [K, N] with strides (1, K): the transposed view of row-major [N, K].
  memory::desc b_user({Ki, Ni}, dt::bf16, memory::dims{1, Ki});
  std::vector<memory> bs;
  for (int c = 0; c < copies; ++c) {
    memory user(b_user, eng, const_cast<uint16_t*>(raw_weight(shape, c).data()));
    memory packed(pd.weights_desc(), eng);
    reorder(user, packed).execute(strm, user, packed);
    bs.push_back(packed);
  }
  auto xa = random_bf16(M * s.K, 3);
  memory a(a_md, eng, xa.data());
  memory cm(c_md, eng);
  strm.wait();
  int c = 0;
  for (auto _ : state) {
    prim.execute(
        strm,
        {{DNNL_ARG_SRC, a}, {DNNL_ARG_WEIGHTS, bs[static_cast<size_t>(c)]}, {DNNL_ARG_DST, cm}});
    strm.wait();
    if (++c == copies) c = 0;
  }
  set_counters(state, M, s);
  state.SetLabel(s.name);
}
#endif

// Number of weight copies so that the copies exceed 128 MiB (> 2x the 32 MiB L3... and more),
// or HALO_BENCH_DRAM_MIB.
int dram_copies(int shape) {
  const char* e = std::getenv("HALO_BENCH_DRAM_MIB");
  const double mib = e != nullptr && std::atoi(e) > 0 ? std::atoi(e) : 128;
  const double bytes = 2.0 * kShapes[shape].N * kShapes[shape].K;
  return static_cast<int>(mib * 1024 * 1024 / bytes) + 1;
}

void shape_args(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < 4; ++shape) {
    for (int M : {1, 4, 16, 32, 64, 512}) b->Args({shape, M, 1});
    b->Args({shape, 1, dram_copies(shape)});  // M=1 with weights from DRAM
    b->Args({shape, 4, dram_copies(shape)});
  }
  b->ArgNames({"shape", "M", "copies"});
  b->UseRealTime();
}

BENCHMARK(BM_GemmBf16)->Apply(shape_args);

// AMX vs AVX-512: decode (1), speculative verify (5 rows a sequence: 4, 5,
// 8, 16, 20, 40) with the weights from DRAM, prefill (64, 512) from cache.
void path_args(benchmark::internal::Benchmark* b) {
  for (int shape = 0; shape < 4; ++shape)
    for (int M : {1, 4, 5, 8, 16, 20, 40, 64, 512})
      for (int amx : {1, 0}) b->Args({shape, M, M <= 40 ? dram_copies(shape) : 1, amx});
  b->ArgNames({"shape", "M", "copies", "amx"});
  b->UseRealTime();
}
BENCHMARK(BM_GemmBf16Path)->Apply(path_args);
BENCHMARK(BM_MatmulNt)->Apply(shape_args);
#ifdef HALO_BENCH_DNNL
BENCHMARK(BM_OneDnnBf16)->Apply(shape_args);
#endif

// ------------------------------------------------------------ quantized
// gemm_q on the same shapes: INT8 (symmetric, fp16 scales) and UINT4 (fp16
// scales and offsets), group 32. W_B/s counts the packed bytes (values plus
// scales and offsets) one call streams, to compare with the bf16 kernel's
// W_B/s and BM_ReadBandwidth; at M=1 the calls/s are tokens/s of the layer.
struct QRaw {
  std::vector<uint8_t> values;
  std::vector<uint16_t> scales, offsets;
};

const QRaw& raw_qweight(int shape, int copy, k::QType t) {
  static std::map<std::tuple<int, int, int>, QRaw> cache;
  auto& w = cache[{shape, copy, static_cast<int>(t)}];
  if (w.values.empty()) {
    const Shape& s = kShapes[shape];
    uint64_t r = static_cast<uint64_t>(shape * 100 + copy + 1) * 0x9e3779b97f4a7c15ull + 3;
    w.values.resize(t == k::QType::INT8 ? s.N * s.K : s.N * s.K / 2);
    for (auto& v : w.values) v = static_cast<uint8_t>(rng_next(r) >> 56);
    const size_t groups = s.N * s.K / 32;
    w.scales.resize(groups);
    for (auto& v : w.scales)
      v = k::f32_to_f16(0.001f +
                        static_cast<float>(rng_next(r) >> 40) / static_cast<float>(1 << 30));
    if (t == k::QType::UINT4) {
      w.offsets.resize(groups);
      for (size_t i = 0; i < groups; ++i)
        w.offsets[i] = k::f32_to_f16(-8.f * k::f16_to_f32(w.scales[i]));
    }
  }
  return w;
}

k::PackedQWeight pack_q(int shape, int copy, k::QType t) {
  const Shape& s = kShapes[shape];
  const QRaw& raw = raw_qweight(shape, copy, t);
  k::QuantSource src;
  src.type = t;
  src.group = 32;
  src.rows = s.N;
  src.values = raw.values.data();
  src.scales = raw.scales.data();
  src.offsets = raw.offsets.empty() ? nullptr : raw.offsets.data();
  src.scale_dtype = k::DType::F16;
  return k::PackedQWeight::pack({src}, s.K);
}

void BM_GemmQ(benchmark::State& state, k::QType t) {
  const int shape = static_cast<int>(state.range(0));
  const size_t M = static_cast<size_t>(state.range(1));
  const int copies = static_cast<int>(state.range(2));
  const Shape& s = kShapes[shape];
  std::vector<k::PackedQWeight> ws;
  for (int c = 0; c < copies; ++c) ws.push_back(pack_q(shape, c, t));
  const auto x = random_f32(M * s.K, 3);
  std::vector<float> y(M * s.N);
  k::GemmQScratch scratch;
  int c = 0;
  for (auto _ : state) {
    k::gemm_q(pool(), x.data(), M, s.K, ws[static_cast<size_t>(c)], nullptr, y.data(), s.N,
              scratch);
    benchmark::DoNotOptimize(y.data());
    if (++c == copies) c = 0;
  }
  state.counters["FLOP/s"] =
      benchmark::Counter(2.0 * M * s.N * s.K, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["W_B/s"] = benchmark::Counter(static_cast<double>(ws[0].bytes()),
                                               benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(s.name) + " " + k::gemm_q_path());
}

// Copies of a weight of `bytes` so that they exceed 128 MiB.
int dram_copies_q(int shape, double bytes_per_param) {
  const double bytes = bytes_per_param * kShapes[shape].N * kShapes[shape].K;
  return static_cast<int>(128.0 * 1024 * 1024 / bytes) + 1;
}

// o (2048 x 2048) and gate (5632 x 2048): decode M=1 (from cache and from
// DRAM), a decode batch M=32 and prefill M=512.
template <int BytesPerParamX16>
void q_args(benchmark::internal::Benchmark* b) {
  for (int shape : {1, 4}) {
    for (int M : {1, 32, 512}) b->Args({shape, M, 1});
    b->Args({shape, 1, dram_copies_q(shape, BytesPerParamX16 / 16.0)});
  }
  b->ArgNames({"shape", "M", "copies"});
  b->UseRealTime();
}

// bf16 on the gate shape (o is in shape_args already).
void bf16_gate_args(benchmark::internal::Benchmark* b) {
  for (int M : {1, 32, 512}) b->Args({4, M, 1});
  b->Args({4, 1, dram_copies(4)});
  b->ArgNames({"shape", "M", "copies"});
  b->UseRealTime();
}

BENCHMARK(BM_GemmBf16)->Apply(bf16_gate_args);
// int8 g32: 1 + 2/32 bytes per parameter; uint4 g32: 0.5 + 4/32.
BENCHMARK_CAPTURE(BM_GemmQ, int8, k::QType::INT8)->Apply(q_args<17>);
BENCHMARK_CAPTURE(BM_GemmQ, uint4, k::QType::UINT4)->Apply(q_args<10>);

// Packing one layer's weights (load-time cost): bf16 and fp32 sources.
void BM_Pack(benchmark::State& state) {
  const Shape& s = kShapes[state.range(0)];
  const bool f32 = state.range(1) != 0;
  const auto& raw = raw_weight(static_cast<int>(state.range(0)), 0);
  std::vector<float> wf;
  if (f32) {
    wf.resize(raw.size());
    for (size_t i = 0; i < raw.size(); ++i) wf[i] = k::bf16_to_f32(raw[i]);
  }
  for (auto _ : state) {
    auto w = f32 ? k::PackedWeight::pack({{wf.data(), k::DType::F32, s.N}}, s.K)
                 : k::PackedWeight::pack({{raw.data(), k::DType::BF16, s.N}}, s.K);
    benchmark::DoNotOptimize(w.data());
  }
  state.counters["params/s"] = benchmark::Counter(static_cast<double>(s.N * s.K),
                                                  benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_Pack)
    ->Args({2, 0})
    ->Args({2, 1})
    ->ArgNames({"shape", "f32"})
    ->Unit(benchmark::kMillisecond);

void BM_PackQ(benchmark::State& state) {
  const auto t = state.range(1) == 0 ? k::QType::INT8 : k::QType::UINT4;
  const int shape = static_cast<int>(state.range(0));
  raw_qweight(shape, 0, t);
  for (auto _ : state) {
    auto w = pack_q(shape, 0, t);
    benchmark::DoNotOptimize(w.bytes());
  }
  state.counters["params/s"] =
      benchmark::Counter(static_cast<double>(kShapes[shape].N * kShapes[shape].K),
                         benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PackQ)
    ->Args({2, 0})
    ->Args({2, 1})
    ->ArgNames({"shape", "uint4"})
    ->Unit(benchmark::kMillisecond);

// ------------------------------------------------------------ read bandwidth
#if defined(__x86_64__)
__attribute__((target("avx512f"))) uint64_t sum_avx512(const uint64_t* p, size_t n) {
  __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
  for (size_t i = 0; i + 32 <= n; i += 32) {
    a0 = _mm512_add_epi64(a0, _mm512_load_si512(p + i));
    a1 = _mm512_add_epi64(a1, _mm512_load_si512(p + i + 8));
    a2 = _mm512_add_epi64(a2, _mm512_load_si512(p + i + 16));
    a3 = _mm512_add_epi64(a3, _mm512_load_si512(p + i + 24));
  }
  return static_cast<uint64_t>(_mm512_reduce_add_epi64(
      _mm512_add_epi64(_mm512_add_epi64(a0, a1), _mm512_add_epi64(a2, a3))));
}
#endif

uint64_t sum_plain(const uint64_t* p, size_t n) {
  uint64_t s = 0;
  for (size_t i = 0; i < n; ++i) s += p[i];
  return s;
}

// 2 threads each summing half of a 2 GiB buffer.
void BM_ReadBandwidth(benchmark::State& state) {
  const size_t bytes = size_t{2} << 30;
  const size_t n = bytes / 8;
  auto* p = static_cast<uint64_t*>(std::aligned_alloc(64, bytes));
  for (size_t i = 0; i < n; ++i) p[i] = i;
  const bool avx = __builtin_cpu_supports("avx512f");
  const size_t parts = static_cast<size_t>(pool().size());
  std::vector<uint64_t> sums(parts * 8);
  for (auto _ : state) {
    pool().parallel_for(parts, [&](size_t t, int) {
      const size_t b = n * t / parts, e = n * (t + 1) / parts;
#if defined(__x86_64__)
      sums[t * 8] = avx ? sum_avx512(p + b, e - b) : sum_plain(p + b, e - b);
#else
      sums[t * 8] = sum_plain(p + b, e - b);
#endif
    });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["B/s"] =
      benchmark::Counter(static_cast<double>(bytes), benchmark::Counter::kIsIterationInvariantRate);
  std::free(p);
}
BENCHMARK(BM_ReadBandwidth)->UseRealTime()->Unit(benchmark::kMillisecond);

// ------------------------------------------------------------ int8 compute peak
// The machine's int8 multiply-add ceiling, the compute roofline of gemm_q at
// large M: each thread runs 12 independent vpdpbusd zmm chains on registers
// (no memory traffic). FLOP/s counts 2 per multiply-add, as BM_GemmQ does.
#if defined(__x86_64__)
__attribute__((target("avx512f,avx512vnni"))) int64_t vnni_chains(int64_t iters) {
  // Named registers, not an array (which GCC keeps on the stack here).
  // Different starts and operands the compiler cannot see, so that it can
  // neither merge the chains nor fold them into additions.
  __m512i a0 = _mm512_set1_epi32(0), a1 = _mm512_set1_epi32(1), a2 = _mm512_set1_epi32(2),
          a3 = _mm512_set1_epi32(3), a4 = _mm512_set1_epi32(4), a5 = _mm512_set1_epi32(5),
          a6 = _mm512_set1_epi32(6), a7 = _mm512_set1_epi32(7), a8 = _mm512_set1_epi32(8),
          a9 = _mm512_set1_epi32(9), a10 = _mm512_set1_epi32(10), a11 = _mm512_set1_epi32(11);
  __m512i u = _mm512_set1_epi8(3), v = _mm512_set1_epi8(-2);
  for (int64_t it = 0; it < iters; ++it) {
    __asm__("" : "+v"(u), "+v"(v));
    a0 = _mm512_dpbusd_epi32(a0, u, v);
    a1 = _mm512_dpbusd_epi32(a1, u, v);
    a2 = _mm512_dpbusd_epi32(a2, u, v);
    a3 = _mm512_dpbusd_epi32(a3, u, v);
    a4 = _mm512_dpbusd_epi32(a4, u, v);
    a5 = _mm512_dpbusd_epi32(a5, u, v);
    a6 = _mm512_dpbusd_epi32(a6, u, v);
    a7 = _mm512_dpbusd_epi32(a7, u, v);
    a8 = _mm512_dpbusd_epi32(a8, u, v);
    a9 = _mm512_dpbusd_epi32(a9, u, v);
    a10 = _mm512_dpbusd_epi32(a10, u, v);
    a11 = _mm512_dpbusd_epi32(a11, u, v);
  }
  const __m512i s = _mm512_add_epi32(
      _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7))),
      _mm512_add_epi32(_mm512_add_epi32(a8, a9), _mm512_add_epi32(a10, a11)));
  return _mm512_reduce_add_epi32(s);
}

void BM_VnniPeak(benchmark::State& state) {
  if (!k::cpu_has_avx512_vnni()) {
    state.SkipWithError("the CPU lacks avx512_vnni");
    return;
  }
  constexpr int64_t kIters = 1 << 20;
  const size_t parts = static_cast<size_t>(pool().size());
  std::vector<int64_t> sums(parts * 8);
  for (auto _ : state) {
    pool().parallel_for(parts, [&](size_t t, int) { sums[t * 8] = vnni_chains(kIters); });
    benchmark::DoNotOptimize(sums.data());
  }
  state.counters["FLOP/s"] = benchmark::Counter(static_cast<double>(parts) * kIters * 12 * 64 * 2,
                                                benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_VnniPeak)->UseRealTime()->Unit(benchmark::kMillisecond);
#endif

// Back-to-back tiny parallel_fors: the pool's hand-off cost per call.
void BM_PoolRoundTrip(benchmark::State& state) {
  std::atomic<int> sink{0};
  for (auto _ : state) pool().parallel_for(2, [&](size_t i, int) { sink += static_cast<int>(i); });
  benchmark::DoNotOptimize(sink.load());
}
BENCHMARK(BM_PoolRoundTrip)->UseRealTime();

}  // namespace
