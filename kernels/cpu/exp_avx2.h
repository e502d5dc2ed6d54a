// Internal: e^x for 8 floats x ≤ 0 with AVX2 (softmax after subtracting the maximum; the sigmoid
// of SwiGLU as e^−|g|). A degree-6 polynomial on the range-reduced argument (Cephes' expf
// coefficients; relative error below 2e-7), so results differ from libm's expf in the last bits.
// Inputs below −87.3 give 0; a NaN gives e^−87.3. Include only from units built for AVX2 (an
// inline function compiled for AVX-512 elsewhere could be the copy the linker keeps).
#ifndef PDSERVE_KERNELS_CPU_EXP_AVX2_H_
#define PDSERVE_KERNELS_CPU_EXP_AVX2_H_

#include <immintrin.h>

namespace pdserve::kernels {

inline __m256 ExpNonPositive(__m256 x) {
  const __m256 min_x = _mm256_set1_ps(-87.3f);
  const __m256 below = _mm256_cmp_ps(x, min_x, _CMP_LT_OQ);
  x = _mm256_max_ps(x, min_x);
  // x = n·ln2 + r, |r| ≤ ln2/2, with ln2 split in two for an exact product.
  __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                             _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i pow2n =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(below, _mm256_mul_ps(p, _mm256_castsi256_ps(pow2n)));
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_EXP_AVX2_H_
