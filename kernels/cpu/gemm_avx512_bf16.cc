// The AVX512_BF16 tile of the GEMM (see gemm_kernels.h): bf16 weights in the pairs layout times
// activations rounded to bf16, one vdpbf16ps per pair of k and 16 weight rows — twice the
// multiplies of an fp32 FMA per instruction. Compiled with -march=x86-64-v4 -mavx512bf16 and only
// called when Bf16DotActive() (kernels/cpu_features.h).
#include <immintrin.h>

#include <bit>
#include <cstring>
#include <utility>

#include "kernels/cpu/gemm_avx512_tile.h"
#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

template <int MR>
void DotTile(const Bf16DotTileArgs& a) {
  __m512 acc[MR][2];
#pragma GCC unroll 16
  for (int i = 0; i < MR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  // Locals, not a's fields, so that the loop keeps everything in registers.
  const uint16_t* p = a.panel;
  const uint32_t* x = a.x;
  const int64_t steps = a.kc / 2, ldx = a.ldx;
  for (int64_t q = 0; q < steps; ++q, p += 2 * kGemmNr, ++x) {
    PrefetchStep(p);
    PrefetchStep(p + kGemmNr);
    const auto w0 = std::bit_cast<__m512bh>(_mm512_loadu_si512(p));
    const auto w1 = std::bit_cast<__m512bh>(_mm512_loadu_si512(p + kGemmNr));
#pragma GCC unroll 16
    for (int i = 0; i < MR; ++i) {
      int32_t pair;  // copied, not read as uint32_t: the pairs live in a float workspace
      std::memcpy(&pair, x + i * ldx, sizeof(pair));
      const auto xi = std::bit_cast<__m512bh>(_mm512_set1_epi32(pair));
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], xi, w0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], xi, w1);
    }
  }
  StoreTile(acc, a.y, a.ldy, a.nr, a.accumulate);
}

template <int... MR>
void Dispatch(const Bf16DotTileArgs& a, std::integer_sequence<int, MR...>) {
  ((a.mr == MR + 1 ? DotTile<MR + 1>(a) : void()), ...);
}

}  // namespace

void Bf16DotTile(const Bf16DotTileArgs& args) {
  Dispatch(args, std::make_integer_sequence<int, kGemmMr>());
}

void RoundToBf16Pairs(const float* x, int64_t rows, int64_t cols, uint32_t* out, int64_t ldo) {
  for (int64_t i = 0; i < rows; ++i) {
    const float* from = x + i * cols;
    auto* to = reinterpret_cast<__m512i*>(out + i * ldo);
    int64_t c = 0;
    for (; c + 32 <= cols; c += 32, ++to) {
      // The second operand's floats become the low 16 bf16 elements.
      const __m512bh b =
          _mm512_cvtne2ps_pbh(_mm512_loadu_ps(from + c + 16), _mm512_loadu_ps(from + c));
      _mm512_storeu_si512(to, std::bit_cast<__m512i>(b));
    }
    if (c < cols) {
      const int left = static_cast<int>(cols - c);
      const __m512bh b = _mm512_cvtne2ps_pbh(_mm512_maskz_loadu_ps(Mask(left - 16), from + c + 16),
                                             _mm512_maskz_loadu_ps(Mask(left), from + c));
      _mm512_mask_storeu_epi32(to, Mask(left / 2), std::bit_cast<__m512i>(b));
    }
  }
}

}  // namespace pdserve::kernels::avx512
