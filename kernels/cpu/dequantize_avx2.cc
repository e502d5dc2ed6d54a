// AVX2 dequantization of ggml block rows for prefill (Matmul widens 128-row tiles before SGEMM).
// The same arithmetic as quant::DequantizeRow, operation for operation (a product, then a
// difference, never fused), so the floats are identical.
#include <immintrin.h>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"

namespace pdserve::kernels::avx2 {
namespace {

using namespace quant;  // NOLINT: the block formats

inline float Half(uint16_t h) { return _cvtsh_ss(h); }

// y[k] = float(bytes[k])·scale (− shift when `kShift`) for 32 bytes, signed or unsigned; the last
// 16 use `scale_last16` (Q6_K's sub-blocks are 16 elements).
template <bool kSigned, bool kShift>
inline void Store32(__m256i bytes, float scale, float scale_last16, float shift, float* y) {
  const __m256 m = _mm256_set1_ps(shift);
  const __m128i halves[2] = {_mm256_castsi256_si128(bytes), _mm256_extracti128_si256(bytes, 1)};
  for (int k = 0; k < 4; ++k) {
    const __m128i eight = k % 2 == 0 ? halves[k / 2] : _mm_srli_si128(halves[k / 2], 8);
    const __m256i wide = kSigned ? _mm256_cvtepi8_epi32(eight) : _mm256_cvtepu8_epi32(eight);
    __m256 v =
        _mm256_mul_ps(_mm256_cvtepi32_ps(wide), _mm256_set1_ps(k < 2 ? scale : scale_last16));
    if constexpr (kShift) v = _mm256_sub_ps(v, m);
    _mm256_storeu_ps(y + 8 * k, v);
  }
}

inline __m256i Nibbles32(const uint8_t* qs) {
  const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(bytes, 4), bytes);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0F));
}

void RowQ8_0(const BlockQ8_0* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i, y += kQK) {
    const float d = Half(x[i].d);
    Store32<true, false>(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs)), d, d, 0.0f,
                         y);
  }
}

void RowQ4_0(const BlockQ4_0* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i, y += kQK) {
    const float d = Half(x[i].d);
    Store32<true, false>(_mm256_sub_epi8(Nibbles32(x[i].qs), _mm256_set1_epi8(8)), d, d, 0.0f, y);
  }
}

template <typename Block, bool kFifthBit>
void RowK4Family(const Block* x, int64_t blocks, float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), bit = _mm256_set1_epi8(1);
  for (int64_t i = 0; i < blocks; ++i) {
    const float d = Half(x[i].d), dmin = Half(x[i].dmin);
    __m256i qh = _mm256_setzero_si256();
    if constexpr (kFifthBit) qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh));
    for (int chunk = 0; chunk < 4; ++chunk, y += 64) {
      const __m256i bytes =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qs + 32 * chunk));
      __m256i lo = _mm256_and_si256(bytes, low4);
      __m256i hi = _mm256_and_si256(_mm256_srli_epi16(bytes, 4), low4);
      if constexpr (kFifthBit) {
        lo = _mm256_or_si256(
            lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * chunk), bit), 4));
        hi = _mm256_or_si256(
            hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * chunk + 1), bit), 4));
      }
      uint8_t scale, min;
      ScaleMinK4(2 * chunk, x[i].scales, &scale, &min);
      const float d1 = d * scale, m1 = dmin * min;
      Store32<false, true>(lo, d1, d1, m1, y);
      ScaleMinK4(2 * chunk + 1, x[i].scales, &scale, &min);
      const float d2 = d * scale, m2 = dmin * min;
      Store32<false, true>(hi, d2, d2, m2, y + 32);
    }
  }
}

void RowQ6_K(const BlockQ6_K* x, int64_t blocks, float* y) {
  const __m256i low4 = _mm256_set1_epi8(0x0F), two = _mm256_set1_epi8(0x03);
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < blocks; ++i) {
    const float d = Half(x[i].d);
    for (int half = 0; half < 2; ++half, y += 128) {
      const uint8_t* ql = x[i].ql + 64 * half;
      const __m256i ql0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql));
      const __m256i ql1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ql + 32));
      const __m256i qh = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i].qh + 32 * half));
      const __m256i q[4] = {
          _mm256_or_si256(_mm256_and_si256(ql0, low4),
                          _mm256_slli_epi16(_mm256_and_si256(qh, two), 4)),
          _mm256_or_si256(_mm256_and_si256(ql1, low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql0, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 4), two), 4)),
          _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(ql1, 4), low4),
                          _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 6), two), 4)),
      };
      const int8_t* sc = x[i].scales + 8 * half;
      for (int g = 0; g < 4; ++g) {  // two 16-element sub-blocks: (d·sc)·(code − 32)
        Store32<true, false>(_mm256_sub_epi8(q[g], offset), d * sc[2 * g], d * sc[2 * g + 1], 0.0f,
                             y + 32 * g);
      }
    }
  }
}

}  // namespace

bool DequantizeRow(DType dtype, const void* src, int64_t n, float* dst) {
  const int64_t blocks = n / BlockElements(dtype);
  switch (dtype) {
    case DType::kQ8_0:
      RowQ8_0(static_cast<const BlockQ8_0*>(src), blocks, dst);
      return true;
    case DType::kQ4_0:
      RowQ4_0(static_cast<const BlockQ4_0*>(src), blocks, dst);
      return true;
    case DType::kQ4_K:
      RowK4Family<BlockQ4_K, false>(static_cast<const BlockQ4_K*>(src), blocks, dst);
      return true;
    case DType::kQ5_K:
      RowK4Family<BlockQ5_K, true>(static_cast<const BlockQ5_K*>(src), blocks, dst);
      return true;
    case DType::kQ6_K:
      RowQ6_K(static_cast<const BlockQ6_K*>(src), blocks, dst);
      return true;
    default:
      return false;
  }
}

}  // namespace pdserve::kernels::avx2
