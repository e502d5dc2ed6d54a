// AVX-512 (F/BW/VL/DQ) decode row kernels (decode_rows.h): 16 lanes, masked tails. Compiled with
// -march=x86-64-v4 and only called when the CPU reports AVX-512 (kernels/cpu_features.h).
#include <immintrin.h>

#include "kernels/cpu/decode_rows.h"

namespace pdserve::kernels::avx512 {
namespace {

struct Simd {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kRegisters = 32;
  static constexpr int kScoreQueries = 4;       // 4 × 4 or up to 3 × 8 accumulators
  static constexpr int kAccumulateQueries = 8;  // 8 × 2, or up to 5 × 4, accumulators

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
  // What the E4M3 loads saw: the running unsigned max of (code | 0x80), 0xFF exactly where a NaN
  // code (0x7F, 0xFF) was among them.
  using Seen = __m256i;
  static Seen NoneSeen() { return _mm256_setzero_si256(); }
  static Seen Union(Seen a, Seen b) { return _mm256_max_epu8(a, b); }
  static Seen Note(Seen seen, __m256i codes) {
    return _mm256_max_epu8(seen, _mm256_or_si256(codes, _mm256_set1_epi8(-128)));
  }
  static bool SawNan(Seen seen) {
    return _mm256_movemask_epi8(_mm256_cmpeq_epi8(seen, _mm256_set1_epi8(-1))) != 0;
  }
  // As the AVX2 unit's: the sign-extended code shifted left by 7 is the f16 of value · 2^-8 once
  // bit 14 (a copy of the sign) is cleared.
  static V LoadE4M3(const uint8_t* p, int n, Seen& seen) {
    const __m128i codes = n == kLanes ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                                      : _mm_maskz_loadu_epi8(Mask(n), p);
    seen = Note(seen, _mm256_zextsi128_si256(codes));
    const __m256i words = _mm256_cvtepi8_epi16(codes);
    return _mm512_cvtph_ps(
        _mm256_and_si256(_mm256_slli_epi16(words, 7), _mm256_set1_epi16(-16385)));
  }
  // One sign extension and one shift for 32 codes, where LoadE4M3 takes one each per 16.
  static void LoadE4M3Pair(const uint8_t* p, V& lo, V& hi, Seen& seen) {
    const __m256i codes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    seen = Note(seen, codes);
    const __m512i words = _mm512_cvtepi8_epi16(codes);
    const __m512i halves = _mm512_and_si512(_mm512_slli_epi16(words, 7), _mm512_set1_epi16(-16385));
    lo = _mm512_cvtph_ps(_mm512_castsi512_si256(halves));
    hi = _mm512_cvtph_ps(_mm512_extracti64x4_epi64(halves, 1));
  }
  static float Sum(V v) { return _mm512_reduce_add_ps(v); }
  // A tree of lane shuffles, each level adding pairs and halving the lanes a row holds: 256-bit
  // halves (8 rows × 8 lanes in four vectors), 128-bit quarters (4 rows a vector), 64-bit pairs
  // (8 rows × 2 lanes, rows r and r + 4 in each 128-bit lane), then adjacent lanes; the eight
  // sums are gathered into one __m256 last. Fewer shuffles than halving each row on its own.
  static __m256 Sums8(const V acc[8]) {
    V halves[4];
    for (int i = 0; i < 4; ++i) {
      halves[i] = _mm512_add_ps(_mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0x44),
                                _mm512_shuffle_f32x4(acc[2 * i], acc[2 * i + 1], 0xEE));
    }
    V quarters[2];
    for (int i = 0; i < 2; ++i) {
      quarters[i] = _mm512_add_ps(_mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0x88),
                                  _mm512_shuffle_f32x4(halves[2 * i], halves[2 * i + 1], 0xDD));
    }
    const __m512d q0 = _mm512_castps_pd(quarters[0]);
    const __m512d q1 = _mm512_castps_pd(quarters[1]);
    const V pairs = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(q0, q1)),
                                  _mm512_castpd_ps(_mm512_unpackhi_pd(q0, q1)));
    const V sums = _mm512_add_ps(pairs, _mm512_permute_ps(pairs, 0xB1));
    // Row r < 4 is at lane 4r, row r + 4 at lane 4r + 2.
    const __m512i order = _mm512_setr_epi32(0, 4, 8, 12, 2, 6, 10, 14, 0, 0, 0, 0, 0, 0, 0, 0);
    return _mm512_castps512_ps256(_mm512_permutexvar_ps(order, sums));
  }
};

#include "kernels/cpu/decode_rows.inc"

}  // namespace

const DecodeRowKernels kDecodeRows = kKernels;

}  // namespace pdserve::kernels::avx512
