// Narrowing fp32 activations to a 16-bit dtype on the device, for cuBLAS's 16-bit GEMMs (gemm.cc).
// Implemented in residual.cu. Internal to pdserve_cuda_ops.
#ifndef PDSERVE_KERNELS_CUDA_CONVERT_H_
#define PDSERVE_KERNELS_CUDA_CONVERT_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace pdserve::kernels::cuda {

// dst[i] = x[i] rounded to nearest even in `dtype` (kF16 or kBF16; kF32 does nothing) for
// i < count; dst holds count 16-bit values. Device pointers; enqueued on `stream`.
void ConvertF32To16(const float* x, int64_t count, DType dtype, void* dst, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_CONVERT_H_
