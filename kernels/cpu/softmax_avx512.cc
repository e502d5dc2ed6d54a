// AVX-512 softmax (softmax.h): exp_avx2.h's polynomial on 16 lanes, masked tails. Compiled with
// -march=x86-64-v4 and only called when the CPU reports AVX-512; everything but the two entry
// points stays in the anonymous namespace (see matmul_avx512.cc).
#include <immintrin.h>

#include "kernels/cpu/softmax.h"

namespace pdserve::kernels::avx512 {
namespace {

// e^x for x ≤ 0, as ExpNonPositive (exp_avx2.h): below −87.3 gives 0.
__m512 ExpNonPositive(__m512 x) {
  const __m512 min_x = _mm512_set1_ps(-87.3f);
  const __mmask16 below = _mm512_cmp_ps_mask(x, min_x, _CMP_LT_OQ);
  x = _mm512_max_ps(x, min_x);
  // x = n·ln2 + r, |r| ≤ ln2/2, with ln2 split in two for an exact product.
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
  __m512 p = _mm512_set1_ps(1.9875691500e-4f);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
  p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
  const __m512i pow2n =
      _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127)), 23);
  return _mm512_maskz_mul_ps(static_cast<__mmask16>(~below), p, _mm512_castsi512_ps(pow2n));
}

__mmask16 Lanes(int left) {
  return left >= 16 ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << left) - 1u);
}

}  // namespace

ExpStats ExpInPlace(float* x, int n) {
  const int full = n / 16 * 16;
  // Two accumulators per reduction, so that consecutive vectors do not wait on each other.
  __m512 max0 = _mm512_set1_ps(x[0]), max1 = max0;
  int i = 0;
  for (; i + 32 <= full; i += 32) {
    max0 = _mm512_max_ps(max0, _mm512_loadu_ps(x + i));
    max1 = _mm512_max_ps(max1, _mm512_loadu_ps(x + i + 16));
  }
  if (i < full) max0 = _mm512_max_ps(max0, _mm512_loadu_ps(x + i));
  if (full < n) max1 = _mm512_max_ps(max1, _mm512_mask_loadu_ps(max1, Lanes(n - full), x + full));
  const float max_value = _mm512_reduce_max_ps(_mm512_max_ps(max0, max1));
  const __m512 vmax = _mm512_set1_ps(max_value);
  __m512 sum0 = _mm512_setzero_ps(), sum1 = sum0;
  for (i = 0; i + 32 <= full; i += 32) {
    const __m512 e0 = ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(x + i), vmax));
    const __m512 e1 = ExpNonPositive(_mm512_sub_ps(_mm512_loadu_ps(x + i + 16), vmax));
    _mm512_storeu_ps(x + i, e0);
    _mm512_storeu_ps(x + i + 16, e1);
    sum0 = _mm512_add_ps(sum0, e0);
    sum1 = _mm512_add_ps(sum1, e1);
  }
  for (; i < n; i += 16) {
    const __mmask16 live = Lanes(n - i);
    const __m512 e = ExpNonPositive(_mm512_sub_ps(_mm512_maskz_loadu_ps(live, x + i), vmax));
    _mm512_mask_storeu_ps(x + i, live, e);
    sum0 = _mm512_mask_add_ps(sum0, live, sum0, e);
  }
  return {max_value, _mm512_reduce_add_ps(_mm512_add_ps(sum0, sum1))};
}

void SoftmaxInPlace(float* x, int n) {
  const int full = n / 16 * 16;
  const __m512 inv = _mm512_set1_ps(1.0f / ExpInPlace(x, n).sum);
  for (int i = 0; i < full; i += 16)
    _mm512_storeu_ps(x + i, _mm512_mul_ps(_mm512_loadu_ps(x + i), inv));
  if (full < n) {
    const __mmask16 live = Lanes(n - full);
    _mm512_mask_storeu_ps(x + full, live,
                          _mm512_mul_ps(_mm512_maskz_loadu_ps(live, x + full), inv));
  }
}

}  // namespace pdserve::kernels::avx512
