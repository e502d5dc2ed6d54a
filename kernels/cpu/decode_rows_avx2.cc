// AVX2 + F16C + FMA decode row kernels (decode_rows.h): 8 lanes.
#include <immintrin.h>

#include <cstring>

#include "kernels/cpu/decode_rows.h"

namespace pdserve::kernels::avx2 {
namespace {

struct Simd {
  using V = __m256;
  static constexpr int kLanes = 8;
  static constexpr int kRegisters = 16;
  static constexpr int kScoreQueries = 2;       // 2 × 4 or 1 × 8 accumulators
  static constexpr int kAccumulateQueries = 4;  // 4 × 2, or up to 2 × 4, accumulators

  static V Zero() { return _mm256_setzero_ps(); }
  static V Set1(float x) { return _mm256_set1_ps(x); }
  static V Fma(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }

  static __m256i Mask(int n) {
    alignas(32) static constexpr int32_t kLanesOn[16] = {-1, -1, -1, -1, -1, -1, -1, -1,
                                                         0,  0,  0,  0,  0,  0,  0,  0};
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(kLanesOn + 8 - n));
  }
  static V LoadF32(const float* p, int n) {
    return n == kLanes ? _mm256_loadu_ps(p) : _mm256_maskload_ps(p, Mask(n));
  }
  static void Store(float* p, V v, int n) {
    if (n == kLanes) {
      _mm256_storeu_ps(p, v);
    } else {
      _mm256_maskstore_ps(p, Mask(n), v);
    }
  }
  static V LoadF16(const uint16_t* p, int n) {
    if (n == kLanes) return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    alignas(16) uint16_t part[kLanes] = {};
    std::memcpy(part, p, sizeof(uint16_t) * static_cast<size_t>(n));
    return _mm256_cvtph_ps(_mm_load_si128(reinterpret_cast<const __m128i*>(part)));
  }
  // What the E4M3 loads saw: the running unsigned max of (code | 0x80), 0xFF exactly where a NaN
  // code (0x7F, 0xFF) was among them.
  using Seen = __m128i;
  static Seen NoneSeen() { return _mm_setzero_si128(); }
  static Seen Union(Seen a, Seen b) { return _mm_max_epu8(a, b); }
  static bool SawNan(Seen seen) {
    return _mm_movemask_epi8(_mm_cmpeq_epi8(seen, _mm_set1_epi8(-1))) != 0;
  }
  // Sign-extending the byte puts the sign in bits 8..15; shifted left by 7, [exponent:4]
  // [mantissa:3] sits where an f16's low exponent and high mantissa bits are, the sign at 15,
  // and a copy of it at 14 (the f16 exponent's top bit), cleared.
  // A full vector is one 8-byte load; only a tail goes through memcpy (of a variable size, a
  // library call). The bytes past the codes are 0, which notes nothing.
  static V LoadE4M3(const uint8_t* p, int n, Seen& seen) {
    __m128i bytes;
    if (n == kLanes) {
      bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    } else {
      int64_t codes = 0;
      std::memcpy(&codes, p, static_cast<size_t>(n));
      bytes = _mm_cvtsi64_si128(codes);
    }
    seen = _mm_max_epu8(seen, _mm_or_si128(bytes, _mm_set1_epi8(-128)));
    const __m128i words = _mm_cvtepi8_epi16(bytes);
    return _mm256_cvtph_ps(_mm_and_si128(_mm_slli_epi16(words, 7), _mm_set1_epi16(-16385)));
  }
  // Two LoadE4M3s: widening 16 codes together saves no shuffle µop at this width.
  static void LoadE4M3Pair(const uint8_t* p, V& lo, V& hi, Seen& seen) {
    lo = LoadE4M3(p, kLanes, seen);
    hi = LoadE4M3(p + kLanes, kLanes, seen);
  }
  static float Sum(V v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehdup_ps(s)));
  }
  static __m256 Sums8(const V acc[8]) {
    const __m256 r0123 =
        _mm256_hadd_ps(_mm256_hadd_ps(acc[0], acc[1]), _mm256_hadd_ps(acc[2], acc[3]));
    const __m256 r4567 =
        _mm256_hadd_ps(_mm256_hadd_ps(acc[4], acc[5]), _mm256_hadd_ps(acc[6], acc[7]));
    return _mm256_add_ps(_mm256_permute2f128_ps(r0123, r4567, 0x20),
                         _mm256_permute2f128_ps(r0123, r4567, 0x31));
  }
};

#include "kernels/cpu/decode_rows.inc"

}  // namespace

const DecodeRowKernels kDecodeRows = kKernels;

}  // namespace pdserve::kernels::avx2
