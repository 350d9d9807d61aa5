// The plugin's one CUDA translation unit: the generic __global__ wrapper
// that runs a kernel's step() phases with a barrier between them, and the
// explicit instantiations (12 kernels x {bf16, fp16} + block copy + LoRA expand).
#include <atomic>

#include "launch.h"

namespace halo::cuda {
namespace {

template <class K>
__global__ void run_kernel(const typename K::Params p) {
  extern __shared__ float4 smem_raw[];
  k::Ctx c;
  c.block = k::Dim3{static_cast<int>(blockIdx.x), static_cast<int>(blockIdx.y), static_cast<int>(blockIdx.z)};
  c.grid = k::Dim3{static_cast<int>(gridDim.x), static_cast<int>(gridDim.y), static_cast<int>(gridDim.z)};
  c.tid = static_cast<int>(threadIdx.x);
  c.nthreads = static_cast<int>(blockDim.x);
  c.smem = reinterpret_cast<float*>(smem_raw);
  typename K::Regs r{};
  int phase = 0;
  for (;;) {
    const int next = K::step(phase, p, c, r);
    if (next < 0) break;
    __syncthreads();
    phase = next;
  }
}

}  // namespace

template <class K>
cudaError_t launch(const typename K::Params& p, k::Dim3 grid, int threads, size_t smem_bytes, cudaStream_t stream) {
  if (grid.x <= 0 || grid.y <= 0 || grid.z <= 0) return cudaSuccess;
  static std::atomic<size_t> opted_in{48 * 1024};
  if (smem_bytes > opted_in.load(std::memory_order_relaxed)) {
    const cudaError_t e = cudaFuncSetAttribute(reinterpret_cast<const void*>(&run_kernel<K>),
                                               cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_bytes));
    if (e != cudaSuccess) return e;
    opted_in.store(smem_bytes, std::memory_order_relaxed);
  }
  run_kernel<K><<<dim3(grid.x, grid.y, grid.z), threads, smem_bytes, stream>>>(p);
  return cudaGetLastError();
}

#define HALO_CUDA_DEFINE_LAUNCH(K) \
  template cudaError_t launch<K>(const K::Params&, k::Dim3, int, size_t, cudaStream_t);
HALO_CUDA_FOR_EACH_KERNEL(HALO_CUDA_DEFINE_LAUNCH, k::bf16)
HALO_CUDA_FOR_EACH_KERNEL(HALO_CUDA_DEFINE_LAUNCH, k::f16)
HALO_CUDA_DEFINE_LAUNCH(k::CopyBlocksKernel)
HALO_CUDA_DEFINE_LAUNCH(k::LoraExpand)

}  // namespace halo::cuda
