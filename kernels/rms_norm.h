// RmsNorm: out[i] = weight[i] · x[i] / sqrt(mean(x²) + eps), row by row over [n, dim].
// `out` may alias `x`. The fast path vectorizes the sum of squares; the reference sums
// sequentially in fp32 (as llama2.c does).
#ifndef PDSERVE_KERNELS_RMS_NORM_H_
#define PDSERVE_KERNELS_RMS_NORM_H_

#include <cstdint>

namespace pdserve::kernels {

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out);
void RmsNormReference(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                      float* out);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_RMS_NORM_H_
