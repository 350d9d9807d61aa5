// The CPU plugin: the halo_plugin_api table (device_abi.h v1.6). Fast kernels by
// default; its fp32 reference kernels (kernels=reference) are the suite's reference.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "errors.h"
#include "halo/plugin_support/entry.h"
#include "halo/plugin_support/options.h"
#include "model.h"
#ifdef HALO_HAVE_ONEDNN
#include "halo/onednn/onednn.h"
#endif
#include "sysinfo.h"

namespace halo::cpu {

namespace {

constexpr uint32_t kCapabilities = HALO_CAP_DTYPE_FP32 | HALO_CAP_DTYPE_BF16 | HALO_CAP_DTYPE_FP16 |
                                   HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH |
                                   HALO_CAP_BUFFERS | HALO_CAP_HIDDEN_STATES | HALO_CAP_LORA;

void device_count(halo_device_count_args* args) {
  check_args("device_count", args, "device_count: args");
  args->count = 1;
}

void device_get_properties(halo_device_get_properties_args* args) {
  check_args("device_get_properties", args, "device_get_properties: args");
  check_device_index("device_get_properties", args->device_index, 1);
  const HostInfo info = host_info();
  halo_device_properties p{};
  p.kind = HALO_DEVICE_KIND_CPU;
  std::strncpy(p.name, info.model_name.c_str(), sizeof(p.name) - 1);
  std::strncpy(p.vendor, info.vendor.c_str(), sizeof(p.vendor) - 1);
  p.memory_bytes = info.memory_total;
  p.memory_free_bytes = info.memory_available;
  p.num_chips = 1;
  p.capabilities = kCapabilities;
  p.max_batch_size = 0;
  p.required_block_size = 0;
  p.max_model_len = 0;
  p.kv_cache_dtypes = HALO_DTYPE_BIT(HALO_KV_DTYPE_FP32) | HALO_DTYPE_BIT(HALO_KV_DTYPE_BF16);
  // Its option dtype: bfloat16 or float32 matmuls (no fp16 arithmetic).
  p.compute_dtypes = HALO_DTYPE_BIT(HALO_COMPUTE_DTYPE_FP32) | HALO_DTYPE_BIT(HALO_COMPUTE_DTYPE_BF16);
  // v1.4: quantized weights, run by the int8 GEMM (reference: dequantized to fp32).
  p.quant_types = kQuantTypes;
  put_properties(args, p);
}

void device_open(halo_device_open_args* args) {
  check_args("device_open", args, "device_open: args");
  check_device_index("device_open", args->device_index, 1);
  OptionReader r("device_open", args->options, args->num_options);
  const int threads = static_cast<int>(r.integer("threads", online_cpus(), 1, 1024));
  r.also_known({"kernels", "matmul", "dtype"});  // prepare's
  r.refuse_unknown();
  auto dev = std::make_unique<halo_device>();
  dev->device_index = args->device_index;
  dev->threads = threads;
  dev->state = std::make_shared<DeviceState>(threads);
  args->device = dev.release();
}

// v1.3: the bf16 matmul peak, through oneDNN (the fastest bf16 GEMM on the
// host), on the device's threads. Only bf16: the figure `halo bench` divides by.
void device_measure_peak(halo_device_measure_peak_args* args) {
  check_args("device_measure_peak", args, "device_measure_peak: args");
  if (args->device == nullptr) invalid("device_measure_peak: device is NULL");
  if (!(args->budget_seconds > 0))
    invalid("device_measure_peak: budget_seconds=", args->budget_seconds, " must be positive");
  if (args->compute_dtype != HALO_COMPUTE_DTYPE_BF16)
    fail(HALO_STATUS_UNIMPLEMENTED, "device_measure_peak: only bf16 is measured, not ",
         halo_compute_dtype_name(args->compute_dtype));
#ifdef HALO_HAVE_ONEDNN
  if (!onednn::available())
    fail(HALO_STATUS_UNIMPLEMENTED, "device_measure_peak: oneDNN has no bf16 matmul on this CPU");
  onednn::set_num_threads(args->device->threads);
  const onednn::Peak p = onednn::measure_bf16_matmul_peak(args->budget_seconds);
  args->flops_per_s = p.flops_per_s;
  std::snprintf(args->method, sizeof(args->method), "oneDNN %s, %zux%zux%zu", p.impl.c_str(), p.m,
                p.n, p.k);
#else
  fail(HALO_STATUS_UNIMPLEMENTED, "device_measure_peak: this plugin was built without oneDNN");
#endif
}

// ------------------------------------------------------------------ buffers

void buffer_from_host(halo_buffer_from_host_args* args) {
  check_args("buffer_from_host", args, "buffer_from_host: args");
  if (args->device == nullptr) invalid("buffer_from_host: device is NULL");
  const DLTensor* t = args->host;
  if (t == nullptr) invalid("buffer_from_host: host is NULL");
  const size_t bytes = host_tensor_bytes("buffer_from_host", t);
  auto b = std::make_unique<halo_buffer>();
  b->dtype = t->dtype;
  b->shape.assign(t->shape, t->shape + t->ndim);
  b->bytes.resize(bytes);
  if (bytes > 0) std::memcpy(b->bytes.data(), static_cast<const char*>(t->data) + t->byte_offset, bytes);
  args->buffer = b.release();
}

void buffer_to_host(halo_buffer_to_host_args* args) {
  check_args("buffer_to_host", args, "buffer_to_host: args");
  const halo_buffer* b = args->buffer;
  if (b == nullptr) invalid("buffer_to_host: buffer is NULL");
  DLTensor* t = args->host;
  if (t == nullptr) invalid("buffer_to_host: host is NULL");
  const size_t bytes = host_tensor_bytes("buffer_to_host", t);
  check_host_matches_buffer("buffer_to_host", t, b->dtype, b->shape);
  if (bytes > 0) std::memcpy(static_cast<char*>(t->data) + t->byte_offset, b->bytes.data(), bytes);
}

constexpr halo_plugin_api kApi = {
    sizeof(halo_plugin_api),
    HALO_ABI_VERSION_MAJOR,
    HALO_ABI_VERSION_MINOR,
    "cpu",
    // What `halo devices` shows: the default path first, then how to get the other.
    "0.1.0 (fast path by default: bf16 GEMM and KV for 16-bit weights, int8 GEMM for quantized "
    "ones, fp32 otherwise; "
    "fp32 reference kernels with HALO_CPU_KERNELS=reference)",
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
    entry<"buffer_from_host", buffer_from_host>,
    entry<"buffer_to_host", buffer_to_host>,
    destroy<halo_buffer>,
    nullptr,  // compile: the CPU runs Hugging Face weights directly
    nullptr,  // device_get_stats
    entry<"device_measure_peak", device_measure_peak>,
    entry<"lora_slot_set", lora_slot_set>,
};

}  // namespace
}  // namespace halo::cpu

extern "C" HALO_PLUGIN_EXPORT const halo_plugin_api* halo_plugin_get_api(void) { return &halo::cpu::kApi; }
