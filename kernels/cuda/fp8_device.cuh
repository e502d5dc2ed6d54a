// Device-side FP8 e4m3 conversions for CUDA kernels (include from .cu files only). Encoding is
// CUDA's own saturating conversion, which kernels/fp8.h's FloatToE4M3 reproduces bit for bit on
// the CPU; decoding is exact (0x7F/0xFF decode to NaN).
#ifndef PDSERVE_KERNELS_CUDA_FP8_DEVICE_CUH_
#define PDSERVE_KERNELS_CUDA_FP8_DEVICE_CUH_

#include <cuda_fp8.h>

#include <cstdint>

namespace pdserve::kernels::cuda {

__device__ __forceinline__ uint8_t EncodeE4M3(float x) {
  return static_cast<uint8_t>(__nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3));
}

__device__ __forceinline__ float DecodeE4M3(uint8_t code) {
  const __half_raw half = __nv_cvt_fp8_to_halfraw(static_cast<__nv_fp8_storage_t>(code), __NV_E4M3);
  return __half2float(__half(half));
}

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_FP8_DEVICE_CUH_
