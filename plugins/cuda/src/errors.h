// The CUDA plugin's error handling: the shared plugin support's, plus CUDA
// runtime errors turned into status codes.
#pragma once
#include "halo/plugin_support/errors.h"
#include "halo/plugin_support/options.h"

namespace halo::cuda {
using namespace halo::plugin;
}  // namespace halo::cuda

#include <cuda_runtime_api.h>

namespace halo::cuda {

// The ABI status of a CUDA error. The "sticky" errors leave the context
// unusable (every later call fails the same way): DEVICE_LOST, as the ABI
// promises for a device that no longer runs work.
inline halo_status_code status_of(cudaError_t e) {
  switch (e) {
    case cudaErrorMemoryAllocation: return HALO_STATUS_OUT_OF_MEMORY;
    case cudaErrorLaunchTimeout: return HALO_STATUS_DEADLINE_EXCEEDED;
    case cudaErrorDevicesUnavailable: return HALO_STATUS_UNAVAILABLE;
    case cudaErrorECCUncorrectable:
    case cudaErrorIllegalAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorMisalignedAddress:
    case cudaErrorInvalidPc: return HALO_STATUS_DEVICE_LOST;
    default: return HALO_STATUS_INTERNAL;
  }
}

// Throws the status of `e` naming the call and the CUDA error.
inline void check_cuda(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return;
  fail(status_of(e), what, ": ", cudaGetErrorName(e), " (", cudaGetErrorString(e), ")");
}

}  // namespace halo::cuda
