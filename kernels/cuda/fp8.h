// CUDA FP8 e4m3 quantization with CUDA's saturating conversion (__NV_SATFINITE, __NV_E4M3),
// bit-identical to kernels/fp8.h: code = e4m3(x / scale) with a true fp32 division, x̂ =
// float(code) · scale. Device pointers; enqueued on `stream`.
#ifndef PDSERVE_KERNELS_CUDA_FP8_H_
#define PDSERVE_KERNELS_CUDA_FP8_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pdserve::kernels::cuda {

void QuantizeE4M3(const float* x, int64_t n, float scale, uint8_t* codes, cudaStream_t stream);
void DequantizeE4M3(const uint8_t* codes, int64_t n, float scale, float* out, cudaStream_t stream);

// codes[i] = e4m3(float with bit pattern first + i), unscaled, for i < n (first + n ≤ 2^32): the
// exhaustive comparison with the CPU conversion.
void EncodeBitPatterns(uint32_t first, int64_t n, uint8_t* codes, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_FP8_H_
