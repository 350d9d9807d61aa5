// --device rbln: the halo_plugin_api table (device_abi.h v1.3) of an
// ATOM-style NPU reached through a Level Zero-shaped driver (the simulator in
// plugins/rbln/sim, or a vendor driver with the same API).
#include <dlfcn.h>

#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>

#include "halo/kernels/kernels.h"
#include "halo/plugin_support/entry.h"
#include "halo/plugin_support/validate.h"
#include "runtime.h"

namespace halo::rbln {

void ze_check(ze_result_t r, const char* what) {
  if (r == ZE_RESULT_SUCCESS) return;
  const char* msg = zeRblnGetLastErrorMessage();
  halo_status_code code = HALO_STATUS_INTERNAL;
  const char* kind = "error";
  switch (r) {
    case ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY: code = HALO_STATUS_OUT_OF_MEMORY; kind = "ZE_RESULT_ERROR_OUT_OF_DEVICE_MEMORY"; break;
    case ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY: code = HALO_STATUS_OUT_OF_MEMORY; kind = "ZE_RESULT_ERROR_OUT_OF_HOST_MEMORY"; break;
    case ZE_RESULT_ERROR_DEVICE_LOST: code = HALO_STATUS_DEVICE_LOST; kind = "ZE_RESULT_ERROR_DEVICE_LOST"; break;
    case ZE_RESULT_NOT_READY: code = HALO_STATUS_DEADLINE_EXCEEDED; kind = "timed out (ZE_RESULT_NOT_READY)"; break;
    case ZE_RESULT_ERROR_INVALID_ARGUMENT: code = HALO_STATUS_INVALID_ARGUMENT; kind = "ZE_RESULT_ERROR_INVALID_ARGUMENT"; break;
    case ZE_RESULT_ERROR_UNSUPPORTED_FEATURE: code = HALO_STATUS_UNIMPLEMENTED; kind = "ZE_RESULT_ERROR_UNSUPPORTED_FEATURE"; break;
    default: break;
  }
  fail(code, what, ": ", kind, msg && *msg ? ": " : "", msg ? msg : "");
}

namespace {

std::string default_profile() {
  if (const char* env = std::getenv("HALO_RBLN_PROFILE"); env && *env) return env;
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&default_profile), &info) && info.dli_fname) {
    namespace fs = std::filesystem;
    const fs::path p = fs::path(info.dli_fname).parent_path() / HALO_RBLN_PROFILE_RELPATH;
    std::error_code ec;
    if (fs::exists(p, ec)) return p.lexically_normal().string();
  }
  return HALO_RBLN_SOURCE_PROFILE;
}

}  // namespace

Driver& driver(const std::string& profile, uint32_t host_threads) {
  static std::mutex mu;
  static Driver d;
  std::lock_guard<std::mutex> lock(mu);
  const std::string want = profile.empty() ? default_profile() : profile;
  if (d.driver != nullptr && want == d.profile) return d;
  ze_rbln_sim_desc_t sd{};
  sd.profile_path = want.c_str();
  sd.faults = nullptr;  // HALO_RBLN_FAULT, if set
  sd.host_threads = host_threads;
  ze_check(zeRblnSimConfigure(&sd), "rbln: configuring the device");
  ze_check(zeInit(0), "rbln: zeInit");
  uint32_t n = 1;
  ze_check(zeDriverGet(&n, &d.driver), "rbln: zeDriverGet");
  uint32_t chips = 0;
  ze_check(zeDeviceGet(d.driver, &chips, nullptr), "rbln: zeDeviceGet");
  d.chips.assign(chips, nullptr);
  ze_check(zeDeviceGet(d.driver, &chips, d.chips.data()), "rbln: zeDeviceGet");
  if (d.context == nullptr) {
    ze_context_desc_t cd{};
    cd.stype = ZE_STRUCTURE_TYPE_CONTEXT_DESC;
    ze_check(zeContextCreate(d.driver, &cd, &d.context), "rbln: zeContextCreate");
  }
  ze_check(zeRblnSimGetProperties(&d.props), "rbln: device properties");
  d.profile = want;
  return d;
}

ModelDims model_dims(const halo_model_spec& s, uint32_t weight_dtype) {
  ModelDims m;
  auto& d = m.desc;
  d.vocab = static_cast<uint32_t>(s.vocab_size);
  d.hidden = static_cast<uint32_t>(s.hidden_size);
  d.intermediate = static_cast<uint32_t>(s.intermediate_size);
  d.layers = static_cast<uint32_t>(s.num_layers);
  d.heads = static_cast<uint32_t>(s.num_heads);
  d.kv_heads = static_cast<uint32_t>(s.num_kv_heads);
  d.head_dim = static_cast<uint32_t>(s.head_dim);
  d.rms_norm_eps = s.rms_norm_eps;
  d.activation = s.activation == HALO_ACTIVATION_GELU_TANH ? 1u : 0u;
  d.flags = s.flags & (HALO_MODEL_QKV_BIAS | HALO_MODEL_QK_NORM);
  d.weight_dtype = weight_dtype;
  const kernels::RopeParams rp = rope_params(s);
  m.inv_freq.resize(static_cast<size_t>(s.head_dim / 2));
  kernels::rope_inv_freq(rp, static_cast<size_t>(s.head_dim), m.inv_freq.data());
  d.rope_inv_freq = m.inv_freq.data();
  return m;
}

nlohmann::json spec_to_json(const halo_model_spec& s) {
  return {{"architecture", s.architecture ? s.architecture : ""},
          {"vocab_size", s.vocab_size},
          {"hidden_size", s.hidden_size},
          {"intermediate_size", s.intermediate_size},
          {"num_layers", s.num_layers},
          {"num_heads", s.num_heads},
          {"num_kv_heads", s.num_kv_heads},
          {"head_dim", s.head_dim},
          {"max_position_embeddings", s.max_position_embeddings},
          {"rms_norm_eps", s.rms_norm_eps},
          {"rope_theta", s.rope_theta},
          {"rope_scaling", static_cast<int>(s.rope_scaling)},
          {"rope_factor", s.rope_factor},
          {"rope_low_freq_factor", s.rope_low_freq_factor},
          {"rope_high_freq_factor", s.rope_high_freq_factor},
          {"rope_original_max_position", s.rope_original_max_position},
          {"activation", static_cast<int>(s.activation)},
          {"flags", s.flags}};
}

namespace {

constexpr uint32_t kCapabilities =
    HALO_CAP_DTYPE_BF16 | HALO_CAP_DTYPE_FP16 | HALO_CAP_STATIC_SHAPES | HALO_CAP_TENSOR_PARALLEL;

void device_count(halo_device_count_args* args) {
  check_args(args, "device_count: args");
  args->count = 1;  // one RSD group of `chips` chips
}

void device_get_properties(halo_device_get_properties_args* args) {
  check_args(args, "device_get_properties: args");
  check_device_index("device_get_properties", args->device_index, 1);
  Driver& d = driver();
  halo_device_properties p{};
  p.kind = HALO_DEVICE_KIND_NPU;
  std::snprintf(p.name, sizeof(p.name), "%s", d.props.name);
  std::snprintf(p.vendor, sizeof(p.vendor), "Rebellions-style (simulated)");
  uint64_t free_bytes = 0;
  for (ze_device_handle_t c : d.chips) {
    uint64_t used = 0, cap = 0;
    ze_check(zeRblnDeviceGetMemoryUsage(c, &used, &cap), "device_get_properties");
    p.memory_bytes += cap;
    free_bytes += cap - used;
  }
  p.memory_free_bytes = free_bytes;
  p.num_chips = static_cast<int32_t>(d.chips.size());
  p.capabilities = kCapabilities;
  p.kv_cache_dtypes = HALO_DTYPE_BIT(HALO_KV_DTYPE_FP32);
  // Weight-only int8 (symmetric, per output channel or per group of a multiple
  // of 16), what ATOM-class NPUs run; no 4-bit.
  p.quant_types = HALO_DTYPE_BIT(HALO_QUANT_INT8);
  // Batch size, block size and max length are fixed per compiled model
  // (halo compile), not by the device: 0 here, the compiled values at prepare.
  put_properties(args, p);
}

void device_open(halo_device_open_args* args) {
  check_args(args, "device_open: args");
  check_device_index("device_open", args->device_index, 1);
  OptionReader opts("device_open", args->options, args->num_options);
  const auto threads = opts.integer("threads", 0, 0, 1024);
  const std::string profile(opts.str("profile", ""));
  opts.also_known(kDeviceKeys);  // command_timeout_ms: read below, its default is the profile's
  opts.also_known(kPrepareKeys);
  opts.refuse_unknown();
  auto dev = std::make_unique<halo_device>();
  dev->drv = &driver(profile, static_cast<uint32_t>(threads));
  dev->command_timeout_ms = static_cast<int>(
      opts.integer("command_timeout_ms", dev->drv->props.command_timeout_ms, 1, 86400000));
  args->device = dev.release();
}

void device_get_stats(halo_device_get_stats_args* args) {
  check_args(args, "device_get_stats: args");
  check_device_index("device_get_stats", args->device_index, 1);
  halo_device_stats* out = args->stats;
  if (out == nullptr) invalid("device_get_stats: stats is NULL");
  if (out->struct_size < sizeof(halo_device_stats))
    invalid("device_get_stats: stats->struct_size=", out->struct_size, " is smaller than ", sizeof(halo_device_stats));
  Driver& d = driver();
  halo_device_stats s{};
  s.struct_size = out->struct_size;
  s.num_chips = static_cast<int32_t>(std::min<size_t>(d.chips.size(), HALO_MAX_CHIPS));
  for (int32_t i = 0; i < s.num_chips; ++i) {
    ze_rbln_clock_t c{};
    ze_check(zeRblnDeviceGetClock(d.chips[static_cast<size_t>(i)], &c), "device_get_stats");
    // Chips of one program run in lockstep: the busiest chip's clock is the device's.
    if (c.total.total_s > s.device_seconds) {
      s.steps = c.executions;
      s.tokens = c.rows;
      s.device_seconds = c.total.total_s;
      s.compute_seconds = c.total.compute_s;
      s.memory_seconds = c.total.memory_s;
      s.link_seconds = c.total.link_s;
    }
    ze_check(zeRblnDeviceGetMemoryUsage(d.chips[static_cast<size_t>(i)], &s.chip_memory_used[i],
                                        &s.chip_memory_capacity[i]),
             "device_get_stats");
  }
  *out = s;
}

// v1.3: the 16-bit matmul peak of the chip group, from the device profile's
// data sheet (the simulator's cost model runs at that peak times its efficiency).
void device_measure_peak(halo_device_measure_peak_args* args) {
  check_args(args, "device_measure_peak: args");
  if (args->device == nullptr) invalid("device_measure_peak: device is NULL");
  if (!(args->budget_seconds > 0))
    invalid("device_measure_peak: budget_seconds=", args->budget_seconds, " must be positive");
  const int32_t dt = args->compute_dtype;
  if (dt != HALO_COMPUTE_DTYPE_BF16 && dt != HALO_COMPUTE_DTYPE_FP16)
    fail(HALO_STATUS_UNIMPLEMENTED, "device_measure_peak: the NPU computes bf16 or fp16, not ",
         halo_compute_dtype_name(dt));
  const Driver& d = *args->device->drv;
  const size_t chips = d.chips.size();
  args->flops_per_s = d.props.peak_flops * static_cast<double>(chips);
  std::snprintf(args->method, sizeof(args->method), "device profile: %zu chip(s) x %.1f TFLOP/s",
                chips, d.props.peak_flops / 1e12);
}

constexpr halo_plugin_api kApi = {
    sizeof(halo_plugin_api),
    HALO_ABI_VERSION_MAJOR,
    HALO_ABI_VERSION_MINOR,
    "rbln",
    "0.1.0 (ATOM-style NPU, simulated driver)",
    error_code,
    error_message,
    error_destroy,
    entry<"device_count", device_count>,
    entry<"device_get_properties", device_get_properties>,
    entry<"device_open", device_open>,
    destroy<halo_device>,
    entry<"prepare", prepare>,
    destroy<halo_executable>,
    entry<"kv_cache_create", kv_cache_create>,
    entry<"kv_cache_copy_blocks", kv_cache_copy_blocks>,
    destroy<halo_kv_cache>,
    entry<"execute", execute>,
    nullptr,  // buffer_from_host (no HALO_CAP_BUFFERS)
    nullptr,  // buffer_to_host
    nullptr,  // buffer_destroy
    entry<"compile", compile>,
    entry<"device_get_stats", device_get_stats>,
    entry<"device_measure_peak", device_measure_peak>,
    nullptr,  // lora_slot_set (v1.6): no HALO_CAP_LORA, compiled graphs carry no adapters
};

}  // namespace
}  // namespace halo::rbln

extern "C" HALO_PLUGIN_EXPORT const halo_plugin_api* halo_plugin_get_api(void) { return &halo::rbln::kApi; }
