#include <cuda_runtime.h>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/embedding.h"

namespace pdserve::kernels::cuda {
namespace {

using internal::ElementwiseBlocks;
using internal::FirstElement;
using internal::GridStride;
using internal::kElementwiseThreads;

// The bit-level conversions of core/tensor/float16.h (F16ToF32, BF16ToF32), so that GPU and CPU
// lookups agree bit for bit on every 16-bit pattern, NaN payloads and subnormals included.
__device__ float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exponent = (h >> 10) & 0x1fu;
  const uint32_t mantissa = h & 0x3ffu;
  if (exponent == 0x1f) return __uint_as_float(sign | 0x7f800000u | (mantissa << 13));
  if (exponent == 0) {
    // Zero or subnormal: mantissa · 2^-24, exact in fp32.
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return __uint_as_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

__device__ float BF16ToF32(uint16_t h) { return __uint_as_float(static_cast<uint32_t>(h) << 16); }

template <DType kDType>
__device__ float Element(const void* table, int64_t index) {
  if constexpr (kDType == DType::kF32) {
    return static_cast<const float*>(table)[index];
  } else if constexpr (kDType == DType::kF16) {
    return F16ToF32(static_cast<const uint16_t*>(table)[index]);
  } else {
    return BF16ToF32(static_cast<const uint16_t*>(table)[index]);
  }
}

// out[e] for e < n · dim: element e % dim of table row ids[e / dim].
template <DType kDType>
__global__ void __launch_bounds__(kElementwiseThreads)
    EmbeddingKernel(const void* table, int64_t dim, const int32_t* ids, int64_t n, float* out) {
  const int64_t count = n * dim;
  for (int64_t e = FirstElement(); e < count; e += GridStride()) {
    const int64_t row = e / dim, c = e - row * dim;
    out[e] = Element<kDType>(table, int64_t{ids[row]} * dim + c);
  }
}

}  // namespace

void EmbeddingLookup(const void* table, DType dtype, int64_t dim, const int32_t* ids, int64_t n,
                     float* out, cudaStream_t stream) {
  const int64_t count = n * dim;
  if (count <= 0) return;
  const unsigned blocks = ElementwiseBlocks(count);
  switch (dtype) {
    case DType::kF32:
      EmbeddingKernel<DType::kF32>
          <<<blocks, kElementwiseThreads, 0, stream>>>(table, dim, ids, n, out);
      return;
    case DType::kF16:
      EmbeddingKernel<DType::kF16>
          <<<blocks, kElementwiseThreads, 0, stream>>>(table, dim, ids, n, out);
      return;
    case DType::kBF16:
      EmbeddingKernel<DType::kBF16>
          <<<blocks, kElementwiseThreads, 0, stream>>>(table, dim, ids, n, out);
      return;
    default:
      return;  // the GPU runs plain dtypes only (CudaEngine dequantizes at load)
  }
}

}  // namespace pdserve::kernels::cuda
