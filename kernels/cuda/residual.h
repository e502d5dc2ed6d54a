// CUDA residual add and row gather. Device pointers; enqueued on `stream`.
#ifndef PDSERVE_KERNELS_CUDA_RESIDUAL_H_
#define PDSERVE_KERNELS_CUDA_RESIDUAL_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pdserve::kernels::cuda {

// x[i] += y[i] for i < count.
void AddInPlace(float* x, const float* y, int64_t count, cudaStream_t stream);

// dst row r = src row rows[r] for r < n (rows of `width` floats); dst must not alias src.
void GatherRows(const float* src, const int32_t* rows, int64_t n, int64_t width, float* dst,
                cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_RESIDUAL_H_
