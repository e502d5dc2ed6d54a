// The prefill int8 GEMM for quantized weights (gemm_kernels.h), AVX512-VNNI: a 12 × 16 tile of
// y keeps 12 int32 accumulators for the current 32-element block (8 vpdpbusd each, the x codes
// broadcast from memory) and 12 fp32 ones that take each block's sums times its scales. Compiled
// with AVX-512, VNNI and VBMI; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

using quant::kQK;

constexpr size_t kCodesBytes = 8 * 64;
constexpr int kTileMr = 12;  // x rows per tile

// One tile: rows [0, MR) of x against one panel; columns j < nr of y written.
template <int MR>
void Tile(const uint8_t* panel, int64_t blocks, const ActBlock32* x, float* y, int64_t ldy,
          int nr) {
  __m512 sum[MR];
  for (int i = 0; i < MR; ++i) sum[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, panel += kInt8PanelBlockBytes) {
    __m512i dot[MR];
    for (int i = 0; i < MR; ++i) dot[i] = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) {
      const __m512i w = _mm512_loadu_si512(panel + 64 * s);
      for (int i = 0; i < MR; ++i) {
        int32_t codes;
        std::memcpy(&codes, x[i * blocks + b].qs + 4 * s, sizeof(codes));
        dot[i] = _mm512_dpbusd_epi32(dot[i], w, _mm512_set1_epi32(codes));
      }
    }
    const __m512 scale = _mm512_loadu_ps(panel + kCodesBytes);
    const __m512 min = _mm512_loadu_ps(panel + kCodesBytes + kInt8GemmNr * sizeof(float));
    for (int i = 0; i < MR; ++i) {
      const ActBlock32& a = x[i * blocks + b];
      sum[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]),
                               _mm512_mul_ps(scale, _mm512_set1_ps(a.d)), sum[i]);
      sum[i] = _mm512_fnmadd_ps(min, _mm512_set1_ps(a.sum), sum[i]);
    }
  }
  const __mmask16 live = static_cast<__mmask16>((1u << nr) - 1);
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + i * ldy, live, sum[i]);
}

using TileFn = void (*)(const uint8_t*, int64_t, const ActBlock32*, float*, int64_t, int);

template <int... M>
constexpr std::array<TileFn, sizeof...(M)> Tiles(std::integer_sequence<int, M...>) {
  return {Tile<M + 1>...};
}
// kTiles[mr − 1]: the tile for mr x rows.
constexpr auto kTiles = Tiles(std::make_integer_sequence<int, kTileMr>());

}  // namespace

void Int8GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x,
                    int64_t n, float* y, int64_t ldy) {
  const int64_t blocks = cols / kQK, panels = (rows + kInt8GemmNr - 1) / kInt8GemmNr;
  for (int64_t i0 = 0; i0 < n; i0 += kTileMr) {
    const TileFn tile = kTiles[std::min<int64_t>(kTileMr, n - i0) - 1];
    for (int64_t p = 0; p < panels; ++p) {
      tile(packed + p * blocks * kInt8PanelBlockBytes, blocks, x + i0 * blocks,
           y + i0 * ldy + p * kInt8GemmNr, ldy,
           static_cast<int>(std::min<int64_t>(kInt8GemmNr, rows - p * kInt8GemmNr)));
    }
  }
}

}  // namespace pdserve::kernels::avx512
