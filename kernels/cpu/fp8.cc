#include "kernels/fp8.h"

#include <immintrin.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <limits>

namespace pdserve::kernels {
namespace {

// Float bit patterns of the encoder's thresholds (magnitudes).
constexpr uint32_t kHalfMinSubnormalBits = 0x3A800000;  // 2^-10: at or below, flush to ±0
constexpr uint32_t kMinNormalBits = 0x3C800000;         // 2^-6
constexpr uint32_t kSaturateBits = 0x43E80000;          // 464 = 448 + half an ulp
constexpr uint32_t kInfBits = 0x7F800000;
// Subtracting this from a float's bits rebiases its exponent from 127 to 7.
constexpr uint32_t kRebias = (127 - 7) << 23;

// Drops the low `shift` bits of v (1 ≤ shift ≤ 31), rounding to nearest, ties to even.
uint32_t ShiftRightNearestEven(uint32_t v, int shift) {
  const uint32_t kept = v >> shift;
  const uint32_t dropped = v & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  return kept + (dropped > half || (dropped == half && (kept & 1)) ? 1 : 0);
}

}  // namespace

// CUDA's __nv_cvt_double_to_fp8 on the exactly widened float, done on the float's bits: the
// dropped bits below the float mantissa are zero in the double, so the rounding is the same.
uint8_t FloatToE4M3(float x) {
  const uint32_t bits = std::bit_cast<uint32_t>(x);
  const uint32_t sign = (bits >> 24) & 0x80;
  const uint32_t abs = bits & 0x7FFFFFFF;
  if (abs <= kHalfMinSubnormalBits) return static_cast<uint8_t>(sign);
  if (abs > kInfBits) return 0x7F;
  if (abs > kSaturateBits) return static_cast<uint8_t>(sign | 0x7E);
  if (abs >= kMinNormalBits) {
    // [exponent:4][mantissa:3] sits at bits 20..26 once rebiased; a carry bumps the exponent.
    return static_cast<uint8_t>(sign | ShiftRightNearestEven(abs - kRebias, 20));
  }
  // Subnormal: |x| = significand · 2^(exponent − 23), in units of 2^-9 that is
  // significand >> (14 − exponent); 2^-6·(1 − 2^-5) and up round to 0x08, the smallest normal.
  const uint32_t significand = (abs & 0x7FFFFF) | 0x800000;
  const int exponent = static_cast<int>(abs >> 23) - 127;  // in [-10, -7]
  return static_cast<uint8_t>(sign | ShiftRightNearestEven(significand, 14 - exponent));
}

float E4M3ToFloat(uint8_t code) {
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  const float magnitude = exponent == 0
                              ? std::ldexp(static_cast<float>(mantissa), -9)
                              : std::ldexp(static_cast<float>(8 + mantissa), exponent - 10);
  return (code & 0x80) ? -magnitude : magnitude;
}

const float* E4M3Table() {
  static const std::array<float, 256> table = [] {
    std::array<float, 256> t;
    for (int code = 0; code < 256; ++code) t[code] = E4M3ToFloat(static_cast<uint8_t>(code));
    return t;
  }();
  return table.data();
}

float E4M3ScaleFor(float amax) {
  if (!(amax > 0.0f) || !std::isfinite(amax)) return 1.0f;
  return std::max(amax / kE4M3Max, std::numeric_limits<float>::min());
}

void QuantizeE4M3Reference(const float* x, int64_t n, float scale, uint8_t* codes) {
  for (int64_t i = 0; i < n; ++i) codes[i] = FloatToE4M3(x[i] / scale);
}

void DequantizeE4M3Reference(const uint8_t* codes, int64_t n, float scale, float* out) {
  const float* table = E4M3Table();
  for (int64_t i = 0; i < n; ++i) out[i] = table[codes[i]] * scale;
}

// FloatToE4M3 on 8 lanes without branches. Subnormal results use the float adder's rounding
// (the default round-to-nearest-even mode): in 2^14 + |y| one ulp is 2^-9, one subnormal step,
// and values ≤ 2^-10 round to 2^14 itself, code 0.
void QuantizeE4M3(const float* x, int64_t n, float scale, uint8_t* codes) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 magic = _mm256_set1_ps(0x1p14f);
  const __m256i magic_bits = _mm256_set1_epi32(std::bit_cast<int32_t>(0x1p14f));
  const __m256i one = _mm256_set1_epi32(1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i bits = _mm256_castps_si256(_mm256_div_ps(_mm256_loadu_ps(x + i), vscale));
    const __m256i abs = _mm256_and_si256(bits, _mm256_set1_epi32(0x7FFFFFFF));
    const __m256i sign = _mm256_and_si256(_mm256_srli_epi32(bits, 24), _mm256_set1_epi32(0x80));
    // Normal: rebias, then round the low 20 bits away to nearest even.
    const __m256i v = _mm256_sub_epi32(abs, _mm256_set1_epi32(kRebias));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(v, 20), one);
    const __m256i normal = _mm256_srli_epi32(
        _mm256_add_epi32(v, _mm256_add_epi32(_mm256_set1_epi32(0x7FFFF), odd)), 20);
    const __m256i subnormal = _mm256_sub_epi32(
        _mm256_castps_si256(_mm256_add_ps(_mm256_castsi256_ps(abs), magic)), magic_bits);
    const __m256i is_normal = _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(kMinNormalBits - 1));
    __m256i code = _mm256_or_si256(_mm256_blendv_epi8(subnormal, normal, is_normal), sign);
    code = _mm256_blendv_epi8(code, _mm256_or_si256(sign, _mm256_set1_epi32(0x7E)),
                              _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(kSaturateBits)));
    code = _mm256_blendv_epi8(code, _mm256_set1_epi32(0x7F),
                              _mm256_cmpgt_epi32(abs, _mm256_set1_epi32(kInfBits)));
    const __m128i words =
        _mm_packus_epi32(_mm256_castsi256_si128(code), _mm256_extracti128_si256(code, 1));
    _mm_storel_epi64(reinterpret_cast<__m128i*>(codes + i), _mm_packus_epi16(words, words));
  }
  QuantizeE4M3Reference(x + i, n - i, scale, codes + i);
}

// E4M3ToFloat on 8 lanes: placing [exponent:4][mantissa:3] at float bits 20..26 gives
// (1 + m/8)·2^(e−127), or (m/8)·2^-126 when e = 0; multiplying by 2^120 (exact) rebiases both.
void DequantizeE4M3(const uint8_t* codes, int64_t n, float scale, float* out) {
  const __m256 vscale = _mm256_set1_ps(scale);
  const __m256 rebias = _mm256_set1_ps(0x1p120f);
  const __m256 nan = _mm256_set1_ps(std::numeric_limits<float>::quiet_NaN());
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256i c =
        _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(codes + i)));
    const __m256i magnitude_code = _mm256_and_si256(c, _mm256_set1_epi32(0x7F));
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x80)), 24);
    __m256 value =
        _mm256_mul_ps(_mm256_castsi256_ps(_mm256_slli_epi32(magnitude_code, 20)), rebias);
    value = _mm256_or_ps(value, _mm256_castsi256_ps(sign));
    const __m256i is_nan = _mm256_cmpeq_epi32(magnitude_code, _mm256_set1_epi32(0x7F));
    value = _mm256_blendv_ps(value, nan, _mm256_castsi256_ps(is_nan));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(value, vscale));
  }
  DequantizeE4M3Reference(codes + i, n - i, scale, out + i);
}

}  // namespace pdserve::kernels
