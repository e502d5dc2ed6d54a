// CUDA RMSNorm, as kernels/rms_norm.h: out[i] = weight[i] · x[i] / sqrt(mean(x²) + eps) per row of
// [n, dim]; one block per row, fp32 with a tree reduction (so results differ from the CPU's
// sequential sum by rounding only). AddRmsNorm first adds `delta` into x (the residual) and then
// normalizes the sum. Device pointers; enqueued on `stream`. `out` may alias x (RmsNorm only).
#ifndef PDSERVE_KERNELS_CUDA_RMS_NORM_H_
#define PDSERVE_KERNELS_CUDA_RMS_NORM_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pdserve::kernels::cuda {

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out,
             cudaStream_t stream);

// x[r] += delta[r]; out[r] = RmsNorm(x[r]). out must alias neither x nor delta.
void AddRmsNorm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim,
                float eps, float* out, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_RMS_NORM_H_
