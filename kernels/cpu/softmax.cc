#include "kernels/cpu/softmax.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "kernels/cpu/exp_avx2.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {
namespace {

inline float Sum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

}  // namespace

namespace avx2 {

ExpStats ExpInPlace(float* x, int n) {
  const float max_value = *std::max_element(x, x + n);
  const __m256 vmax = _mm256_set1_ps(max_value);
  __m256 vsum = _mm256_setzero_ps();
  int i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 e = ExpNonPositive(_mm256_sub_ps(_mm256_loadu_ps(x + i), vmax));
    _mm256_storeu_ps(x + i, e);
    vsum = _mm256_add_ps(vsum, e);
  }
  float sum = Sum(vsum);
  for (; i < n; ++i) {
    x[i] = std::exp(x[i] - max_value);
    sum += x[i];
  }
  return {max_value, sum};
}

void SoftmaxInPlace(float* x, int n) {
  const float sum = ExpInPlace(x, n).sum;
  const __m256 inv = _mm256_set1_ps(1.0f / sum);
  int i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, _mm256_mul_ps(_mm256_loadu_ps(x + i), inv));
  for (; i < n; ++i) x[i] *= 1.0f / sum;
}

}  // namespace avx2

ExpStats ExpInPlace(float* x, int n) {
  return ActiveSimdLevel() == SimdLevel::kAvx512 ? avx512::ExpInPlace(x, n)
                                                 : avx2::ExpInPlace(x, n);
}

void SoftmaxInPlace(float* x, int n) {
  if (ActiveSimdLevel() == SimdLevel::kAvx512) {
    avx512::SoftmaxInPlace(x, n);
  } else {
    avx2::SoftmaxInPlace(x, n);
  }
}

}  // namespace pdserve::kernels
