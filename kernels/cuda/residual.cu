#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "kernels/cuda/convert.h"
#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/residual.h"

namespace pdserve::kernels::cuda {
namespace {

using internal::ElementwiseBlocks;
using internal::FirstElement;
using internal::GridStride;
using internal::kElementwiseThreads;

__global__ void __launch_bounds__(kElementwiseThreads)
    AddKernel(float* x, const float* y, int64_t count) {
  for (int64_t e = FirstElement(); e < count; e += GridStride()) x[e] += y[e];
}

__global__ void __launch_bounds__(kElementwiseThreads)
    GatherKernel(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst) {
  const int64_t count = n * width;
  for (int64_t e = FirstElement(); e < count; e += GridStride()) {
    const int64_t r = e / width, c = e - r * width;
    dst[e] = src[int64_t{rows[r]} * width + c];
  }
}

__device__ void Narrow(float v, __nv_bfloat16* out) { *out = __float2bfloat16_rn(v); }
__device__ void Narrow(float v, __half* out) { *out = __float2half_rn(v); }

template <typename T>
__global__ void __launch_bounds__(kElementwiseThreads)
    ConvertKernel(const float* x, int64_t count, T* dst) {
  for (int64_t e = FirstElement(); e < count; e += GridStride()) Narrow(x[e], &dst[e]);
}

}  // namespace

void AddInPlace(float* x, const float* y, int64_t count, cudaStream_t stream) {
  if (count <= 0) return;
  AddKernel<<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream>>>(x, y, count);
}

void GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst,
                cudaStream_t stream) {
  const int64_t count = n * width;
  if (count <= 0) return;
  GatherKernel<<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream>>>(src, rows, n, width,
                                                                             dst);
}

void ConvertF32To16(const float* x, int64_t count, DType dtype, void* dst, cudaStream_t stream) {
  if (count <= 0) return;
  const unsigned blocks = ElementwiseBlocks(count);
  switch (dtype) {
    case DType::kF32:
      return;
    case DType::kF16:
      ConvertKernel<<<blocks, kElementwiseThreads, 0, stream>>>(x, count,
                                                                static_cast<__half*>(dst));
      return;
    case DType::kBF16:
      ConvertKernel<<<blocks, kElementwiseThreads, 0, stream>>>(x, count,
                                                                static_cast<__nv_bfloat16*>(dst));
      return;
    default:
      return;  // the GPU runs plain dtypes only (CudaEngine dequantizes at load)
  }
}

}  // namespace pdserve::kernels::cuda
