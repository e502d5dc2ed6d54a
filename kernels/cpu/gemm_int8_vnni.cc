// The int8 GEMM for quantized weights (gemm_kernels.h), AVX512-VNNI: a 12 × 16 tile of y keeps
// 12 int32 accumulators for the current 32-element block (or 16-element unit: Q6_K) (8 vpdpbusd
// each, the x codes broadcast from memory) and 12 fp32 ones that take each block's sums times its
// scales. One tile serves every panel format — the prefill's, packed per call, and PanelMatrix's
// Q4_0, Q8_0 and K-quant panels, which every batch from one decode row up reads — so those with
// 32-element scales give the per-call GEMM's sums bit for bit. Compiled with AVX-512, VNNI and
// VBMI; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/int8_panel_formats.h"
#include "kernels/cpu/quant_dot.h"

namespace pdserve::kernels::avx512 {
namespace {

using quant::kQK;

constexpr int kTileMr = 12;  // x rows per tile

// One tile: rows [0, MR) of x against one panel; columns j < nr of y written.
template <typename Format, int MR>
void Tile(const uint8_t* panel, int64_t blocks, const ActBlock32* x, float* y, int64_t ldy,
          int nr) {
  __m512 sum[MR];
  for (int i = 0; i < MR; ++i) sum[i] = _mm512_setzero_ps();
  for (int64_t b0 = 0; b0 < blocks; b0 += Format::kGroupBlocks, panel += Format::kGroupBytes) {
    const typename Format::Scales scales(panel);
    for (int k = 0; k < Format::kGroupBlocks; ++k) {
      const int64_t b = b0 + k;
      for (int u = 0; u < Format::kUnits; ++u) {
        __m512i dot[MR];
        for (int i = 0; i < MR; ++i) dot[i] = _mm512_setzero_si512();
        Format::Steps(panel, k, u, [&](__m512i w, int s) {
          for (int i = 0; i < MR; ++i) {
            int32_t codes;
            std::memcpy(&codes, x[i * blocks + b].qs + 4 * s, sizeof(codes));
            dot[i] = _mm512_dpbusd_epi32(dot[i], w, _mm512_set1_epi32(codes));
          }
        });
        const __m512 scale = scales.Scale(k, u);
        const __m512 min = scales.Min(k, u, scale);
        for (int i = 0; i < MR; ++i) {
          const ActBlock32& a = x[i * blocks + b];
          sum[i] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot[i]),
                                   _mm512_mul_ps(scale, _mm512_set1_ps(a.d)), sum[i]);
          sum[i] = _mm512_fnmadd_ps(min, _mm512_set1_ps(UnitSum<Format::kUnits>(a, u)), sum[i]);
        }
      }
    }
  }
  const __mmask16 live = static_cast<__mmask16>((1u << nr) - 1);
  for (int i = 0; i < MR; ++i) _mm512_mask_storeu_ps(y + i * ldy, live, sum[i]);
}

using TileFn = void (*)(const uint8_t*, int64_t, const ActBlock32*, float*, int64_t, int);

template <typename Format, int... M>
constexpr std::array<TileFn, sizeof...(M)> Tiles(std::integer_sequence<int, M...>) {
  return {Tile<Format, M + 1>...};
}

// Every tile of 12 x rows against every panel; kTiles[mr − 1]: the tile for mr x rows.
template <typename Format>
void GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x, int64_t n,
                float* y, int64_t ldy) {
  static constexpr auto kTiles = Tiles<Format>(std::make_integer_sequence<int, kTileMr>());
  const int64_t blocks = cols / kQK, panels = (rows + kInt8GemmNr - 1) / kInt8GemmNr;
  for (int64_t i0 = 0; i0 < n; i0 += kTileMr) {
    const TileFn tile = kTiles[std::min<int64_t>(kTileMr, n - i0) - 1];
    for (int64_t p = 0; p < panels; ++p) {
      tile(packed + p * (blocks / Format::kGroupBlocks) * Format::kGroupBytes, blocks,
           x + i0 * blocks, y + i0 * ldy + p * kInt8GemmNr, ldy,
           static_cast<int>(std::min<int64_t>(kInt8GemmNr, rows - p * kInt8GemmNr)));
    }
  }
}

}  // namespace

void Int8GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x,
                    int64_t n, float* y, int64_t ldy) {
  GemmPanels<U8Panels>(packed, rows, cols, x, n, y, ldy);
}

Int8GemmFn QuantPanelsGemm(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
      return GemmPanels<Q4_0Panels>;
    case DType::kQ8_0:
      return GemmPanels<Q8_0Panels>;
    case DType::kQ4_K:
      return GemmPanels<K4Panels<false>>;
    case DType::kQ5_K:
      return GemmPanels<K4Panels<true>>;
    case DType::kQ6_K:
      return GemmPanels<Q6_KPanels>;
    default:
      return nullptr;
  }
}

}  // namespace pdserve::kernels::avx512
