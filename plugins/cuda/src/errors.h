// The CUDA plugin's error handling: the shared plugin support's, plus CUDA
// runtime errors turned into status codes.
#pragma once
#include "halo/plugin_support/errors.h"

namespace halo::cuda {
using namespace halo::plugin;
}  // namespace halo::cuda

#include <cuda_runtime_api.h>

namespace halo::cuda {

// Throws INTERNAL (or OUT_OF_MEMORY) naming the call and the CUDA error.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  const halo_status_code code = e == cudaErrorMemoryAllocation ? HALO_STATUS_OUT_OF_MEMORY : HALO_STATUS_INTERNAL;
  fail(code, what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

}  // namespace halo::cuda
