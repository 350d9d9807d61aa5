// The CUDA plugin: the halo_plugin_api table (device_abi.h v1.6). Loads and
// answers on machines without a GPU or driver: the CUDA runtime is linked
// statically and finds libcuda.so at run time, so device_count reports the
// runtime's reason instead of the library failing to load.
#include <cstdio>
#include <cstring>
#include <string_view>

#include "errors.h"
#include "halo/plugin_support/entry.h"
#include "model.h"

namespace halo::cuda {

namespace {

constexpr uint32_t kCapabilities =
    HALO_CAP_DTYPE_BF16 | HALO_CAP_DTYPE_FP16 | HALO_CAP_CHUNKED_PREFILL | HALO_CAP_MIXED_BATCH |
    HALO_CAP_BUFFERS | HALO_CAP_TENSOR_PARALLEL | HALO_CAP_HIDDEN_STATES | HALO_CAP_LORA;

int check_device_index(const char* where, int32_t index) {
  const int n = visible_devices(where);
  halo::plugin::check_device_index(where, index, n);
  return n;
}

void device_count(halo_device_count_args* args) {
  check_args("device_count", args, "device_count: args");
  args->count = 0;
  args->count = visible_devices("device_count");
}

void device_get_properties(halo_device_get_properties_args* args) {
  check_args("device_get_properties", args, "device_get_properties: args");
  check_device_index("device_get_properties", args->device_index);
  cudaDeviceProp prop{};
  check_cuda(cudaGetDeviceProperties(&prop, args->device_index), "device_get_properties: cudaGetDeviceProperties");
  size_t free_b = 0, total_b = 0;
  int prev = 0;
  check_cuda(cudaGetDevice(&prev), "device_get_properties: cudaGetDevice");
  check_cuda(cudaSetDevice(args->device_index), "device_get_properties: cudaSetDevice");
  const cudaError_t me = cudaMemGetInfo(&free_b, &total_b);
  cudaSetDevice(prev);
  check_cuda(me, "device_get_properties: cudaMemGetInfo");
  halo_device_properties p{};
  p.kind = HALO_DEVICE_KIND_GPU;
  const std::string name = cat(prop.name, " (sm_", prop.major, prop.minor, ", ", prop.multiProcessorCount, " SMs)");
  std::strncpy(p.name, name.c_str(), sizeof(p.name) - 1);
  std::strncpy(p.vendor, "NVIDIA", sizeof(p.vendor) - 1);
  p.memory_bytes = total_b;
  p.memory_free_bytes = free_b;
  p.num_chips = 1;
  p.capabilities = kCapabilities;
  p.kv_cache_dtypes = HALO_DTYPE_BIT(HALO_KV_DTYPE_BF16) | HALO_DTYPE_BIT(HALO_KV_DTYPE_FP16);
  p.quant_types =
      HALO_DTYPE_BIT(HALO_QUANT_INT8) | HALO_DTYPE_BIT(HALO_QUANT_UINT4);  // weight-only
  put_properties(args, p);
}

// Options: tensor_parallel_size=N (GPUs device_index .. device_index+N-1 act
// as one halo device), cuda_graphs=0|1 (decode graphs, on by default); any
// other key is refused.
void device_open(halo_device_open_args* args) {
  check_args("device_open", args, "device_open: args");
  const int n = check_device_index("device_open", args->device_index);
  OptionReader opts("device_open", args->options, args->num_options);
  const int tp = static_cast<int>(opts.integer("tensor_parallel_size", 1, 1, 1024));
  const bool graphs = opts.integer("cuda_graphs", 1, 0, 1) == 1;
  opts.refuse_unknown();  // prepare takes no options of its own
  if (args->device_index + tp > n)
    invalid("device_open: tensor_parallel_size=", tp, " from device_index=", args->device_index, " needs ",
            args->device_index + tp, " GPUs, ", n, " are visible");
  auto state = std::make_shared<DeviceState>();
  for (int i = 0; i < tp; ++i) state->ordinals.push_back(args->device_index + i);
  state->graphs = graphs;
  if (tp > 1) {
#if HALO_CUDA_HAVE_NCCL
    state->comms.resize(static_cast<size_t>(tp));
    const ncclResult_t r = ncclCommInitAll(state->comms.data(), tp, state->ordinals.data());
    if (r != ncclSuccess) {
      state->comms.clear();
      fail(HALO_STATUS_INTERNAL, "device_open: ncclCommInitAll over ", tp, " GPUs: ", ncclGetErrorString(r));
    }
#else
    fail(HALO_STATUS_UNIMPLEMENTED, "device_open: tensor_parallel_size=", tp,
         " needs NCCL, which was not found when this plugin was built");
#endif
  }
  auto dev = std::make_unique<halo_device>();
  dev->device_index = args->device_index;
  dev->state = std::move(state);
  args->device = dev.release();
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
  b->device = args->device->state->ordinals[0];
  b->bytes = bytes;
  check_cuda(cudaSetDevice(b->device), "buffer_from_host: cudaSetDevice");
  const cudaError_t e = cudaMalloc(&b->data, std::max<size_t>(bytes, 1));
  if (e != cudaSuccess) {
    b->data = nullptr;
    fail(HALO_STATUS_OUT_OF_MEMORY, "buffer_from_host: cannot allocate ", bytes, " bytes: ", cudaGetErrorString(e));
  }
  if (bytes > 0)
    check_cuda(cudaMemcpy(b->data, static_cast<const char*>(t->data) + t->byte_offset, bytes, cudaMemcpyHostToDevice),
               "buffer_from_host: cudaMemcpy");
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
  check_cuda(cudaSetDevice(b->device), "buffer_to_host: cudaSetDevice");
  if (bytes > 0)
    check_cuda(cudaMemcpy(static_cast<char*>(t->data) + t->byte_offset, b->data, bytes, cudaMemcpyDeviceToHost),
               "buffer_to_host: cudaMemcpy");
}

// Designated initializers: entries a newer header appends stay NULL
// (unsupported), as the ABI's evolution rules allow.
constexpr halo_plugin_api kApi = {
    .struct_size = sizeof(halo_plugin_api),
    .abi_major = HALO_ABI_VERSION_MAJOR,
    .abi_minor = HALO_ABI_VERSION_MINOR,
    .plugin_name = "cuda",
#if HALO_CUDA_HAVE_NCCL
    .plugin_version = "0.1.0 (bf16/fp16, cuBLAS, CUDA graphs, NCCL tensor parallel)",
#else
    .plugin_version = "0.1.0 (bf16/fp16, cuBLAS, CUDA graphs; built without NCCL)",
#endif
    .error_code = error_code,
    .error_message = error_message,
    .error_destroy = error_destroy,
    .device_count = entry<"device_count", device_count>,
    .device_get_properties = entry<"device_get_properties", device_get_properties>,
    .device_open = entry<"device_open", device_open>,
    .device_destroy = destroy<halo_device>,
    .prepare = entry<"prepare", prepare>,
    .executable_destroy = destroy<halo_executable>,
    .kv_cache_create = entry<"kv_cache_create", kv_cache_create>,
    .kv_cache_copy_blocks = entry<"kv_cache_copy_blocks", kv_cache_copy_blocks>,
    .kv_cache_destroy = destroy<halo_kv_cache>,
    .execute = entry<"execute", execute>,
    .buffer_from_host = entry<"buffer_from_host", buffer_from_host>,
    .buffer_to_host = entry<"buffer_to_host", buffer_to_host>,
    .buffer_destroy = destroy<halo_buffer>,
#if HALO_ABI_VERSION_MINOR >= 1
    .compile = nullptr,           // ahead-of-time compilation: not needed on GPUs
    .device_get_stats = nullptr,  // not implemented yet
#endif
#if HALO_ABI_VERSION_MINOR >= 3
    .device_measure_peak = nullptr,  // not measured yet (cuBLAS would)
#endif
#if HALO_ABI_VERSION_MINOR >= 6
    .lora_slot_set = entry<"lora_slot_set", lora_slot_set>,
#endif
};

}  // namespace
}  // namespace halo::cuda

extern "C" HALO_PLUGIN_EXPORT const halo_plugin_api* halo_plugin_get_api(void) { return &halo::cuda::kApi; }
