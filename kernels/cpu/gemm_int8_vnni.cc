// The int8 GEMM for quantized weights (gemm_kernels.h), AVX512-VNNI: a 12 × 16 tile of y keeps
// 12 int32 accumulators for the current 32-element block (8 vpdpbusd each, the x codes broadcast
// from memory) and 12 fp32 ones that take each block's sums times its scales. One tile serves every
// panel format — the prefill's, packed per call, and PanelMatrix's Q4_0 and Q8_0 panels, which
// every batch from one decode row up reads — so all give the same sums bit for bit. Compiled
// with AVX-512, VNNI and VBMI; called only when the CPU has them.
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <utility>

#include "core/tensor/quant_blocks.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/quant_dot.h"

namespace pdserve::kernels::avx512 {
namespace {

using quant::kQK;

constexpr size_t kCodesBytes = 8 * 64;
constexpr int kTileMr = 12;  // x rows per tile

// The panel formats (gemm_kernels.h): Steps(panel, f) calls f(codes, s) for each step s of a
// block's codes (unsigned bytes, row j's at lanes 4j..4j+3), Scale and Min give the 16 rows'.
struct U8Panels {  // the int8 GEMM's, packed per call
  static constexpr size_t kBlockBytes = kInt8PanelBlockBytes;
  template <typename F>
  static void Steps(const uint8_t* panel, F f) {
    for (int s = 0; s < 8; ++s) f(_mm512_loadu_si512(panel + 64 * s), s);
  }
  static __m512 Scale(const uint8_t* panel) { return _mm512_loadu_ps(panel + kCodesBytes); }
  static __m512 Min(const uint8_t* panel, __m512) {
    return _mm512_loadu_ps(panel + kCodesBytes + kInt8GemmNr * sizeof(float));
  }
};

// PanelMatrix's formats: kCodeBytes of codes a block, then the rows' 16 f16 scales d, and a min of
// kOffset·d (value = d·(u − kOffset)); streamed from memory by decode, so prefetched ahead.
template <size_t kCodeBytes, int kOffset>
struct F16ScalePanels {
  static constexpr size_t kBlockBytes = kCodeBytes + kInt8GemmNr * sizeof(uint16_t);
  static void Prefetch(const uint8_t* panel) {
    for (size_t i = 0; i < kBlockBytes; i += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(panel + kQuantPrefetchBytes + i), _MM_HINT_T0);
    }
  }
  static __m512 Scale(const uint8_t* panel) {
    return _mm512_cvtph_ps(
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(panel + kCodeBytes)));
  }
  static __m512 Min(const uint8_t*, __m512 scale) {
    return _mm512_mul_ps(scale, _mm512_set1_ps(static_cast<float>(kOffset)));
  }
};

struct Q4_0Panels : F16ScalePanels<4 * 64, 8> {  // a code's nibbles: steps c and c + 4
  static_assert(kBlockBytes == kQ4_0PanelBlockBytes);
  template <typename F>
  static void Steps(const uint8_t* panel, F f) {
    Prefetch(panel);
    const __m512i nibble = _mm512_set1_epi8(0x0F);
    for (int c = 0; c < 4; ++c) {
      const __m512i z = _mm512_loadu_si512(panel + 64 * c);
      f(_mm512_and_si512(z, nibble), c);
      f(_mm512_and_si512(_mm512_srli_epi16(z, 4), nibble), c + 4);
    }
  }
};

struct Q8_0Panels : F16ScalePanels<8 * 64, 128> {  // the codes already flipped to unsigned
  static_assert(kBlockBytes == kQ8_0PanelBlockBytes);
  template <typename F>
  static void Steps(const uint8_t* panel, F f) {
    Prefetch(panel);
    for (int s = 0; s < 8; ++s) f(_mm512_loadu_si512(panel + 64 * s), s);
  }
};

// One tile: rows [0, MR) of x against one panel; columns j < nr of y written.
template <typename Format, int MR>
void Tile(const uint8_t* panel, int64_t blocks, const ActBlock32* x, float* y, int64_t ldy,
          int nr) {
  __m512 sum[MR];
  for (int i = 0; i < MR; ++i) sum[i] = _mm512_setzero_ps();
  for (int64_t b = 0; b < blocks; ++b, panel += Format::kBlockBytes) {
    __m512i dot[MR];
    for (int i = 0; i < MR; ++i) dot[i] = _mm512_setzero_si512();
    Format::Steps(panel, [&](__m512i w, int s) {
      for (int i = 0; i < MR; ++i) {
        int32_t codes;
        std::memcpy(&codes, x[i * blocks + b].qs + 4 * s, sizeof(codes));
        dot[i] = _mm512_dpbusd_epi32(dot[i], w, _mm512_set1_epi32(codes));
      }
    });
    const __m512 scale = Format::Scale(panel);
    const __m512 min = Format::Min(panel, scale);
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
      tile(packed + p * blocks * Format::kBlockBytes, blocks, x + i0 * blocks,
           y + i0 * ldy + p * kInt8GemmNr, ldy,
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
    default:
      return nullptr;
  }
}

}  // namespace pdserve::kernels::avx512
