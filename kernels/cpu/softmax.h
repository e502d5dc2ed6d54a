// Internal: x[0, n) ← softmax(x[0, n)) in place, vectorized (e^x by a degree-6 polynomial on the
// range-reduced argument, Cephes' expf coefficients, so results differ from libm's expf in the
// last bits only; relative error below 2e-7).
#ifndef PDSERVE_KERNELS_CPU_SOFTMAX_H_
#define PDSERVE_KERNELS_CPU_SOFTMAX_H_

namespace pdserve::kernels {

// A row's maximum and the sum of e^(x − max) over it.
struct ExpStats {
  float max = 0.0f;
  float sum = 0.0f;
};

// Both require n ≥ 1 and finite inputs; the AVX-512 or AVX2 version, by ActiveSimdLevel().
// ExpInPlace: x[0, n) ← e^(x − max), returning the max and the sum of the results (an unnormalized
// softmax). SoftmaxInPlace: the same, then each element times 1/sum.
ExpStats ExpInPlace(float* x, int n);
void SoftmaxInPlace(float* x, int n);

namespace avx2 {  // e^x from exp_avx2.h
ExpStats ExpInPlace(float* x, int n);
void SoftmaxInPlace(float* x, int n);
}  // namespace avx2
namespace avx512 {  // the same polynomial on 16 lanes
ExpStats ExpInPlace(float* x, int n);
void SoftmaxInPlace(float* x, int n);
}  // namespace avx512

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_SOFTMAX_H_
