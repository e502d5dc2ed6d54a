// AVX-512F GEMM micro-kernel (see gemm_kernels.h). Compiled with -march=x86-64-v4 and only called
// when the CPU reports AVX-512; everything but GemmTile stays in the anonymous namespace (see
// matmul_avx512.cc).
#include <immintrin.h>

#include <utility>

#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

__mmask16 Mask(int lanes) {
  return lanes >= 16 ? static_cast<__mmask16>(0xffff)
                     : static_cast<__mmask16>((1u << (lanes > 0 ? lanes : 0)) - 1u);
}

template <int MR>
void Tile(const GemmTileArgs& a) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  // Locals, not a's fields, so that the loop keeps everything in registers.
  const float* p = a.panel;
  const float* x = a.x;
  const int64_t kc = a.kc, ldx = a.ldx;
  for (int64_t k = 0; k < kc; ++k, p += kGemmNr, ++x) {
    const __m512 b0 = _mm512_loadu_ps(p);
    const __m512 b1 = _mm512_loadu_ps(p + 16);
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i * ldx]);
      acc[i][0] = _mm512_fmadd_ps(xi, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(xi, b1, acc[i][1]);
    }
  }
  const __mmask16 m0 = Mask(a.nr), m1 = Mask(a.nr - 16);
  // Unrolled like the loops above: a loop over acc[i] here would keep acc in memory throughout.
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) {
    float* y = a.y + i * a.ldy;
    if (a.accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_maskz_loadu_ps(m0, y));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_maskz_loadu_ps(m1, y + 16));
    }
    _mm512_mask_storeu_ps(y, m0, acc[i][0]);
    _mm512_mask_storeu_ps(y + 16, m1, acc[i][1]);
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

}  // namespace pdserve::kernels::avx512
