// The bf16 dot-product GEMM on AMX tiles (gemm_kernels.h: AmxBf16Chunk). The pairs layout of a
// 32-row panel is what tdpbf16ps takes as its second operand: 16 pairs of k (a step) of 16 weight
// rows are 16 lines of 64 bytes, 128 bytes apart (rows 16–31 the next 64 bytes), and 16 x rows of
// 16 pairs are the first operand as RoundToBf16Pairs wrote them. Compiled with AVX-512, AVX512_BF16
// and AMX-TILE/BF16; called only when AmxActive() (kernels/cpu_features.h).
#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/gemm_avx512_tile.h"
#include "kernels/cpu/gemm_kernels.h"

namespace pdserve::kernels::avx512 {
namespace {

constexpr int kPairsPerStep = 16;  // a tile line of bf16 pairs: 64 bytes
constexpr int kPanelLineBytes = 2 * kGemmNr * sizeof(uint16_t);  // one pair of k of a panel

// The tile registers' shapes (palette 1): 0–3 the fp32 accumulators C[a][b] of x rows 16a.. and
// weight rows 16b.., 4–5 the x tiles (rows 0–15, 16–31), 6–7 the weight tiles (rows 0–15, 16–31).
// `low` x rows in the first half, `high` (0 leaves tiles 2, 3 and 5 unconfigured) in the second.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};  // bytes a line
  uint8_t rows[16] = {};
};

TileConfig ConfigFor(int low, int high) {
  TileConfig c;
  auto shape = [&c](int tile, int rows) {
    c.rows[tile] = static_cast<uint8_t>(rows);
    c.colsb[tile] = 64;
  };
  shape(0, low);
  shape(1, low);
  shape(4, low);
  shape(6, kPairsPerStep);
  shape(7, kPairsPerStep);
  if (high > 0) {
    shape(2, high);
    shape(3, high);
    shape(5, high);
  }
  return c;
}

// Sums over `steps` steps of 16 pairs into the accumulators, the tiles configured for ConfigFor(
// low, high) with high > 0 iff kHigh; writes them to the 32 × 32 floats at `out`.
template <bool kHigh>
void StepTiles(const uint32_t* x, int64_t ldx, const uint16_t* panel, int64_t steps, float* out) {
  const int64_t x_stride = ldx * sizeof(uint32_t);
  _tile_zero(0);
  _tile_zero(1);
  if constexpr (kHigh) {
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t s = 0; s < steps; ++s) {
    const uint32_t* xs = x + s * kPairsPerStep;
    const auto* ws = reinterpret_cast<const uint8_t*>(panel) + s * kPairsPerStep * kPanelLineBytes;
    _tile_loadd(4, xs, x_stride);
    _tile_loadd(6, ws, kPanelLineBytes);
    _tile_loadd(7, ws + 64, kPanelLineBytes);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    if constexpr (kHigh) {
      _tile_loadd(5, xs + kPairsPerStep * ldx, x_stride);
      _tile_dpbf16ps(2, 5, 6);
      _tile_dpbf16ps(3, 5, 7);
    }
  }
  constexpr int64_t kOutStride = kAmxMr * sizeof(float);
  _tile_stored(0, out, kOutStride);
  _tile_stored(1, out + 16, kOutStride);
  if constexpr (kHigh) {
    _tile_stored(2, out + 16 * kAmxMr, kOutStride);
    _tile_stored(3, out + 16 * kAmxMr + 16, kOutStride);
  }
}

// Rows [0, mr) and columns [0, nr) of the 32 × 32 floats at `out` into y (adding y's values first
// if `accumulate`).
void WriteTile(const float* out, int mr, float* y, int64_t ldy, int nr, bool accumulate) {
  const __mmask16 m0 = Mask(nr), m1 = Mask(nr - 16);
  for (int i = 0; i < mr; ++i) {
    const float* from = out + i * kAmxMr;
    float* row = y + i * ldy;
    __m512 v0 = _mm512_loadu_ps(from), v1 = _mm512_loadu_ps(from + 16);
    if (accumulate) {
      v0 = _mm512_add_ps(v0, _mm512_maskz_loadu_ps(m0, row));
      v1 = _mm512_add_ps(v1, _mm512_maskz_loadu_ps(m1, row + 16));
    }
    _mm512_mask_storeu_ps(row, m0, v0);
    _mm512_mask_storeu_ps(row + 16, m1, v1);
  }
}

}  // namespace

void AmxBf16Chunk(const uint32_t* x, int64_t ldx, int64_t n, int64_t cols, const uint16_t* chunk,
                  int64_t rows, float* y, int64_t ldy, bool accumulate) {
  const int64_t panels = (rows + kGemmNr - 1) / kGemmNr;
  int configured_low = 0, configured_high = -1;  // none yet
  alignas(64) float out[kAmxMr * kAmxMr];
  ForEachGemmTile(kAmxMr, kGemmNr, n, cols, rows,
                  [&](int64_t k0, int64_t kc, int64_t i0, int mr, int64_t p, int nr) {
                    const int low = std::min(mr, 16), high = mr - low;
                    if (low != configured_low || high != configured_high) {
                      const TileConfig config = ConfigFor(low, high);
                      _tile_loadconfig(&config);
                      configured_low = low;
                      configured_high = high;
                    }
                    const uint32_t* xt = x + i0 * ldx + k0 / 2;
                    const uint16_t* panel = chunk + (k0 * panels + p * kc) * kGemmNr;
                    const int64_t steps = kc / (2 * kPairsPerStep);
                    if (high > 0) {
                      StepTiles<true>(xt, ldx, panel, steps, out);
                    } else {
                      StepTiles<false>(xt, ldx, panel, steps, out);
                    }
                    // The last kc % 32 k by the vdpbf16ps tile, onto the tiles' sums.
                    const int64_t done = 2 * steps * kPairsPerStep;  // k
                    for (int i = 0; done < kc && i < mr; i += kGemmMr) {
                      Bf16DotTile({.x = xt + i * ldx + done / 2,
                                   .ldx = ldx,
                                   .mr = std::min(kGemmMr, mr - i),
                                   .panel = panel + done * kGemmNr,
                                   .kc = kc - done,
                                   .y = out + i * kAmxMr,
                                   .ldy = kAmxMr,
                                   .nr = kGemmNr,
                                   .accumulate = true});
                    }
                    WriteTile(out, mr, y + i0 * ldy + p * kGemmNr, ldy, nr, accumulate || k0 > 0);
                  });
  if (configured_high >= 0) _tile_release();
}

}  // namespace pdserve::kernels::avx512
