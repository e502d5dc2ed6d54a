// Internal: x[0, n) ← softmax(x[0, n)) in place, vectorized with AVX2 (e^x from exp_avx2.h, so
// results differ from libm's expf in the last bits only).
#ifndef PDSERVE_KERNELS_CPU_SOFTMAX_H_
#define PDSERVE_KERNELS_CPU_SOFTMAX_H_

namespace pdserve::kernels {

// Requires n ≥ 1 and finite inputs.
void SoftmaxInPlace(float* x, int n);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_SOFTMAX_H_
