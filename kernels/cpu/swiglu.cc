#include "kernels/swiglu.h"

#include <immintrin.h>

#include <cmath>

#include "kernels/cpu/exp_avx2.h"

namespace pdserve::kernels {

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 one = _mm256_set1_ps(1.0f);
  const __m256 magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    // sigmoid(g) = 1 / (1 + e^−g) for g ≥ 0, e^g / (1 + e^g) below: e^−|g| never overflows.
    const __m256 e =
        ExpNonPositive(_mm256_sub_ps(_mm256_setzero_ps(), _mm256_and_ps(g, magnitude)));
    const __m256 inverse = _mm256_div_ps(one, _mm256_add_ps(one, e));
    const __m256 sigmoid = _mm256_blendv_ps(_mm256_mul_ps(e, inverse), inverse,
                                            _mm256_cmp_ps(g, _mm256_setzero_ps(), _CMP_GE_OQ));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) {
    const float g = gate[i];
    out[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
  }
}

}  // namespace pdserve::kernels
