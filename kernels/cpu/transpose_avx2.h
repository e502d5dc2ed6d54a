// Internal: an 8 × 8 float transpose in AVX2 registers, for the project's baseline units (AVX2 is
// the baseline ISA, so this inline function compiles the same in every unit that includes it).
#ifndef PDSERVE_KERNELS_CPU_TRANSPOSE_AVX2_H_
#define PDSERVE_KERNELS_CPU_TRANSPOSE_AVX2_H_

#include <immintrin.h>

namespace pdserve::kernels {

// r[i] lane j ↔ r[j] lane i for i, j < 8.
inline void Transpose8x8(__m256 (&r)[8]) {
  __m256 t[8];  // t[2k], t[2k+1]: rows 2k and 2k+1 interleaved, lanes {0,1,4,5} and {2,3,6,7}
  for (int k = 0; k < 4; ++k) {
    t[2 * k] = _mm256_unpacklo_ps(r[2 * k], r[2 * k + 1]);
    t[2 * k + 1] = _mm256_unpackhi_ps(r[2 * k], r[2 * k + 1]);
  }
  // u[d] (d < 4): rows 0–3 of lane d in its low half, of lane d + 4 in its high half; u[4 + d]
  // the same for rows 4–7.
  __m256 u[8];
  for (int half = 0; half < 2; ++half) {
    const __m256* th = t + 4 * half;
    u[4 * half + 0] = _mm256_shuffle_ps(th[0], th[2], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * half + 1] = _mm256_shuffle_ps(th[0], th[2], _MM_SHUFFLE(3, 2, 3, 2));
    u[4 * half + 2] = _mm256_shuffle_ps(th[1], th[3], _MM_SHUFFLE(1, 0, 1, 0));
    u[4 * half + 3] = _mm256_shuffle_ps(th[1], th[3], _MM_SHUFFLE(3, 2, 3, 2));
  }
  for (int d = 0; d < 4; ++d) {
    r[d] = _mm256_permute2f128_ps(u[d], u[4 + d], 0x20);
    r[d + 4] = _mm256_permute2f128_ps(u[d], u[4 + d], 0x31);
  }
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_TRANSPOSE_AVX2_H_
