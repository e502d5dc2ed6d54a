// Internal: what the AVX-512 GEMM tiles (gemm_avx512.cc, gemm_avx512_bf16.cc) share — lane masks,
// the panel prefetch and the tile's store. Include only from units compiled for AVX-512;
// everything here has internal linkage, so units built with different extensions never share a
// copy.
#ifndef PDSERVE_KERNELS_CPU_GEMM_AVX512_TILE_H_
#define PDSERVE_KERNELS_CPU_GEMM_AVX512_TILE_H_

#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

// The first `lanes` of 16 (none for lanes ≤ 0, all for ≥ 16).
__mmask16 Mask(int lanes) {
  return lanes >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (lanes > 0 ? lanes : 0)) - 1u);
}

// Panel steps (of k) a tile prefetches ahead (4 KiB of f16, 8 KiB of f32): a decode step streams
// each panel from memory once, and the hardware prefetchers alone left f16 panels at ~75% of the
// read bandwidth with one or a few x rows; for 16 rows (two tiles per panel) it was ~35% faster.
constexpr int64_t kPrefetchSteps = 64;

// Prefetches every cache line of the panel step (kGemmNr elements of T: one line of 16-bit
// elements, two of f32) kPrefetchSteps steps ahead of p. A tile of bf16 pairs, two k a step,
// calls it for each of them.
template <typename T>
[[gnu::always_inline]] inline void PrefetchStep(const T* p) {
  const auto* ahead = reinterpret_cast<const char*>(p + kPrefetchSteps * kGemmNr);
#pragma GCC unroll 2
  for (size_t line = 0; line < kGemmNr * sizeof(T); line += 64) {
    _mm_prefetch(ahead + line, _MM_HINT_T0);
  }
}

// Writes an mr × nr tile's accumulators (acc[i][0]: columns 0–15 of row i, acc[i][1]: 16–31) to y
// (rows ldy apart), adding y's values first if `accumulate`; columns ≥ nr are neither read nor
// written.
template <int MR>
[[gnu::always_inline]] inline void StoreTile(__m512 (&acc)[MR][2], float* y, int64_t ldy, int nr,
                                             bool accumulate) {
  const __mmask16 m0 = Mask(nr), m1 = Mask(nr - 16);
  // Unrolled like the tiles' loops: a loop over acc[i] here would keep acc in memory throughout.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* row = y + i * ldy;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(m0, row));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(m1, row + 16));
    }
    _mm512_mask_storeu_ps(row, m0, acc[i][0]);
    _mm512_mask_storeu_ps(row + 16, m1, acc[i][1]);
  }
}

}  // namespace
}  // namespace pdserve::kernels::avx512

#endif  // PDSERVE_KERNELS_CPU_GEMM_AVX512_TILE_H_
