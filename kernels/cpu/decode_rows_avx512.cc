// AVX-512 (F/BW/VL/DQ) decode row kernels (decode_rows.h): 16 lanes, masked tails. Compiled with
// -march=x86-64-v4 and only called when the CPU reports AVX-512 (kernels/cpu_features.h).
#include <immintrin.h>

#include "kernels/cpu/decode_rows.h"
#include "kernels/fp8.h"

namespace pdserve::kernels::avx512 {
namespace {

struct Simd {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kScoreQueries = 3;       // 24 accumulators of the 32 registers
  static constexpr int kAccumulateQueries = 4;  // 4 × 4 accumulators

  static V Zero() { return _mm512_setzero_ps(); }
  static V Set1(float x) { return _mm512_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }

  static __mmask16 Mask(int n) { return static_cast<__mmask16>((1u << n) - 1u); }
  static V LoadF32(const float* p, int n) {
    return n == kLanes ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(Mask(n), p);
  }
  static void Store(float* p, V v, int n) {
    if (n == kLanes) {
      _mm512_storeu_ps(p, v);
    } else {
      _mm512_mask_storeu_ps(p, Mask(n), v);
    }
  }
  static V LoadF16(const uint16_t* p, int n) {
    return _mm512_cvtph_ps(n == kLanes ? _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
                                       : _mm256_maskz_loadu_epi16(Mask(n), p));
  }
  // As the AVX2 unit's: the sign-extended code shifted left by 7 is the f16 of value · 2^-8 once
  // bit 14 (a copy of the sign) is cleared.
  static V LoadE4M3(const uint8_t* p, int n) {
    const __m128i codes = n == kLanes ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                      : _mm_maskz_loadu_epi8(Mask(n), p);
    const __m256i words = _mm256_cvtepi8_epi16(codes);
    return _mm512_cvtph_ps(
        _mm256_and_si256(_mm256_slli_epi16(words, 7), _mm256_set1_epi16(-16385)));
  }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
  // Each accumulator's halves added, then the eight 8-lane sums as in the AVX2 unit.
  static __m256 Sums8(const V acc[8]) {
    __m256 h[8];
    for (int r = 0; r < 8; ++r) {
      h[r] = _mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1));
    }
    const __m256 r0123 = _mm256_hadd_ps(_mm256_hadd_ps(h[0], h[1]), _mm256_hadd_ps(h[2], h[3]));
    const __m256 r4567 = _mm256_hadd_ps(_mm256_hadd_ps(h[4], h[5]), _mm256_hadd_ps(h[6], h[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(r0123, r4567, 0x20),
                         _mm256_permute2f128_ps(r0123, r4567, 0x31));
  }
  // The largest code & 0x7F over all n codes is 0x7F exactly when one of them is a NaN: one
  // branch for the whole run instead of one per vector.
  static bool HasNanCode(const uint8_t* p, int64_t n) {
    const __m512i low7 = _mm512_set1_epi8(0x7F);
    __m512i top = _mm512_setzero_si512();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
      top = _mm512_max_epu8(top, _mm512_and_si512(_mm512_loadu_si512(p + i), low7));
    }
    if (i < n) {
      const __mmask64 live = (__mmask64{1} << (n - i)) - 1;
      top = _mm512_max_epu8(top, _mm512_and_si512(_mm512_maskz_loadu_epi8(live, p + i), low7));
    }
    return _mm512_cmpeq_epi8_mask(top, low7) != 0;
  }
};

#include "kernels/cpu/decode_rows.inc"

}  // namespace

const DecodeRowKernels kDecodeRows = kKernels;

}  // namespace pdserve::kernels::avx512
