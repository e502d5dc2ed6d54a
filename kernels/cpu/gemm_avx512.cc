// AVX-512F GEMM micro-kernel (see gemm_kernels.h). Compiled with -march=x86-64-v4 and only called
// when the CPU reports AVX-512; everything but GemmTile stays in the anonymous namespace (see
// matmul_avx512.cc).
#include <immintrin.h>

#include <type_traits>
#include <utility>

#include "kernels/cpu/gemm_avx512_tile.h"
#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

static_assert(kGemmNr == 32, "a tile's panel rows are two vectors of 16 (gemm_avx512_tile.h)");

// 16 panel elements of type T from p, as floats (f16 and bf16 widened exactly).
template <typename T>
__m512 Load16(const T* p) {
  if constexpr (std::is_same_v<T, float>) {
    return _mm512_loadu_ps(p);
  } else {
    const __m256i half = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
    if constexpr (std::is_same_v<T, F16Bits>) {
      return _mm512_cvtph_ps(half);
    } else {
      return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(half), 16));
    }
  }
}

template <typename T, int MR>
void Tile(const GemmTileArgs& a) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  // Locals, not a's fields, so that the loop keeps everything in registers.
  const T* p = static_cast<const T*>(a.panel);
  const float* x = a.x;
  const int64_t kc = a.kc, ldx = a.ldx;
  for (int64_t k = 0; k < kc; ++k, p += kGemmNr, ++x) {
    PrefetchStep(p);
    const __m512 b0 = Load16(p);
    const __m512 b1 = Load16(p + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i * ldx]);
      acc[i][0] = _mm512_fmadd_ps(xi, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xi, b1, acc[i][1]);
    }
  }
  StoreTile(acc, a.y, a.ldy, a.nr, a.accumulate);
}

// Tile on bf16 panels of interleaved k pairs: each 32-bit lane's halves widened exactly (the low
// half is k, the high half k + 1), then the FMAs in Tile's order, so the sums are Tile's bit for
// bit.
template <int MR>
void PairsTile(const GemmTileArgs& a) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  const auto* p = static_cast<const uint16_t*>(a.panel);
  const float* x = a.x;
  const int64_t steps = a.kc / 2, ldx = a.ldx;
  const __m512i high = _mm512_set1_epi32(static_cast<int>(0xffff0000u));
  for (int64_t q = 0; q < steps; ++q, p += 2 * kGemmNr, x += 2) {
    PrefetchStep(p);
    PrefetchStep(p + kGemmNr);
    const __m512i v0 = _mm512_loadu_si512(p), v1 = _mm512_loadu_si512(p + kGemmNr);
    const __m512 even0 = _mm512_castsi512_ps(_mm512_slli_epi32(v0, 16));
    const __m512 even1 = _mm512_castsi512_ps(_mm512_slli_epi32(v1, 16));
    const __m512 odd0 = _mm512_castsi512_ps(_mm512_and_si512(v0, high));
    const __m512 odd1 = _mm512_castsi512_ps(_mm512_and_si512(v1, high));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 xe = _mm512_set1_ps(x[i * ldx]);
      acc[i][0] = _mm512_fmadd_ps(xe, even0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xe, even1, acc[i][1]);
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 xo = _mm512_set1_ps(x[i * ldx + 1]);
      acc[i][0] = _mm512_fmadd_ps(xo, odd0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xo, odd1, acc[i][1]);
    }
  }
  StoreTile(acc, a.y, a.ldy, a.nr, a.accumulate);
}

template <typename T, int... MR>
void Dispatch(const GemmTileArgs& a, std::integer_sequence<int, MR...>) {
  ((a.mr == MR + 1 ? Tile<T, MR + 1>(a) : void()), ...);
}

template <int... MR>
void DispatchPairs(const GemmTileArgs& a, std::integer_sequence<int, MR...>) {
  ((a.mr == MR + 1 ? PairsTile<MR + 1>(a) : void()), ...);
}

// r[i] lane j ↔ r[j] lane i for i, j < 16: pairs of rows interleaved by floats, then by pairs of
// floats, then 128-bit lanes gathered across the four groups of four rows.
void Transpose16x16(__m512 (&r)[16]) {
  __m512 t[16];
#pragma GCC unroll 8
  for (int i = 0; i < 8; ++i) {
    t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
  }
  // u[4i + m], in each 128-bit lane L: lane 4L + m of rows 4i … 4i + 3.
  __m512 u[16];
#pragma GCC unroll 4
  for (int i = 0; i < 4; ++i) {
    const __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
    const __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
    u[4 * i + 0] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
    u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
    u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
    u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
  }
  // Lane m + 4L of all rows: 128-bit lane L of u[m], u[4 + m], u[8 + m], u[12 + m].
#pragma GCC unroll 4
  for (int m = 0; m < 4; ++m) {
    const __m512 even0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0x88);  // lanes L = 0, 2
    const __m512 even1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0x88);
    const __m512 odd0 = _mm512_shuffle_f32x4(u[m], u[4 + m], 0xdd);  // lanes L = 1, 3
    const __m512 odd1 = _mm512_shuffle_f32x4(u[8 + m], u[12 + m], 0xdd);
    r[m] = _mm512_shuffle_f32x4(even0, even1, 0x88);
    r[8 + m] = _mm512_shuffle_f32x4(even0, even1, 0xdd);
    r[4 + m] = _mm512_shuffle_f32x4(odd0, odd1, 0x88);
    r[12 + m] = _mm512_shuffle_f32x4(odd0, odd1, 0xdd);
  }
}

}  // namespace

void GemmTile(const GemmTileArgs& args) {
  constexpr auto kRows = std::make_integer_sequence<int, kGemmMr>();
  if (args.pairs) return DispatchPairs(args, kRows);
  switch (args.panel_dtype) {
    case DType::kF16:
      return Dispatch<F16Bits>(args, kRows);
    case DType::kBF16:
      return Dispatch<BF16Bits>(args, kRows);
    default:
      return Dispatch<float>(args, kRows);
  }
}

// Blocks of 16 rows × 16 columns, transposed in registers; a block's missing rows are zeros and its
// missing columns are neither read (masked loads) nor stored.
void PackPanel(const float* const* src, int live, int64_t k0, int64_t kc, float* panel) {
  static_assert(kGemmNr % 16 == 0, "panels are whole blocks of 16 rows");
  for (int g = 0; g < kGemmNr; g += 16) {
    for (int64_t k = 0; k < kc; k += 16) {
      const int cols = static_cast<int>(kc - k < 16 ? kc - k : 16);
      const __mmask16 mask = Mask(cols);
      __m512 r[16];
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        r[i] =
            g + i < live ? _mm512_maskz_loadu_ps(mask, src[g + i] + k0 + k) : _mm512_setzero_ps();
      }
      Transpose16x16(r);
      float* to = panel + k * kGemmNr + g;
#pragma GCC unroll 16
      for (int i = 0; i < 16; ++i) {
        if (i < cols) _mm512_storeu_ps(to + i * kGemmNr, r[i]);
      }
    }
  }
}

}  // namespace pdserve::kernels::avx512
