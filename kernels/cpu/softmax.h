// Internal: x[0, n) ← softmax(x[0, n)) in place, vectorized with AVX2. exp is a degree-6
// polynomial on the range-reduced argument (Cephes' expf coefficients; relative error below
// 2e-7 on the range softmax uses), so results differ from libm's expf in the last bits only.
#ifndef PDSERVE_KERNELS_CPU_SOFTMAX_H_
#define PDSERVE_KERNELS_CPU_SOFTMAX_H_

namespace pdserve::kernels {

// Requires n ≥ 1 and finite inputs.
void SoftmaxInPlace(float* x, int n);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_SOFTMAX_H_
