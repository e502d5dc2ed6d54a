// Internal: x[0, n) ← softmax(x[0, n)) in place, vectorized (e^x by a degree-6 polynomial on the
// range-reduced argument, Cephes' expf coefficients, so results differ from libm's expf in the
// last bits only; relative error below 2e-7).
#ifndef PDSERVE_KERNELS_CPU_SOFTMAX_H_
#define PDSERVE_KERNELS_CPU_SOFTMAX_H_

namespace pdserve::kernels {

// Requires n ≥ 1 and finite inputs. The AVX-512 or AVX2 version, by ActiveSimdLevel().
void SoftmaxInPlace(float* x, int n);

namespace avx2 {
void SoftmaxInPlace(float* x, int n);  // e^x from exp_avx2.h
}  // namespace avx2
namespace avx512 {
void SoftmaxInPlace(float* x, int n);  // the same polynomial on 16 lanes
}  // namespace avx512

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_SOFTMAX_H_
