// AVX-512 (F/BW/VL/DQ) GEMV row kernels (see gemv_kernels.h). Compiled with -march=x86-64-v4 and
// only called when the CPU reports AVX-512 (kernels/cpu_features.h). Everything here stays in this
// file's anonymous namespace or is evaluated at compile time: an inline function from a shared
// header compiled with these flags could be picked by the linker for the whole program.
#include <immintrin.h>

#include <utility>

#include "kernels/cpu/gemv_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

// Loads 16 weights (masked: lanes outside `mask` read as 0 and touch no memory).
template <DType D>
inline __m512 Load16(const void* w, int64_t i, __mmask16 mask) {
  if constexpr (D == DType::kF32) {
    return _mm512_maskz_loadu_ps(mask, static_cast<const float*>(w) + i);
  } else {
    __m256i half = _mm256_maskz_loadu_epi16(mask, static_cast<const uint16_t*>(w) + i);
    if constexpr (D == DType::kF16) {
      return _mm512_cvtph_ps(half);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    }
  }
}

template <DType D>
constexpr int64_t kBytes = D == DType::kF32 ? 4 : 2;

// Software prefetch distance, as in the AVX2 kernels (measured there; no AVX-512 machine here).
constexpr int64_t kPrefetchBytes = 4096;

template <DType D, int NB, int RB>
void RowBlock(const GemvArgs& a, int64_t r) {
  const void* rows[RB];
  for (int j = 0; j < RB; ++j) {
    rows[j] = static_cast<const uint8_t*>(a.w) + (r + j) * a.cols * kBytes<D>;
  }
  __m512 acc[RB][NB][2];
  for (int j = 0; j < RB; ++j)
    for (int b = 0; b < NB; ++b) acc[j][b][0] = acc[j][b][1] = _mm512_setzero_ps();
  constexpr __mmask16 kAll = 0xffff;
  int64_t c = 0;
  for (; c + 32 <= a.cols; c += 32) {
    for (int j = 0; j < RB; ++j) {
      _mm_prefetch(static_cast<const char*>(rows[j]) + c * kBytes<D> + kPrefetchBytes, _MM_HINT_T0);
      __m512 w0 = Load16<D>(rows[j], c, kAll);
      __m512 w1 = Load16<D>(rows[j], c + 16, kAll);
      for (int b = 0; b < NB; ++b) {
        const float* x = a.x + b * a.ldx + c;
        acc[j][b][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x), acc[j][b][0]);
        acc[j][b][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + 16), acc[j][b][1]);
      }
    }
  }
  for (; c < a.cols; c += 16) {
    int64_t left = a.cols - c;
    __mmask16 mask = left >= 16 ? kAll : static_cast<__mmask16>((1u << left) - 1u);
    for (int j = 0; j < RB; ++j) {
      __m512 w0 = Load16<D>(rows[j], c, mask);
      for (int b = 0; b < NB; ++b) {
        __m512 x = _mm512_maskz_loadu_ps(mask, a.x + b * a.ldx + c);
        acc[j][b][0] = _mm512_fmadd_ps(w0, x, acc[j][b][0]);
      }
    }
  }
  for (int j = 0; j < RB; ++j) {
    for (int b = 0; b < NB; ++b) {
      a.y[b * a.ldy + r + j] = _mm512_reduce_add_ps(_mm512_add_ps(acc[j][b][0], acc[j][b][1]));
    }
  }
}

// NB = 3 or 4 with two weight rows: 16 accumulators of the 32 registers.
constexpr int kWideBatchRows = 2;

#include "kernels/cpu/gemv_dispatch.inc"

struct BatchSimd {
  using V = __m512;
  static constexpr int kLanes = 16;
  static constexpr int kBatch = 6;  // 24 accumulators, 6 x vectors and a weight vector of 32

  static V Zero() { return _mm512_setzero_ps(); }
  static V Fma(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
  static __mmask16 Mask(int n) {
    return n == kLanes ? static_cast<__mmask16>(0xffff) : static_cast<__mmask16>((1u << n) - 1u);
  }
  static V LoadF32(const float* p, int n) { return _mm512_maskz_loadu_ps(Mask(n), p); }
  template <DType D>
  static V LoadW(const void* row, int64_t c, int n) {
    return Load16<D>(row, c, Mask(n));
  }
  // Each accumulator's halves added, then the four 8-lane sums by horizontal adds.
  static __m256 Halves(V v) {
    return _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps(v, 1));
  }
  static __m128 Sums4(V a0, V a1, V a2, V a3) {
    const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(Halves(a0), Halves(a1)),
                                    _mm256_hadd_ps(Halves(a2), Halves(a3)));
    return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
  }
};

#include "kernels/cpu/batch_gemv.inc"

}  // namespace

void GemvRows(const GemvArgs& args, int64_t row_begin, int64_t row_end) {
  DispatchRows(args, row_begin, row_end);
}

void BatchGemvRows(const BatchGemvArgs& args) { BatchRows(args); }

}  // namespace pdserve::kernels::avx512
