// AVX2 dequantization of ggml block rows for prefill (Matmul widens 128-row tiles before SGEMM).
// The same arithmetic as quant::DequantizeRow, operation for operation (a product, then a
// difference, never fused), so the floats are identical.
#include <immintrin.h>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/quant_unpack_avx2.h"

namespace pdserve::kernels::avx2 {
namespace {

using namespace quant;  // NOLINT: the block formats

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

template <typename Block>
void RowK4Family(const Block* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i) {
    const float d = Half(x[i].d), dmin = Half(x[i].dmin);
    for (int chunk = 0; chunk < 4; ++chunk, y += 64) {
      __m256i lo, hi;
      K4Codes(x[i].qs, QhOf(x[i]), chunk, &lo, &hi);
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
  const __m256i offset = _mm256_set1_epi8(32);
  for (int64_t i = 0; i < blocks; ++i) {
    const float d = Half(x[i].d);
    for (int half = 0; half < 2; ++half, y += 128) {
      __m256i q[4];
      Q6KCodes(x[i].ql + 64 * half, x[i].qh + 32 * half, q);
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
      RowK4Family<BlockQ4_K>(static_cast<const BlockQ4_K*>(src), blocks, dst);
      return true;
    case DType::kQ5_K:
      RowK4Family<BlockQ5_K>(static_cast<const BlockQ5_K*>(src), blocks, dst);
      return true;
    case DType::kQ6_K:
      RowQ6_K(static_cast<const BlockQ6_K*>(src), blocks, dst);
      return true;
    default:
      return false;
  }
}

}  // namespace pdserve::kernels::avx2
