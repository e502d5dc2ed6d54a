// AVX2 + FMA GEMM micro-kernel (see gemm_kernels.h).
#include <immintrin.h>

#include <type_traits>
#include <utility>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/transpose_avx2.h"

namespace pdserve::kernels::avx2 {
namespace {

// Lanes [0, lanes) of 8 set (lanes clamped to [0, 8]).
__m256i Mask(int lanes) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

// 8 panel elements of type T from p, as floats (f16 and bf16 widened exactly).
template <typename T>
__m256 Load8(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm256_loadu_ps(p);
  } else {
    const __m128i half = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    if constexpr (std::is_same_v<T, F16Bits>) {
      return _mm256_cvtph_ps(half);
    } else {
      return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(half), 16));
    }
  }
}

// Panel rows a tile prefetches ahead: the same 4 KiB of f16 as the AVX-512 tile's (see there).
constexpr int64_t kPrefetchSteps = 128;

// y[0, 8) loaded and stored: every lane with plain moves where kWhole, else the lanes `live`
// sets — vmaskmovps stores are microcoded on AMD cores (about 6% of the tile's samples on a Zen 3,
// 110M f16 prefill, when every panel took them).
template <bool kWhole>
[[gnu::always_inline]] inline __m256 Get8(const float* y, __m256i live) {
  return kWhole ? _mm256_loadu_ps(y) : _mm256_maskload_ps(y, live);
}
template <bool kWhole>
[[gnu::always_inline]] inline void Put8(float* y, __m256 v, __m256i live) {
  if constexpr (kWhole) {
    _mm256_storeu_ps(y, v);
  } else {
    _mm256_maskstore_ps(y, live, v);
  }
}

// The tile's accumulators to y, a.nr columns (kWhole: all kGemmNr). Unrolled like the tile's
// loops: a loop over acc[i] here would keep acc in memory throughout.
template <bool kWhole, int MR>
[[gnu::always_inline]] inline void PutTile(const __m256 (&acc)[MR][2], const GemmTileArgs& a) {
  const __m256i m0 = Mask(a.nr), m1 = Mask(a.nr - 8);
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + i * a.ldy;
    __m256 v0 = acc[i][0], v1 = acc[i][1];
    if (a.accumulate) {
      v0 = _mm256_add_ps(v0, Get8<kWhole>(y, m0));
      v1 = _mm256_add_ps(v1, Get8<kWhole>(y + 8, m1));
    }
    Put8<kWhole>(y, v0, m0);
    Put8<kWhole>(y + 8, v1, m1);
  }
}

template <typename T, int MR>
void Tile(const GemmTileArgs& a) {
  __m256 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  // Locals, not a's fields, so that the loop keeps everything in registers.
  const T* p = static_cast<const T*>(a.panel);
  const float* x = a.x;
  const int64_t kc = a.kc, ldx = a.ldx;
  for (int64_t k = 0; k < kc; ++k, p += kGemmNr, ++x) {
    _mm_prefetch(reinterpret_cast<const char*>(p + kPrefetchSteps * kGemmNr), _MM_HINT_T0);
    const __m256 b0 = Load8(p);
    const __m256 b1 = Load8(p + 8);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m256 xi = _mm256_broadcast_ss(x + i * ldx);
      acc[i][0] = _mm256_fmadd_ps(xi, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xi, b1, acc[i][1]);
    }
  }
  if (a.nr == kGemmNr) {
    PutTile<true>(acc, a);
  } else {
    PutTile<false>(acc, a);
  }
}

template <typename T, int... MR>
void Dispatch(const GemmTileArgs& a, std::integer_sequence<int, MR...>) {
  ((a.mr == MR + 1 ? Tile<T, MR + 1>(a) : void()), ...);
}

}  // namespace

void GemmTile(const GemmTileArgs& args) {
  constexpr auto kRows = std::make_integer_sequence<int, kGemmMr>();
  switch (args.panel_dtype) {
    case DType::kF16:
      return Dispatch<F16Bits>(args, kRows);
    case DType::kBF16:
      return Dispatch<BF16Bits>(args, kRows);
    default:
      return Dispatch<float>(args, kRows);
  }
}

// Blocks of 8 rows × 8 columns, transposed in registers; a block's missing rows are zeros and its
// missing columns are neither read (masked loads) nor stored.
void PackPanel(const float* const* src, int live, int64_t k0, int64_t kc, float* panel) {
  static_assert(kGemmNr % 8 == 0, "panels are whole blocks of 8 rows");
  for (int g = 0; g < kGemmNr; g += 8) {
    for (int64_t k = 0; k < kc; k += 8) {
      const int cols = static_cast<int>(kc - k < 8 ? kc - k : 8);
      const __m256i mask = Mask(cols);
      __m256 r[8];
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        r[i] = g + i < live ? _mm256_maskload_ps(src[g + i] + k0 + k, mask) : _mm256_setzero_ps();
      }
      Transpose8x8(r);
      float* to = panel + k * kGemmNr + g;
#pragma GCC unroll 8
      for (int i = 0; i < 8; ++i) {
        if (i < cols) _mm256_storeu_ps(to + i * kGemmNr, r[i]);
      }
    }
  }
}

}  // namespace pdserve::kernels::avx2
