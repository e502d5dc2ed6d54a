// AVX2 dot products of quantized weight rows with int8 activation blocks (see quant_dot.h). The
// integer work is ggml's approach: unsigned×signed byte products summed pairwise
// (_mm256_maddubs_epi16), widened with _mm256_madd_epi16 (which also applies the K-quants'
// sub-block scales), block scales applied in fp32.
#include <immintrin.h>

#include <array>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/quant_dot.h"
#include "kernels/cpu/quant_unpack_avx2.h"

namespace pdserve::kernels::avx2 {
namespace {

using namespace quant;  // NOLINT: the block formats

inline float HorizontalSum(__m128 v) {
  v = _mm_add_ps(v, _mm_movehl_ps(v, v));
  return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

inline float HorizontalSum(__m256 v) {
  return HorizontalSum(_mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1)));
}

// 8 int32 sums of 4 adjacent products of signed bytes w and a.
inline __m256i SignedDot(__m256i w, __m256i a) {
  const __m256i products = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(a, w));
  return _mm256_madd_epi16(products, _mm256_set1_epi16(1));
}

// Block i's products with its activations, scaled, added to acc (8 partial sums). Q8_0's signed
// codes go through SignedDot; the 4- and 5-bit formats' unsigned codes (0..15, or 0..31 with Q5's
// fifth bits) straight into vpmaddubsw, and their constant term — the minimum m (Q4_1, Q5_1) or
// −8·d, −16·d (Q4_0, Q5_0), times the activations' d_a·Σ qa — into the scalar *term.
template <DType D>
inline __m256 Block32(const void* w, const ActBlock32* a, int64_t i, __m256 acc, float* term) {
  const __m256i qa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs));
  const auto& b = static_cast<const Block32Of<D>*>(w)[i];
  const float d = Half(b.d);
  __m256i products;
  if constexpr (D == DType::kQ8_0) {
    products = SignedDot(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(b.qs)), qa);
  } else {
    __m256i codes = Nibbles32(b.qs);
    if constexpr (D == DType::kQ5_0 || D == DType::kQ5_1) {
      codes = _mm256_or_si256(codes, FifthBits32(b.qh));
    }
    products = _mm256_madd_epi16(_mm256_maddubs_epi16(codes, qa), _mm256_set1_epi16(1));
    if constexpr (D == DType::kQ4_1 || D == DType::kQ5_1) {
      *term += Half(b.m) * a[i].sum;
    } else {
      *term -= (D == DType::kQ4_0 ? 8.0f : 16.0f) * d * a[i].sum;
    }
  }
  return _mm256_fmadd_ps(_mm256_set1_ps(d * a[i].d), _mm256_cvtepi32_ps(products), acc);
}

// Two accumulators (and two constant terms): one chain of dependent FMAs would bound a row at one
// block per FMA latency.
template <DType D>
float Dot32(const void* w, const void* act, int64_t cols) {
  const auto* a = static_cast<const ActBlock32*>(act);
  const int64_t blocks = cols / kQK;
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  float term0 = 0.0f, term1 = 0.0f;
  int64_t i = 0;
  for (; i + 2 <= blocks; i += 2) {
    acc0 = Block32<D>(w, a, i, acc0, &term0);
    acc1 = Block32<D>(w, a, i + 1, acc1, &term1);
  }
  if (i < blocks) acc0 = Block32<D>(w, a, i, acc0, &term0);
  return HorizontalSum(_mm256_add_ps(acc0, acc1)) + (term0 + term1);
}

// Word k of each 128-bit lane of v in all eight words of that lane (k < 8).
inline __m256i BroadcastWord(__m256i v, int k) {
  return _mm256_shuffle_epi8(v, _mm256_set1_epi16(static_cast<int16_t>(0x0100 + 0x0202 * k)));
}

// Q4_K / Q5_K: per 64 elements, two sub-blocks from the low and high nibbles of 32 bytes. The
// sub-block scales multiply in the integer domain (vpmaddwd against the scale's word broadcast);
// the minimums' term Σ_sub min·Σ qa comes from the activations' bsums, eight sub-blocks in one
// vpmaddwd.
template <typename Block>
float DotK4Family(const void* w, const void* act, int64_t cols) {
  const auto* x = static_cast<const Block*>(w);
  const auto* a = static_cast<const ActBlockK*>(act);
  __m256 acc = _mm256_setzero_ps();
  __m128 acc_min = _mm_setzero_ps();
  for (int64_t i = 0; i < cols / kQK_K; ++i) {
    const std::array<uint32_t, 4> packed = ScalesAndMinsK4(x[i].scales);
    // Words 0-7: the scales; 8-15: the minimums.
    const __m256i scales_mins =
        _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(packed.data())));
    const __m256i bsums = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].bsums));
    const __m128i sub_sums =
        _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256(bsums, 1));
    const __m128i min_products = _mm_madd_epi16(_mm256_extracti128_si256(scales_mins, 1), sub_sums);
    const float da = a[i].d;
    acc_min =
        _mm_fmadd_ps(_mm_set1_ps(da * Half(x[i].dmin)), _mm_cvtepi32_ps(min_products), acc_min);
    const __m256i scales = _mm256_broadcastsi128_si256(_mm256_castsi256_si128(scales_mins));
    __m256i sumi = _mm256_setzero_si256();
    for (int chunk = 0; chunk < 4; ++chunk) {
      __m256i lo, hi;
      K4Codes(x[i].qs, QhOf(x[i]), chunk, &lo, &hi);
      const __m256i a_lo =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 64 * chunk));
      const __m256i a_hi =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 64 * chunk + 32));
      const __m256i p_lo =
          _mm256_madd_epi16(_mm256_maddubs_epi16(lo, a_lo), BroadcastWord(scales, 2 * chunk));
      const __m256i p_hi =
          _mm256_madd_epi16(_mm256_maddubs_epi16(hi, a_hi), BroadcastWord(scales, 2 * chunk + 1));
      sumi = _mm256_add_epi32(sumi, _mm256_add_epi32(p_lo, p_hi));
    }
    acc = _mm256_fmadd_ps(_mm256_set1_ps(da * Half(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
  }
  return HorizontalSum(acc) - HorizontalSum(acc_min);
}

// Q6_K: per 128 elements, four groups of 32 codes (6 bits: 4 from ql, 2 from qh), each group two
// 16-element sub-blocks with int8 scales. The scales multiply in the integer domain (group g's
// two scales, one per 128-bit lane, against its vpmaddubsw sums); the codes' offset of 32 is
// removed through bsums, sixteen sub-blocks in one vpmaddwd, so a block ends in one FMA.
float DotQ6_K(const void* w, const void* act, int64_t cols) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* a = static_cast<const ActBlockK*>(act);
  __m256 acc = _mm256_setzero_ps();
  for (int64_t i = 0; i < cols / kQK_K; ++i) {
    const __m256i scales =
        _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[i].scales)));
    const __m256i offset =
        _mm256_madd_epi16(scales, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].bsums)));
    __m256i sumi = _mm256_setzero_si256();
    for (int half = 0; half < 2; ++half) {
      __m256i q[4];
      Q6KCodes(x[i].ql + 64 * half, x[i].qh + 32 * half, q);
      // This half's eight scales (words) in both lanes.
      const __m256i half_scales = half == 0 ? _mm256_permute2x128_si256(scales, scales, 0x00)
                                            : _mm256_permute2x128_si256(scales, scales, 0x11);
      for (int g = 0; g < 4; ++g) {
        const __m256i qa =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[i].qs + 128 * half + 32 * g));
        // Word 2g of the low lane in all its words, word 2g + 1 of the high lane in all of its.
        const __m256i pick =
            _mm256_set_m128i(_mm_set1_epi16(static_cast<int16_t>(0x0302 + 0x0404 * g)),
                             _mm_set1_epi16(static_cast<int16_t>(0x0100 + 0x0404 * g)));
        const __m256i scale = _mm256_shuffle_epi8(half_scales, pick);
        sumi = _mm256_add_epi32(sumi, _mm256_madd_epi16(_mm256_maddubs_epi16(q[g], qa), scale));
      }
    }
    sumi = _mm256_sub_epi32(sumi, _mm256_slli_epi32(offset, 5));
    acc = _mm256_fmadd_ps(_mm256_set1_ps(a[i].d * Half(x[i].d)), _mm256_cvtepi32_ps(sumi), acc);
  }
  return HorizontalSum(acc);
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
