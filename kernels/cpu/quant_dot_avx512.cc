// AVX-512BW dot products of Q8_0 and Q4_0 weight rows with int8 activation blocks (see
// quant_dot.h): two 32-element blocks per 512-bit step, unsigned × signed byte products summed
// pairwise (maddubs) and widened (madd) as in the AVX2 kernels, each block's int32 sums scaled by
// its own d_w·d_a. Compiled with -march=x86-64-v4 and only called when the CPU reports AVX-512;
// everything but QuantDot stays in the anonymous namespace (see matmul_avx512.cc).
#include <immintrin.h>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"

namespace pdserve::kernels::avx512 {
namespace {

using namespace quant;  // NOLINT: the block formats

float F16(uint16_t h) { return _cvtsh_ss(h); }

// Two 256-bit halves as one 512-bit register: lo in lanes 0-7 (32-bit), hi in 8-15.
__m512i Join(__m256i lo, __m256i hi) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1);
}

__m512i Load2(const int8_t* lo, const int8_t* hi) {
  return Join(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(lo)),
              _mm256_loadu_si256(reinterpret_cast<const __m256i*>(hi)));
}

// The 32 codes (0-15) of each of two Q4_0 blocks, in element order: a block's low nibbles are its
// elements 0-15, its high nibbles 16-31.
__m512i Codes2(const uint8_t* qs0, const uint8_t* qs1) {
  const __m256i bytes = _mm256_set_m128i(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs1)),
                                         _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs0)));
  const __m256i low4 = _mm256_set1_epi8(0x0F);
  const __m512i t = Join(_mm256_and_si256(bytes, low4),                         // [low0 | low1]
                         _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4));  // [high0 | high1]
  return _mm512_shuffle_i64x2(t, t, _MM_SHUFFLE(3, 1, 2, 0));  // [low0, high0, low1, high1]
}

// 16 int32 sums of 4 adjacent products of unsigned bytes u and signed bytes s.
__m512i Products(__m512i u, __m512i s) {
  return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

// Scales s0 for lanes 0-7 and s1 for lanes 8-15.
__m512 Scales(float s0, float s1) {
  return _mm512_insertf32x8(_mm512_set1_ps(s0), _mm256_set1_ps(s1), 1);
}

// Σ over the row: Q8_0 as |w| × (a with w's sign); Q4_0 with unsigned codes, the codes' offset of
// 8 removed through the activations' sums (d_w·d_a·Σ code·qa − 8·d_w·d_a·Σ qa).
template <DType D>
float Dot32(const void* w, const void* act, int64_t cols) {
  const auto* a = static_cast<const ActBlock32*>(act);
  const int64_t blocks = cols / kQK;
  __m512 acc = _mm512_setzero_ps();
  float offset = 0.0f;  // Q4_0: Σ d_w·(d_a·Σ qa)
  int64_t i = 0;
  for (; i + 2 <= blocks; i += 2) {
    const __m512i qa = Load2(a[i].qs, a[i + 1].qs);
    __m512i sums;
    float d0, d1;
    if constexpr (D == DType::kQ8_0) {
      const auto* b = static_cast<const BlockQ8_0*>(w) + i;
      const __m512i q = Load2(b[0].qs, b[1].qs);
      const __m512i signed_a =
          _mm512_mask_sub_epi8(qa, _mm512_movepi8_mask(q), _mm512_setzero_si512(), qa);
      sums = Products(_mm512_abs_epi8(q), signed_a);
      d0 = F16(b[0].d);
      d1 = F16(b[1].d);
    } else {
      const auto* b = static_cast<const BlockQ4_0*>(w) + i;
      sums = Products(Codes2(b[0].qs, b[1].qs), qa);
      d0 = F16(b[0].d);
      d1 = F16(b[1].d);
      offset += d0 * a[i].sum + d1 * a[i + 1].sum;
    }
    acc = _mm512_fmadd_ps(Scales(d0 * a[i].d, d1 * a[i + 1].d), _mm512_cvtepi32_ps(sums), acc);
  }
  float sum = _mm512_reduce_add_ps(acc);
  if (i < blocks) {  // an odd last block: the scalar reference's arithmetic
    sum += ScalarQuantDot(D)(static_cast<const uint8_t*>(w) + i * RowBytes(D, kQK), a + i, kQK);
  }
  return D == DType::kQ4_0 ? sum - 8.0f * offset : sum;
}

}  // namespace

QuantDotFn QuantDot(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return Dot32<DType::kQ8_0>;
    case DType::kQ4_0:
      return Dot32<DType::kQ4_0>;
    default:
      return nullptr;
  }
}

}  // namespace pdserve::kernels::avx512
