// Launch shape shared by the elementwise CUDA kernels of pdserve_cuda_ops (embedding, rope,
// swiglu, residual, conversion): kElementwiseThreads threads per block and a grid-stride loop over
// int64 element indices, with the grid capped so that any element count launches within the
// limits. Internal to kernels/cuda .cu files; device code only besides ElementwiseBlocks.
#ifndef PDSERVE_KERNELS_CUDA_ELEMENTWISE_CUH_
#define PDSERVE_KERNELS_CUDA_ELEMENTWISE_CUH_

#include <algorithm>
#include <cstdint>

namespace pdserve::kernels::cuda::internal {

inline constexpr int kElementwiseThreads = 256;
inline constexpr int64_t kMaxElementwiseBlocks = int64_t{1} << 16;

// Blocks for `count` > 0 elements: one element per thread up to kMaxElementwiseBlocks blocks,
// beyond which threads loop.
inline unsigned ElementwiseBlocks(int64_t count) {
  const int64_t blocks = (count + kElementwiseThreads - 1) / kElementwiseThreads;
  return static_cast<unsigned>(std::min(blocks, kMaxElementwiseBlocks));
}

// The first element index of this thread and the stride of the grid-stride loop.
__device__ inline int64_t FirstElement() { return int64_t{blockIdx.x} * blockDim.x + threadIdx.x; }
__device__ inline int64_t GridStride() { return int64_t{gridDim.x} * blockDim.x; }

}  // namespace pdserve::kernels::cuda::internal

#endif  // PDSERVE_KERNELS_CUDA_ELEMENTWISE_CUH_
