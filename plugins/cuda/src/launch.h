// Kernel launches (launch.cu is the plugin's only CUDA translation unit).
// Host code includes the kernel headers for their Params structs and calls
// launch<K>; the instantiations below are the complete set that exists.
#pragma once

#include <cuda_runtime_api.h>

#include "kernels/attention.cuh"
#include "kernels/elementwise.cuh"
#include "kernels/lora.cuh"
#include "kernels/quant_matmul.cuh"

namespace halo::cuda {

// Launches K with the given grid, 1-D block and dynamic shared memory (bytes;
// above 48 KiB the opt-in attribute is set first).
template <class K>
cudaError_t launch(const typename K::Params& p, k::Dim3 grid, int threads, size_t smem_bytes, cudaStream_t stream);

#define HALO_CUDA_FOR_EACH_KERNEL(X, T) \
  X(k::EmbedKernel<T>)                  \
  X(k::RmsNormKernel<T>)                \
  X(k::RopeKvKernel<T>)                 \
  X(k::GatedActKernel<T>)               \
  X(k::DecodeAttnKernel<T>)             \
  X(k::DecodeReduceKernel<T>)           \
  X(k::PrefillAttnKernel<T>)            \
  X(k::QuantGemvInt8<T>)                \
  X(k::QuantGemvUint4<T>)               \
  X(k::QuantTiledInt8<T>)               \
  X(k::QuantTiledUint4<T>)              \
  X(k::LoraShrink<T>)

#define HALO_CUDA_DECLARE_LAUNCH(K) \
  extern template cudaError_t launch<K>(const K::Params&, k::Dim3, int, size_t, cudaStream_t);
HALO_CUDA_FOR_EACH_KERNEL(HALO_CUDA_DECLARE_LAUNCH, k::bf16)
HALO_CUDA_FOR_EACH_KERNEL(HALO_CUDA_DECLARE_LAUNCH, k::f16)
HALO_CUDA_DECLARE_LAUNCH(k::CopyBlocksKernel)
HALO_CUDA_DECLARE_LAUNCH(k::LoraExpand)
#undef HALO_CUDA_DECLARE_LAUNCH

}  // namespace halo::cuda
