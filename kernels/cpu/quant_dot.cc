#include "kernels/cpu/quant_dot.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/tensor/float16.h"
#include "core/tensor/quant_blocks.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {
namespace {

using namespace quant;  // NOLINT: the block formats

// --- 32-element formats: codes of block i into q[32] (signed), with the block's scale and min.

// Σ q[j] for j in [begin, end).
int SumCodes(const int8_t* q, int begin, int end) {
  int s = 0;
  for (int j = begin; j < end; ++j) s += q[j];
  return s;
}

int Dot32(const int* w, const int8_t* a) {
  int s = 0;
  for (int j = 0; j < kQK; ++j) s += w[j] * a[j];
  return s;
}

// Block codes of the 32-element formats; `min` is 0 for the symmetric ones.
struct Codes32 {
  int q[kQK];
  float d = 0.0f, min = 0.0f;
};

void Nibbles(const uint8_t* qs, int offset, int* q) {
  for (int j = 0; j < kQK / 2; ++j) {
    q[j] = (qs[j] & 0x0F) - offset;
    q[j + kQK / 2] = (qs[j] >> 4) - offset;
  }
}

void FifthBits(const uint8_t* qh_bytes, int offset, int* q) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  for (int j = 0; j < kQK; ++j) q[j] += static_cast<int>((qh >> j) & 1u) * 16 - offset;
}

template <DType D>
Codes32 DecodeBlock32(const void* w, int64_t i) {
  Codes32 c;
  if constexpr (D == DType::kQ8_0) {
    const auto& b = static_cast<const BlockQ8_0*>(w)[i];
    for (int j = 0; j < kQK; ++j) c.q[j] = b.qs[j];
    c.d = F16ToF32(b.d);
  } else if constexpr (D == DType::kQ4_0) {
    const auto& b = static_cast<const BlockQ4_0*>(w)[i];
    Nibbles(b.qs, 8, c.q);
    c.d = F16ToF32(b.d);
  } else if constexpr (D == DType::kQ4_1) {
    const auto& b = static_cast<const BlockQ4_1*>(w)[i];
    Nibbles(b.qs, 0, c.q);
    c.d = F16ToF32(b.d);
    c.min = F16ToF32(b.m);
  } else if constexpr (D == DType::kQ5_0) {
    const auto& b = static_cast<const BlockQ5_0*>(w)[i];
    Nibbles(b.qs, 0, c.q);
    FifthBits(b.qh, 16, c.q);
    c.d = F16ToF32(b.d);
  } else {
    const auto& b = static_cast<const BlockQ5_1*>(w)[i];
    Nibbles(b.qs, 0, c.q);
    FifthBits(b.qh, 0, c.q);
    c.d = F16ToF32(b.d);
    c.min = F16ToF32(b.m);
  }
  return c;
}

template <DType D>
float ScalarDot32(const void* w, const void* act, int64_t cols) {
  const auto* a = static_cast<const ActBlock32*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < cols / kQK; ++i) {
    const Codes32 c = DecodeBlock32<D>(w, i);
    sum += c.d * a[i].d * static_cast<float>(Dot32(c.q, a[i].qs)) + c.min * a[i].sum;
  }
  return sum;
}

// A row's 32-element block as unsigned codes: the stored codes, min = −m for the formats with a
// minimum, else min = bias·d with bias the format's offset (8, 16; 128 for Q8_0, whose codes are
// flipped to unsigned): every product and difference exact in fp32. Byte loops, for speed: the
// prefill GEMM unpacks every weight once per call.
template <DType D>
void Block32AsU8(const void* row, int64_t b, uint8_t* u, float* scale, float* min) {
  if constexpr (D == DType::kQ8_0) {
    const auto& x = static_cast<const BlockQ8_0*>(row)[b];
    for (int j = 0; j < kQK; ++j) u[j] = static_cast<uint8_t>(x.qs[j]) ^ 0x80;
    *scale = F16ToF32(x.d);
    *min = 128.0f * *scale;
    return;
  } else {
    const auto& x = static_cast<const Block32Of<D>*>(row)[b];
    for (int j = 0; j < kQK / 2; ++j) {
      u[j] = x.qs[j] & 0x0F;
      u[j + kQK / 2] = x.qs[j] >> 4;
    }
    if constexpr (D == DType::kQ5_0 || D == DType::kQ5_1) {
      uint32_t qh;
      std::memcpy(&qh, x.qh, sizeof(qh));
      for (int j = 0; j < kQK; ++j) u[j] |= static_cast<uint8_t>(((qh >> j) & 1u) << 4);
    }
    *scale = F16ToF32(x.d);
    if constexpr (D == DType::kQ4_1 || D == DType::kQ5_1) {
      *min = -F16ToF32(x.m);
    } else {
      *min = (D == DType::kQ4_0 ? 8.0f : 16.0f) * *scale;
    }
  }
}

// Sub-block b % 8 of super-block b / 8 of a Q4_K/Q5_K row: codes 0-15 (0-31), scale d·s, min
// dmin·m.
template <typename Block, bool kFifthBit>
void SubBlockK4AsU8(const void* row, int64_t b, uint8_t* u, float* scale, float* min) {
  const Block& x = static_cast<const Block*>(row)[b / 8];
  const int sub = static_cast<int>(b % 8), shift = (sub & 1) * 4;
  for (int l = 0; l < kQK; ++l) {
    int code = (x.qs[(sub / 2) * 32 + l] >> shift) & 0xF;
    if constexpr (kFifthBit) code += ((x.qh[l] >> sub) & 1) * 16;
    u[l] = static_cast<uint8_t>(code);
  }
  uint8_t s, m;
  ScaleMinK4(sub, x.scales, &s, &m);
  *scale = F16ToF32(x.d) * s;
  *min = F16ToF32(x.dmin) * m;
}

// --- K-quants: Σ over sub-blocks of scale · (integer dot) − minimum · (activation sum).

template <typename Block, bool kFifthBit>
float ScalarDotK4Family(const void* w, const void* act, int64_t cols) {
  const auto* x = static_cast<const Block*>(w);
  const auto* a = static_cast<const ActBlockK*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < cols / kQK_K; ++i) {
    int dot = 0, mins = 0;
    const uint8_t* q = x[i].qs;
    for (int sub = 0; sub < 8; ++sub) {
      uint8_t scale, min;
      ScaleMinK4(sub, x[i].scales, &scale, &min);
      const int8_t* qa = a[i].qs + sub * 32;
      const int shift = (sub & 1) * 4;
      int s = 0;
      for (int l = 0; l < 32; ++l) {
        int code = (q[(sub / 2) * 32 + l] >> shift) & 0xF;
        if constexpr (kFifthBit) code += ((x[i].qh[l] >> sub) & 1) * 16;
        s += code * qa[l];
      }
      dot += scale * s;
      mins += min * (a[i].bsums[2 * sub] + a[i].bsums[2 * sub + 1]);
    }
    sum += a[i].d * (F16ToF32(x[i].d) * static_cast<float>(dot) -
                     F16ToF32(x[i].dmin) * static_cast<float>(mins));
  }
  return sum;
}

float ScalarDotQ6_K(const void* w, const void* act, int64_t cols) {
  const auto* x = static_cast<const BlockQ6_K*>(w);
  const auto* a = static_cast<const ActBlockK*>(act);
  float sum = 0.0f;
  for (int64_t i = 0; i < cols / kQK_K; ++i) {
    int dot = 0;
    for (int half = 0; half < 2; ++half) {
      const uint8_t* ql = x[i].ql + 64 * half;
      const uint8_t* qh = x[i].qh + 32 * half;
      const int8_t* sc = x[i].scales + 8 * half;
      const int8_t* qa = a[i].qs + 128 * half;
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        int q[4];
        Q6KSignedCodes(ql, qh, l, q);
        dot += sc[is] * q[0] * qa[l] + sc[is + 2] * q[1] * qa[l + 32] +
               sc[is + 4] * q[2] * qa[l + 64] + sc[is + 6] * q[3] * qa[l + 96];
      }
    }
    sum += a[i].d * F16ToF32(x[i].d) * static_cast<float>(dot);
  }
  return sum;
}

constexpr int64_t kStandardGemmFromRows = 12;

// The standard layouts' GEMV: one BestQuantDot call per (weight row, activation row), each
// weight row's cache lines prefetched kQuantPrefetchBytes ahead first (quant_dot.h).
void StandardRows(DType dtype, const uint8_t* w, size_t row_bytes, int64_t n_rows, const void* act,
                  size_t act_bytes, int nb, int64_t cols, float* y, int64_t ldy) {
  const QuantDotFn dot = BestQuantDot(dtype);
  const auto* a = static_cast<const uint8_t*>(act);
  for (int64_t r = 0; r < n_rows; ++r) {
    const uint8_t* row = w + r * row_bytes;
    for (size_t i = 0; i < row_bytes; i += 64) {
      _mm_prefetch(reinterpret_cast<const char*>(row + kQuantPrefetchBytes + i), _MM_HINT_T0);
    }
    for (int b = 0; b < nb; ++b) y[b * ldy + r] = dot(row, a + b * act_bytes, cols);
  }
}

}  // namespace

// Codes q = round(x·127/amax) (half to even) and the scale: amax/127 rounded to f16 for the
// 32-element blocks (ggml's Q8_0/Q8_1 store it so), 1/(127/amax) in f32 for the 256-element ones
// (ggml's Q8_K), so that dot products see the activations llama.cpp's do; all zero for a zero
// block.
float QuantizeActivationBlock(const float* x, int n, int8_t* q) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(x[i]));
  if (amax == 0.0f) {
    std::memset(q, 0, n);
    return 0.0f;
  }
  const float inverse = 127.0f / amax;
  const float d = n == kQK_K ? 1.0f / inverse : F16ToF32(F32ToF16(amax / 127.0f));
  for (int i = 0; i < n; ++i) {
    const float r = std::nearbyint(x[i] * inverse);
    // In range, or saturated; NaN (a diverged activation) must not reach the conversion.
    q[i] = r >= -127.0f && r <= 127.0f ? static_cast<int8_t>(r) : (r > 0.0f ? 127 : -127);
  }
  return d;
}

size_t QuantizedActivationBytes(DType dtype, int64_t cols) {
  return BlockElements(dtype) == kQK_K ? cols / kQK_K * sizeof(ActBlockK)
                                       : cols / kQK * sizeof(ActBlock32);
}

void QuantizeActivations(DType dtype, const float* x, int64_t cols, void* out) {
  if (BlockElements(dtype) == kQK_K) {
    auto* a = static_cast<ActBlockK*>(out);
    for (int64_t i = 0; i < cols / kQK_K; ++i, x += kQK_K) {
      a[i].d = QuantizeActivationBlock(x, kQK_K, a[i].qs);
      for (int g = 0; g < 16; ++g) {
        int s = 0;
        for (int j = 0; j < 16; ++j) s += a[i].qs[16 * g + j];
        a[i].bsums[g] = static_cast<int16_t>(s);
      }
    }
    return;
  }
  auto* a = static_cast<ActBlock32*>(out);
  for (int64_t i = 0; i < cols / kQK; ++i, x += kQK) {
    a[i].d = QuantizeActivationBlock(x, kQK, a[i].qs);
    const int low = SumCodes(a[i].qs, 0, kQK / 2), high = SumCodes(a[i].qs, kQK / 2, kQK);
    a[i].sum = a[i].d * static_cast<float>(low + high);
    a[i].half_sums[0] = a[i].d * static_cast<float>(low);
    a[i].half_sums[1] = a[i].d * static_cast<float>(high);
  }
}

QuantDotFn ScalarQuantDot(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return nullptr;
    case DType::kQ8_0:
      return ScalarDot32<DType::kQ8_0>;
    case DType::kQ4_0:
      return ScalarDot32<DType::kQ4_0>;
    case DType::kQ4_1:
      return ScalarDot32<DType::kQ4_1>;
    case DType::kQ5_0:
      return ScalarDot32<DType::kQ5_0>;
    case DType::kQ5_1:
      return ScalarDot32<DType::kQ5_1>;
    case DType::kQ4_K:
      return ScalarDotK4Family<BlockQ4_K, false>;
    case DType::kQ5_K:
      return ScalarDotK4Family<BlockQ5_K, true>;
    case DType::kQ6_K:
      return ScalarDotQ6_K;
  }
  return nullptr;
}

QuantDotFn BestQuantDot(DType dtype) {
  if (ActiveSimdLevel() == SimdLevel::kAvx512) {
    if (QuantDotFn wide = avx512::QuantDot(dtype); wide != nullptr) return wide;
  }
  QuantDotFn fast = avx2::QuantDot(dtype);
  return fast != nullptr ? fast : ScalarQuantDot(dtype);
}

Block32AsU8Fn Block32AsU8For(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return Block32AsU8<DType::kQ8_0>;
    case DType::kQ4_0:
      return Block32AsU8<DType::kQ4_0>;
    case DType::kQ4_1:
      return Block32AsU8<DType::kQ4_1>;
    case DType::kQ5_0:
      return Block32AsU8<DType::kQ5_0>;
    case DType::kQ5_1:
      return Block32AsU8<DType::kQ5_1>;
    case DType::kQ4_K:
      return SubBlockK4AsU8<BlockQ4_K, false>;
    case DType::kQ5_K:
      return SubBlockK4AsU8<BlockQ5_K, true>;
    default:
      return nullptr;  // plain types; Q6_K's scales cover 16 elements
  }
}

int Block32AsU8MaxCode(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return 255;
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K:
      return 31;
    default:
      return 15;
  }
}

QuantGemvKernel BestQuantGemv(DType dtype, int64_t cols) {
  if (ActiveSimdLevel() == SimdLevel::kAvx512 && GetCpuFeatures().avx512_vnni) {
    if (QuantGemvKernel vnni = avx512::VnniQuantGemv(dtype, cols); vnni.rows != nullptr) {
      return vnni;
    }
  }
  return {QuantizedActivationBytes, QuantizeActivations, StandardRows, kStandardGemmFromRows};
}

}  // namespace pdserve::kernels
