#include "core/tensor/quantize.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstring>

#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"

namespace pdserve::quant {
namespace {

// Below this magnitude a group quantizes to zeros (ggml's GROUP_MAX_EPS).
constexpr float kGroupMaxEps = 1e-15f;

// Round half to even, as ggml's nearest_int (exact for |x| < 2^22, which every caller keeps to).
int NearestInt(float x) { return static_cast<int>(std::nearbyintf(x)); }

template <typename Block>
Block* BlocksAt(void* dst) {
  return static_cast<Block*>(dst);
}

// The element of largest magnitude (its sign kept; the first of ties) and that magnitude.
std::pair<float, float> SignedMax(const float* x, int n) {
  float amax = 0.0f;
  float max = 0.0f;
  for (int i = 0; i < n; ++i) {
    if (amax < std::fabs(x[i])) {
      amax = std::fabs(x[i]);
      max = x[i];
    }
  }
  return {max, amax};
}

std::pair<float, float> MinMax(const float* x, int n) {
  float min = FLT_MAX;
  float max = -FLT_MAX;
  for (int i = 0; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
  }
  return {min, max};
}

void QuantizeQ8_0(const float* x, int64_t blocks, BlockQ8_0* y) {
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    const float d = SignedMax(x, kQK).second / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    y[b].d = F32ToF16(d);
    for (int j = 0; j < kQK; ++j) y[b].qs[j] = static_cast<int8_t>(std::roundf(x[j] * id));
  }
}

// Q4_0 and Q5_0: codes q = x/d + 2^(bits-1), d = -max/2^(bits-1) for the signed extreme `max`.
template <int kBits>
void SymmetricCodes(const float* x, uint16_t* d_out, uint8_t* codes) {
  constexpr int kOffset = 1 << (kBits - 1);
  constexpr int kTop = (1 << kBits) - 1;
  const float d = SignedMax(x, kQK).first / -static_cast<float>(kOffset);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = F32ToF16(d);
  for (int j = 0; j < kQK; ++j) {
    codes[j] = static_cast<uint8_t>(
        std::min(kTop, static_cast<int>(static_cast<int8_t>(x[j] * id + (kOffset + 0.5f)))));
  }
}

// Q4_1 and Q5_1: codes q = (x - min)/d, d = (max - min)/(2^bits - 1).
template <int kBits>
void AffineCodes(const float* x, uint16_t* d_out, uint16_t* m_out, uint8_t* codes) {
  constexpr int kTop = (1 << kBits) - 1;
  const auto [min, max] = MinMax(x, kQK);
  const float d = (max - min) / static_cast<float>(kTop);
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = F32ToF16(d);
  *m_out = F32ToF16(min);
  for (int j = 0; j < kQK; ++j) {
    codes[j] = static_cast<uint8_t>(
        std::min(kTop, static_cast<int>(static_cast<uint8_t>((x[j] - min) * id + 0.5f))));
  }
}

// Element j in the low nibble of byte j, element j + 16 in the high one; the fifth bits (if
// `qh`) at bit j of a little-endian word.
void PackNibbles32(const uint8_t* codes, uint8_t* qs, uint8_t* qh) {
  uint32_t high = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    qs[j] = static_cast<uint8_t>((codes[j] & 0xF) | ((codes[j + 16] & 0xF) << 4));
    high |= static_cast<uint32_t>(codes[j] >> 4) << j;
    high |= static_cast<uint32_t>(codes[j + 16] >> 4) << (j + 16);
  }
  if (qh != nullptr) std::memcpy(qh, &high, sizeof(high));
}

template <typename Block>
void QuantizeSymmetric(const float* x, int64_t blocks, Block* y) {
  constexpr bool kFiveBits = requires(Block b) { b.qh; };
  uint8_t codes[kQK];
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    SymmetricCodes<kFiveBits ? 5 : 4>(x, &y[b].d, codes);
    if constexpr (kFiveBits) {
      PackNibbles32(codes, y[b].qs, y[b].qh);
    } else {
      PackNibbles32(codes, y[b].qs, nullptr);
    }
  }
}

template <typename Block>
void QuantizeAffine(const float* x, int64_t blocks, Block* y) {
  constexpr bool kFiveBits = requires(Block b) { b.qh; };
  uint8_t codes[kQK];
  for (int64_t b = 0; b < blocks; ++b, x += kQK) {
    AffineCodes<kFiveBits ? 5 : 4>(x, &y[b].d, &y[b].m, codes);
    if constexpr (kFiveBits) {
      PackNibbles32(codes, y[b].qs, y[b].qh);
    } else {
      PackNibbles32(codes, y[b].qs, nullptr);
    }
  }
}

// ggml's make_qkx2_quants: codes L in [0, nmax] and (scale, -min) minimizing the weighted squared
// error of scale·L + min against x (min ≤ 0), searching nstep + 1 trial scales around nmax/range.
float AffineScaleSearch(int n, int nmax, const float* x, const float* weights, uint8_t* L,
                        float* neg_min, float rmin, float rdelta, int nstep) {
  float min = x[0];
  float max = x[0];
  float sum_w = weights[0];
  float sum_x = sum_w * x[0];
  for (int i = 1; i < n; ++i) {
    min = std::min(min, x[i]);
    max = std::max(max, x[i]);
    sum_w += weights[i];
    sum_x += weights[i] * x[i];
  }
  if (min > 0) min = 0;
  if (max == min) {
    std::fill(L, L + n, 0);
    *neg_min = -min;
    return 0.0f;
  }
  float iscale = nmax / (max - min);
  float scale = 1 / iscale;
  float best_error = 0;
  for (int i = 0; i < n; ++i) {
    L[i] = static_cast<uint8_t>(std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax));
    const float diff = scale * L[i] + min - x[i];
    best_error += weights[i] * (diff * diff);
  }
  uint8_t trial[kQK_K];
  for (int is = 0; is <= nstep; ++is) {
    iscale = (rmin + rdelta * is + nmax) / (max - min);
    float sum_l = 0, sum_l2 = 0, sum_xl = 0;
    for (int i = 0; i < n; ++i) {
      const int l = std::clamp(NearestInt(iscale * (x[i] - min)), 0, nmax);
      trial[i] = static_cast<uint8_t>(l);
      sum_l += weights[i] * l;
      sum_l2 += weights[i] * l * l;
      sum_xl += weights[i] * l * x[i];
    }
    const float D = sum_w * sum_l2 - sum_l * sum_l;
    if (D <= 0) continue;
    float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
    float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
    if (this_min > 0) {
      this_min = 0;
      this_scale = sum_xl / sum_l2;
    }
    float error = 0;
    for (int i = 0; i < n; ++i) {
      const float diff = this_scale * trial[i] + this_min - x[i];
      error += weights[i] * (diff * diff);
    }
    if (error < best_error) {
      std::copy(trial, trial + n, L);
      best_error = error;
      scale = this_scale;
      min = this_min;
    }
  }
  *neg_min = -min;
  return scale;
}

// ggml's make_qx_quants with rmse_type 1 (weights x²) and no importance: signed codes
// L in [0, 2·nmax) (code - nmax is the level), and the scale among 19 trials with the least error.
float SymmetricScaleSearch(int n, int nmax, const float* x, uint8_t* L) {
  const auto [max, amax] = SignedMax(x, n);
  if (amax < kGroupMaxEps) {
    std::fill(L, L + n, 0);
    return 0.0f;
  }
  auto level = [&](float iscale, int i) {
    return std::clamp(NearestInt(iscale * x[i]), -nmax, nmax - 1);
  };
  float iscale = -nmax / max;
  float sum_lx = 0, sum_l2 = 0;
  for (int i = 0; i < n; ++i) {
    const int l = level(iscale, i);
    L[i] = static_cast<uint8_t>(l + nmax);
    const float w = x[i] * x[i];
    sum_lx += w * x[i] * l;
    sum_l2 += w * l * l;
  }
  float scale = sum_l2 != 0 ? sum_lx / sum_l2 : 0.0f;
  float best = scale * sum_lx;
  for (int is = -9; is <= 9; ++is) {
    if (is == 0) continue;
    iscale = -(nmax + 0.1f * is) / max;
    sum_lx = sum_l2 = 0;
    for (int i = 0; i < n; ++i) {
      const int l = level(iscale, i);
      const float w = x[i] * x[i];
      sum_lx += w * x[i] * l;
      sum_l2 += w * l * l;
    }
    if (sum_l2 > 0 && sum_lx * sum_lx > best * sum_l2) {
      for (int i = 0; i < n; ++i) L[i] = static_cast<uint8_t>(level(iscale, i) + nmax);
      scale = sum_lx / sum_l2;
      best = scale * sum_lx;
    }
  }
  return scale;
}

// Q4_K and Q5_K: 8 sub-blocks of 32 with 6-bit scales and minimums under f16 super-scales;
// codes in [0, 2^kBits).
template <int kBits, typename Block>
void QuantizeAffineK(const float* x, Block* y, uint8_t* L) {
  constexpr int kTop = (1 << kBits) - 1;
  constexpr int kSub = kQK_K / 32;
  float scales[kSub];
  float mins[kSub];
  float weights[32];
  float max_scale = 0, max_min = 0;
  for (int j = 0; j < kSub; ++j) {
    const float* xs = x + 32 * j;
    float sum_x2 = 0;
    for (int l = 0; l < 32; ++l) sum_x2 += xs[l] * xs[l];
    const float av_x = std::sqrt(sum_x2 / 32);
    for (int l = 0; l < 32; ++l) weights[l] = av_x + std::fabs(xs[l]);
    scales[j] =
        kBits == 4
            ? AffineScaleSearch(32, kTop, xs, weights, L + 32 * j, &mins[j], -1.0f, 0.1f, 20)
            : AffineScaleSearch(32, kTop, xs, weights, L + 32 * j, &mins[j], -0.5f, 0.1f, 15);
    max_scale = std::max(max_scale, scales[j]);
    max_min = std::max(max_min, mins[j]);
  }
  const float inv_scale = max_scale > 0 ? 63.0f / max_scale : 0.0f;
  const float inv_min = max_min > 0 ? 63.0f / max_min : 0.0f;
  for (int j = 0; j < kSub; ++j) {
    const uint8_t ls = static_cast<uint8_t>(std::min(63, NearestInt(inv_scale * scales[j])));
    const uint8_t lm = static_cast<uint8_t>(std::min(63, NearestInt(inv_min * mins[j])));
    if (j < 4) {
      y->scales[j] = ls;
      y->scales[j + 4] = lm;
    } else {
      y->scales[j + 4] = static_cast<uint8_t>((ls & 0xF) | ((lm & 0xF) << 4));
      y->scales[j - 4] |= static_cast<uint8_t>((ls >> 4) << 6);
      y->scales[j] |= static_cast<uint8_t>((lm >> 4) << 6);
    }
  }
  y->d = F32ToF16(max_scale / 63.0f);
  y->dmin = F32ToF16(max_min / 63.0f);
  for (int j = 0; j < kSub; ++j) {
    uint8_t sc, m;
    ScaleMinK4(j, y->scales, &sc, &m);
    const float d = F16ToF32(y->d) * sc;
    if (d == 0.0f) continue;
    const float dm = F16ToF32(y->dmin) * m;
    for (int i = 0; i < 32; ++i) {
      L[32 * j + i] =
          static_cast<uint8_t>(std::clamp(NearestInt((x[32 * j + i] + dm) / d), 0, kTop));
    }
  }
}

void QuantizeQ4_K(const float* x, int64_t blocks, BlockQ4_K* y) {
  uint8_t L[kQK_K];
  for (int64_t b = 0; b < blocks; ++b, x += kQK_K) {
    std::memset(y[b].scales, 0, sizeof(y[b].scales));
    QuantizeAffineK<4>(x, &y[b], L);
    uint8_t* q = y[b].qs;
    for (int j = 0; j < kQK_K; j += 64, q += 32) {
      for (int l = 0; l < 32; ++l) q[l] = static_cast<uint8_t>(L[j + l] | (L[j + l + 32] << 4));
    }
  }
}

void QuantizeQ5_K(const float* x, int64_t blocks, BlockQ5_K* y) {
  uint8_t L[kQK_K];
  for (int64_t b = 0; b < blocks; ++b, x += kQK_K) {
    std::memset(y[b].scales, 0, sizeof(y[b].scales));
    QuantizeAffineK<5>(x, &y[b], L);
    std::memset(y[b].qh, 0, sizeof(y[b].qh));
    uint8_t* ql = y[b].qs;
    for (int n = 0, shift = 0; n < kQK_K; n += 64, shift += 2, ql += 32) {
      for (int j = 0; j < 32; ++j) {
        const int l1 = L[n + j];
        const int l2 = L[n + j + 32];
        y[b].qh[j] |= static_cast<uint8_t>(((l1 >> 4) << shift) | ((l2 >> 4) << (shift + 1)));
        ql[j] = static_cast<uint8_t>((l1 & 0xF) | ((l2 & 0xF) << 4));
      }
    }
  }
}

void QuantizeQ6_K(const float* x, int64_t blocks, BlockQ6_K* y) {
  constexpr int kSub = kQK_K / 16;
  uint8_t L[kQK_K];
  float scales[kSub];
  for (int64_t b = 0; b < blocks; ++b, x += kQK_K) {
    float max_scale = 0, max_abs_scale = 0;
    for (int ib = 0; ib < kSub; ++ib) {
      scales[ib] = SymmetricScaleSearch(16, 32, x + 16 * ib, L + 16 * ib);
      if (std::fabs(scales[ib]) > max_abs_scale) {
        max_abs_scale = std::fabs(scales[ib]);
        max_scale = scales[ib];
      }
    }
    if (max_abs_scale < kGroupMaxEps) {
      std::memset(&y[b], 0, sizeof(y[b]));
      continue;
    }
    const float iscale = -128.0f / max_scale;
    y[b].d = F32ToF16(1 / iscale);
    for (int ib = 0; ib < kSub; ++ib) {
      y[b].scales[ib] = static_cast<int8_t>(std::min(127, NearestInt(iscale * scales[ib])));
    }
    for (int j = 0; j < kSub; ++j) {
      const float d = F16ToF32(y[b].d) * y[b].scales[j];
      if (d == 0.0f) continue;
      for (int i = 0; i < 16; ++i) {
        L[16 * j + i] =
            static_cast<uint8_t>(std::clamp(NearestInt(x[16 * j + i] / d), -32, 31) + 32);
      }
    }
    uint8_t* ql = y[b].ql;
    uint8_t* qh = y[b].qh;
    for (int j = 0; j < kQK_K; j += 128, ql += 64, qh += 32) {
      for (int l = 0; l < 32; ++l) {
        const uint8_t* q = L + j + l;
        ql[l] = static_cast<uint8_t>((q[0] & 0xF) | ((q[64] & 0xF) << 4));
        ql[l + 32] = static_cast<uint8_t>((q[32] & 0xF) | ((q[96] & 0xF) << 4));
        qh[l] = static_cast<uint8_t>((q[0] >> 4) | ((q[32] >> 4) << 2) | ((q[64] >> 4) << 4) |
                                     ((q[96] >> 4) << 6));
      }
    }
  }
}

}  // namespace

void QuantizeRow(DType dtype, const float* src, int64_t n, void* dst) {
  const int64_t blocks = n / BlockElements(dtype);
  switch (dtype) {
    case DType::kQ8_0:
      return QuantizeQ8_0(src, blocks, BlocksAt<BlockQ8_0>(dst));
    case DType::kQ4_0:
      return QuantizeSymmetric(src, blocks, BlocksAt<BlockQ4_0>(dst));
    case DType::kQ5_0:
      return QuantizeSymmetric(src, blocks, BlocksAt<BlockQ5_0>(dst));
    case DType::kQ4_1:
      return QuantizeAffine(src, blocks, BlocksAt<BlockQ4_1>(dst));
    case DType::kQ5_1:
      return QuantizeAffine(src, blocks, BlocksAt<BlockQ5_1>(dst));
    case DType::kQ4_K:
      return QuantizeQ4_K(src, blocks, BlocksAt<BlockQ4_K>(dst));
    case DType::kQ5_K:
      return QuantizeQ5_K(src, blocks, BlocksAt<BlockQ5_K>(dst));
    case DType::kQ6_K:
      return QuantizeQ6_K(src, blocks, BlocksAt<BlockQ6_K>(dst));
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      break;
  }
}

}  // namespace pdserve::quant
