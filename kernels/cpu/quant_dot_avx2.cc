// AVX2 dot products of quantized weight rows with int8 activation blocks (see quant_dot.h). The
// integer work is ggml's approach: unsigned×signed byte products summed pairwise
// (_mm256_maddubs_epi16), widened with _mm256_madd_epi16, block scales applied in fp32.
#include <immintrin.h>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/quant_unpack_avx2.h"

namespace pdserve::kernels::avx2 {
namespace {

using namespace quant;  // NOLINT: the block formats

inline float HorizontalSum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline int HorizontalSum(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// 8 int32 sums of 4 adjacent products of signed bytes w and a.
inline __m256i SignedDot(__m256i w, __m256i a) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

// Block i's signed codes (Q4_0, Q5_0: the unsigned codes less 8 or 16; Q8_0: as stored).
template <DType D>
inline __m256i SignedCodes(const Block32Of<D>& b) {
  if constexpr (D == DType::kQ8_0) {
    return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs));
  } else if constexpr (D == DType::kQ4_0) {
    return _mm256_sub_epi8(Nibbles32(b.qs), _mm256_set1_epi8(8));
  } else {
    return _mm256_sub_epi8(_mm256_or_si256(Nibbles32(b.qs), FifthBits32(b.qh)),
                           _mm256_set1_epi8(16));
  }
}

// Formats whose value is scale × (code − offset): their codes go signed into SignedDot and each
// block costs one FMA; Q4_1/Q5_1, with a minimum, keep unsigned codes and a second term.
template <DType D>
constexpr bool kSymmetric = D == DType::kQ8_0 || D == DType::kQ4_0 || D == DType::kQ5_0;

// Block i's products with its activations, scaled, added to acc (8 partial sums); Q4_1/Q5_1's
// minimum term m·(d_a·Σ qa) goes to *min_sum.
template <DType D>
inline __m256 Block32(const void* w, const ActBlock32* a, int64_t i, __m256 acc, float* min_sum) {
  const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
  const auto& b = static_cast<const Block32Of<D>*>(w)[i];
  if constexpr (kSymmetric<D>) {
    return _mm256_fmadd_ps(_mm256_set1_ps(Half(b.d) * a[i].d),
                           _mm256_cvtepi32_ps(SignedDot(SignedCodes<D>(b), qa)), acc);
  } else {
    __m256i codes = Nibbles32(b.qs);
    if constexpr (D == DType::kQ5_1) codes = _mm256_or_si256(codes, FifthBits32(b.qh));
    const __m256i products =
        _mm256_madd_epi16(_mm256_maddubs_epi16(codes, qa), _mm256_set1_epi16(1));
    *min_sum += Half(b.m) * a[i].sum;
    return _mm256_fmadd_ps(_mm256_set1_ps(Half(b.d) * a[i].d), _mm256_cvtepi32_ps(products), acc);
  }
}

// Two accumulators (and two minimum sums): one chain of dependent FMAs would bound a row at one
// block per FMA latency.
template <DType D>
float Dot32(const void* w, const void* act, int64_t cols) {
  const auto* a = static_cast<const ActBlock32*>(act);
  const int64_t blocks = cols / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float min0 = 0.0f, min1 = 0.0f;
  int64_t i = 0;
  for (; i + 2 <= blocks; i += 2) {
    acc0 = Block32<D>(w, a, i, acc0, &min0);
    acc1 = Block32<D>(w, a, i + 1, acc1, &min1);
  }
  if (i < blocks) acc0 = Block32<D>(w, a, i, acc0, &min0);
  return HorizontalSum(_mm256_add_ps(acc0, acc1)) + (min0 + min1);
}

// Q5_K's fifth bits; Q4_K has none.
inline const uint8_t* QhOf(const BlockQ4_K&) { return nullptr; }
inline const uint8_t* QhOf(const BlockQ5_K& b) { return b.qh; }

// Q4_K / Q5_K: per 64 elements, two sub-blocks from the low and high nibbles of 32 bytes.
template <typename Block>
float DotK4Family(const void* w, const void* act, int64_t cols) {
  const auto* x = static_cast<const Block*>(w);
  const auto* a = static_cast<const ActBlockK*>(act);
  float sum = 0.0f;
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQK_K; ++i) {
    uint8_t scales[8], mins[8];
    for (int sub = 0; sub < 8; ++sub) ScaleMinK4(sub, x[i].scales, &scales[sub], &mins[sub]);
    int min_sum = 0;
    for (int sub = 0; sub < 8; ++sub) {
      min_sum += mins[sub] * (a[i].bsums[2 * sub] + a[i].bsums[2 * sub + 1]);
    }
    __m256i sumi = _mm256_setzero_si256();
    for (int chunk = 0; chunk < 4; ++chunk) {
      __m256i lo, hi;
      K4Codes(x[i].qs, QhOf(x[i]), chunk, &lo, &hi);
      const __m256i a_lo =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 64 * chunk));
      const __m256i a_hi =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 64 * chunk + 32));
      const __m256i p_lo =
          _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a_lo), _mm256_set1_epi16(scales[2 * chunk]));
      const __m256i p_hi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a_hi),
                                             _mm256_set1_epi16(scales[2 * chunk + 1]));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
    }
    const float da = a[i].d;
    acc = _mm256_fmadd_ps(_mm256_set1_ps(da * Half(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
    sum -= da * Half(x[i].dmin) * static_cast<float>(min_sum);
  }
  return HorizontalSum(acc) + sum;
}

// Q6_K: per 128 elements, four groups of 32 codes (6 bits: 4 from ql, 2 from qh), each group two
// 16-element sub-blocks with int8 scales; the codes' offset of 32 is removed through bsums.
float DotQ6_K(const void* w, const void* act, int64_t cols) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* a = static_cast<const ActBlockK*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < cols / kQK_K; ++i) {
    int offset_sum = 0;
    for (int s = 0; s < 16; ++s) offset_sum += x[i].scales[s] * a[i].bsums[s];
    __m256i sumi = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      Q6KCodes(x[i].ql + 64 * half, x[i].qh + 32 * half, q);
      const int8_t* sc = x[i].scales + 8 * half;
      for (int g = 0; g < 4; ++g) {
        const __m256i qa =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 128 * half + 32 * g));
        const __m256i scale =
            _mm256_set_m128i(_mm_set1_epi16(sc[2 * g + 1]), _mm_set1_epi16(sc[2 * g]));
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], qa), scale));
      }
    }
    const int dot = HorizontalSum(sumi) - 32 * offset_sum;
    sum += a[i].d * Half(x[i].d) * static_cast<float>(dot);
  }
  return sum;
}

}  // namespace

QuantDotFn QuantDot(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return Dot32<DType::kQ8_0>;
    case DType::kQ4_0:
      return Dot32<DType::kQ4_0>;
    case DType::kQ4_1:
      return Dot32<DType::kQ4_1>;
    case DType::kQ5_0:
      return Dot32<DType::kQ5_0>;
    case DType::kQ5_1:
      return Dot32<DType::kQ5_1>;
    case DType::kQ4_K:
      return DotK4Family<BlockQ4_K>;
    case DType::kQ5_K:
      return DotK4Family<BlockQ5_K>;
    case DType::kQ6_K:
      return DotQ6_K;
    default:
      return nullptr;
  }
}

}  // namespace pdserve::kernels::avx2
