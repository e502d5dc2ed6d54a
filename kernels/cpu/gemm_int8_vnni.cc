// The prefill int8 GEMM for quantized weights (gemm_kernels.h), AVX512-VNNI: a 12 × 16 tile of
// y keeps 12 int32 accumulators for the current 32-element block (8 vpdpbusd each, the x codes
// broadcast from memory) and 12 fp32 ones that take each block's sums times its scales. Compiled
// with AVX-512, VNNI and VBMI; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

using quant::kQK;

constexpr size_t kCodesBytes = 8 * 64;

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
constexpr auto kTiles = Tiles(std::make_integer_sequence<int, kInt8GemmMr>());

}  // namespace

void PackInt8Panels(Block32AsU8Fn unpack, const uint8_t* w, size_t row_bytes, int64_t cols,
                    int64_t begin, int64_t end, uint8_t* packed) {
  const int64_t blocks = cols / kQK;
  // Row j's codes 4s..4s+3 (dword s of its 32 bytes) go to dword j of step s.
  const __m512i gather =
      _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                         _mm512_set1_epi32(kQK / 4));
  for (int64_t r0 = begin; r0 < end; r0 += kInt8GemmNr) {
    const int live = static_cast<int>(std::min<int64_t>(kInt8GemmNr, end - r0));
    for (int64_t b = 0; b < blocks; ++b, packed += kInt8PanelBlockBytes) {
      alignas(64) uint8_t codes[kInt8GemmNr][kQK] = {};
      float scales[kInt8GemmNr] = {}, mins[kInt8GemmNr] = {};
      for (int j = 0; j < live; ++j) {
        unpack(w + (r0 + j) * row_bytes, b, codes[j], &scales[j], &mins[j]);
      }
      for (int s = 0; s < 8; ++s) {
        _mm512_storeu_si512(
            packed + 64 * s,
            _mm512_i32gather_epi32(_mm512_add_epi32(gather, _mm512_set1_epi32(s)), codes, 4));
      }
      std::memcpy(packed + kCodesBytes, scales, sizeof(scales));
      std::memcpy(packed + kCodesBytes + sizeof(scales), mins, sizeof(mins));
    }
  }
}

void Int8GemmPanels(const uint8_t* packed, int64_t rows, int64_t cols, const ActBlock32* x,
                    int64_t n, float* y, int64_t ldy) {
  const int64_t blocks = cols / kQK, panels = (rows + kInt8GemmNr - 1) / kInt8GemmNr;
  for (int64_t i0 = 0; i0 < n; i0 += kInt8GemmMr) {
    const TileFn tile = kTiles[std::min<int64_t>(kInt8GemmMr, n - i0) - 1];
    for (int64_t p = 0; p < panels; ++p) {
      tile(packed + p * blocks * kInt8PanelBlockBytes, blocks, x + i0 * blocks,
           y + i0 * ldy + p * kInt8GemmNr, ldy,
           static_cast<int>(std::min<int64_t>(kInt8GemmNr, rows - p * kInt8GemmNr)));
    }
  }
}

void QuantizeActivations32(const float* x, int64_t cols, ActBlock32* out) {
  const __m512 lowest = _mm512_set1_ps(-127.0f), highest = _mm512_set1_ps(127.0f);
  for (int64_t b = 0; b < cols / kQK; ++b, x += kQK) {
    const __m512 v[2] = {_mm512_loadu_ps(x), _mm512_loadu_ps(x + 16)};
    // vmaxps returns its second operand when either is NaN: NaNs are skipped, as std::max does.
    __m512 lanes = _mm512_max_ps(_mm512_abs_ps(v[0]), _mm512_setzero_ps());
    lanes = _mm512_max_ps(_mm512_abs_ps(v[1]), lanes);
    const float amax = _mm512_reduce_max_ps(lanes);
    ActBlock32& a = out[b];
    if (amax == 0.0f) {
      a = ActBlock32{};
      continue;
    }
    const __m512 inverse = _mm512_set1_ps(127.0f / amax);
    __m512i q[2];
    for (int h = 0; h < 2; ++h) {
      // Clamped first (a NaN product becomes -127, ±inf ±127, as the scalar code maps them), then
      // rounded half to even.
      const __m512 r = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v[h], inverse), lowest), highest);
      q[h] = _mm512_cvtps_epi32(r);
      _mm_storeu_si128(reinterpret_cast<__m128i*>(a.qs + 16 * h), _mm512_cvtepi32_epi8(q[h]));
    }
    a.d = F16ToF32(F32ToF16(amax / 127.0f));
    a.sum = a.d * static_cast<float>(_mm512_reduce_add_epi32(_mm512_add_epi32(q[0], q[1])));
  }
}

}  // namespace pdserve::kernels::avx512
