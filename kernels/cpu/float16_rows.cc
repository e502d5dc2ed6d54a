#include "kernels/float16_rows.h"

#include <immintrin.h>

#include <algorithm>

#include "core/tensor/float16.h"
#include "kernels/cpu/gemv_kernels.h"

namespace pdserve::kernels {
namespace {

// x clamped to ±kF16Max; a NaN x passes through (every comparison with it is false).
float Saturate(float x) { return std::clamp(x, -kF16Max, kF16Max); }

// x narrowed to f16, clamped to ±kF16Max first when kSaturate.
template <bool kSaturate>
void Narrow(const float* x, int64_t n, uint16_t* out) {
  const __m256 hi = _mm256_set1_ps(kF16Max), lo = _mm256_set1_ps(-kF16Max);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_loadu_ps(x + i);
    // min and max return their second operand when one is NaN: a NaN v passes through.
    if constexpr (kSaturate) v = _mm256_max_ps(lo, _mm256_min_ps(hi, v));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i),
                     _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  }
  for (; i < n; ++i) out[i] = F32ToF16(kSaturate ? Saturate(x[i]) : x[i]);
}

}  // namespace

void FloatsToF16Saturating(const float* x, int64_t n, uint16_t* out) { Narrow<true>(x, n, out); }

void FloatsToF16(const float* x, int64_t n, uint16_t* out) { Narrow<false>(x, n, out); }

void F16ToFloats(const uint16_t* h, int64_t n, float* out) {
  avx2::WidenRow(h, DType::kF16, n, out);
}

}  // namespace pdserve::kernels
