// AVX2 + FMA GEMM micro-kernel (see gemm_kernels.h).
#include <immintrin.h>

#include <utility>

#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx2 {
namespace {

// Lanes [0, lanes) of 8 set (lanes clamped to [0, 8]).
__m256i Mask(int lanes) {
  return _mm256_cmpgt_epi32(_mm256_set1_epi32(lanes), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

template <int MR>
void Tile(const GemmTileArgs& a) {
  __m256 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  // Locals, not a's fields, so that the loop keeps everything in registers.
  const float* p = a.panel;
  const float* x = a.x;
  const int64_t kc = a.kc, ldx = a.ldx;
  for (int64_t k = 0; k < kc; ++k, p += kGemmNr, ++x) {
    const __m256 b0 = _mm256_loadu_ps(p);
    const __m256 b1 = _mm256_loadu_ps(p + 8);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m256 xi = _mm256_broadcast_ss(x + i * ldx);
      acc[i][0] = _mm256_fmadd_ps(xi, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(xi, b1, acc[i][1]);
    }
  }
  const __m256i m0 = Mask(a.nr), m1 = Mask(a.nr - 8);
  // Unrolled like the loops above: a loop over acc[i] here would keep acc in memory throughout.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + i * a.ldy;
    if (a.accumulate) {
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_maskload_ps(y, m0));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_maskload_ps(y + 8, m1));
    }
    _mm256_maskstore_ps(y, m0, acc[i][0]);
    _mm256_maskstore_ps(y + 8, m1, acc[i][1]);
  }
}

template <int... MR>
void Dispatch(const GemmTileArgs& a, std::integer_sequence<int, MR...>) {
  ((a.mr == MR + 1 ? Tile<MR + 1>(a) : void()), ...);
}

}  // namespace

void GemmTile(const GemmTileArgs& args) {
  Dispatch(args, std::make_integer_sequence<int, kGemmMr>());
}

}  // namespace pdserve::kernels::avx2
