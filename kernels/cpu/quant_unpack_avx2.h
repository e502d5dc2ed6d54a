// Internal: AVX2 unpacking of ggml block codes into bytes, shared by the AVX2 dot products
// (quant_dot_avx2.cc) and dequantization (dequantize_avx2.cc). Both are compiled with the
// project's base flags (x86-64-v3), so these inline functions mean the same code in each.
#ifndef PDSERVE_KERNELS_CPU_QUANT_UNPACK_AVX2_H_
#define PDSERVE_KERNELS_CPU_QUANT_UNPACK_AVX2_H_

#include <immintrin.h>

#include <cstdint>
#include <cstring>

#include "core/tensor/quant_blocks.h"

namespace pdserve::kernels::avx2 {

// f16 → f32 in one instruction (F16C; exact, like F16ToF32).
inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// The 32 nibbles of 16 bytes in element order: low nibbles (elements 0-15), then high (16-31).
// The 16 bytes go to both lanes in the load (vbroadcasti128), the high lane shifts by 4: no
// cross-lane shuffle.
inline __m256i Nibbles32(const uint8_t* qs) {
  const __m256i both =
      _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(qs)));
  return _mm256_and_si256(_mm256_srlv_epi64(both, _mm256_setr_epi64x(0, 0, 4, 4)),
                          _mm256_set1_epi8(0x0F));
}

// Q5_0/Q5_1: the fifth bits of a block's 32 elements as 0x10 bytes in element order, from its 4
// bytes of qh (bit j: element j's).
inline __m256i FifthBits32(const uint8_t* qh) {
  int32_t bits;
  std::memcpy(&bits, qh, sizeof(bits));
  // Byte j of the result takes qh's byte j / 8, then keeps bit j % 8 of it.
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(bits), _mm256_setr_epi64x(0x0000000000000000, 0x0101010101010101,
                                                  0x0202020202020202, 0x0303030303030303));
  const __m256i bit = _mm256_set1_epi64x(0x8040201008040201);
  const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
  return _mm256_and_si256(set, _mm256_set1_epi8(0x10));
}

// Q4_K/Q5_K: the codes of 64-element chunk `chunk` (0-3) of a block, from its 32 bytes of qs
// (low nibbles: sub-block 2·chunk into *lo, high: 2·chunk + 1 into *hi) and, for Q5_K, the fifth
// bits from the block's 32 bytes of qh (qh == nullptr for Q4_K).
inline void K4Codes(const uint8_t* qs, const uint8_t* qh, int chunk, __m256i* lo, __m256i* hi) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit = _mm256_set1_epi8(1);
  const __m256i bytes = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qs + 32 * chunk));
  *lo = _mm256_and_si256(bytes, low4);
  *hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
  if (qh == nullptr) return;
  const __m256i high = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
  *lo = _mm256_or_si256(
      *lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * chunk), bit), 4));
  *hi = _mm256_or_si256(
      *hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(high, 2 * chunk + 1), bit), 4));
}

// K4Codes' qh argument for a block: Q5_K's fifth bits; Q4_K has none.
inline const uint8_t* QhOf(const quant::BlockQ4_K&) { return nullptr; }
inline const uint8_t* QhOf(const quant::BlockQ5_K& b) { return b.qh; }

// Q6_K: the 128 codes (0-63) of one half of a block as four groups of 32 elements, from its 64
// bytes of ql (low 4 bits) and 32 bytes of qh (high 2 bits).
inline void Q6KCodes(const uint8_t* ql, const uint8_t* qh, __m256i q[4]) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x03);
  const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
  const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
  const __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qh));
  auto high = [&](int shift) {
    return _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(h, shift), two), 4);
  };
  q[0] = _mm256_or_si256(_mm256_and_si256(ql0, low4), high(0));
  q[1] = _mm256_or_si256(_mm256_and_si256(ql1, low4), high(2));
  q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4), high(4));
  q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4), high(6));
}

}  // namespace pdserve::kernels::avx2

#endif  // PDSERVE_KERNELS_CPU_QUANT_UNPACK_AVX2_H_
