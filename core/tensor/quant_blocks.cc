#include "core/tensor/quant_blocks.h"

#include <cstring>

#include "core/tensor/float16.h"

namespace pdserve::quant {
namespace {

// Each function dequantizes `blocks` blocks from x into y, with ggml's arithmetic.

void DequantizeQ8_0(const BlockQ8_0* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK; ++j) y[j] = x[i].qs[j] * d;
  }
}

void DequantizeQ4_0(const BlockQ4_0* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = ((x[i].qs[j] & 0x0F) - 8) * d;
      y[j + kQK / 2] = ((x[i].qs[j] >> 4) - 8) * d;
    }
  }
}

void DequantizeQ4_1(const BlockQ4_1* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    for (int j = 0; j < kQK / 2; ++j) {
      y[j] = (x[i].qs[j] & 0x0F) * d + m;
      y[j + kQK / 2] = (x[i].qs[j] >> 4) * d + m;
    }
  }
}

// The 5-bit codes of a Q5_0/Q5_1 block: low nibbles from qs, fifth bits from qh.
void FiveBitCodes(const uint8_t* qh_bytes, const uint8_t* qs, int codes[kQK]) {
  uint32_t qh;
  std::memcpy(&qh, qh_bytes, sizeof(qh));
  for (int j = 0; j < kQK / 2; ++j) {
    codes[j] = (qs[j] & 0x0F) | (((qh >> j) << 4) & 0x10);
    codes[j + kQK / 2] = (qs[j] >> 4) | ((qh >> (j + 12)) & 0x10);
  }
}

void DequantizeQ5_0(const BlockQ5_0* x, int64_t blocks, float* y) {
  int codes[kQK];
  for (int64_t i = 0; i < blocks; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d);
    FiveBitCodes(x[i].qh, x[i].qs, codes);
    for (int j = 0; j < kQK; ++j) y[j] = (codes[j] - 16) * d;
  }
}

void DequantizeQ5_1(const BlockQ5_1* x, int64_t blocks, float* y) {
  int codes[kQK];
  for (int64_t i = 0; i < blocks; ++i, y += kQK) {
    const float d = F16ToF32(x[i].d), m = F16ToF32(x[i].m);
    FiveBitCodes(x[i].qh, x[i].qs, codes);
    for (int j = 0; j < kQK; ++j) y[j] = codes[j] * d + m;
  }
}

// Q4_K and Q5_K: 64 elements at a time, two sub-blocks of 32 sharing the bytes of qs (low nibble,
// high nibble); Q5_K adds a fifth bit from qh (bit `shift` for the first sub-block, shift + 1 for
// the second).
template <typename Block, bool kFifthBit>
void DequantizeK4Family(const Block* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i) {
    const float d = F16ToF32(x[i].d), dmin = F16ToF32(x[i].dmin);
    const uint8_t* q = x[i].qs;
    for (int j = 0, sub = 0; j < kQK_K; j += 64, q += 32, sub += 2) {
      uint8_t scale, min;
      ScaleMinK4(sub, x[i].scales, &scale, &min);
      const float d1 = d * scale, m1 = dmin * min;
      ScaleMinK4(sub + 1, x[i].scales, &scale, &min);
      const float d2 = d * scale, m2 = dmin * min;
      for (int l = 0; l < 32; ++l) {
        int high = 0;
        if constexpr (kFifthBit) high = (x[i].qh[l] >> sub) & 1 ? 16 : 0;
        *y++ = d1 * ((q[l] & 0xF) + high) - m1;
      }
      for (int l = 0; l < 32; ++l) {
        int high = 0;
        if constexpr (kFifthBit) high = (x[i].qh[l] >> (sub + 1)) & 1 ? 16 : 0;
        *y++ = d2 * ((q[l] >> 4) + high) - m2;
      }
    }
  }
}

void DequantizeQ6_K(const BlockQ6_K* x, int64_t blocks, float* y) {
  for (int64_t i = 0; i < blocks; ++i) {
    const float d = F16ToF32(x[i].d);
    const uint8_t* ql = x[i].ql;
    const uint8_t* qh = x[i].qh;
    const int8_t* sc = x[i].scales;
    for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        int q[4];
        Q6KSignedCodes(ql, qh, l, q);
        y[l] = d * sc[is] * q[0];
        y[l + 32] = d * sc[is + 2] * q[1];
        y[l + 64] = d * sc[is + 4] * q[2];
        y[l + 96] = d * sc[is + 6] * q[3];
      }
    }
  }
}

}  // namespace

void DequantizeRow(DType dtype, const void* src, int64_t n, float* dst) {
  const int64_t blocks = n / BlockElements(dtype);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(dst, src, n * sizeof(float));
      return;
    case DType::kF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = F16ToF32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::kBF16:
      for (int64_t i = 0; i < n; ++i) dst[i] = BF16ToF32(static_cast<const uint16_t*>(src)[i]);
      return;
    case DType::kQ8_0:
      return DequantizeQ8_0(static_cast<const BlockQ8_0*>(src), blocks, dst);
    case DType::kQ4_0:
      return DequantizeQ4_0(static_cast<const BlockQ4_0*>(src), blocks, dst);
    case DType::kQ4_1:
      return DequantizeQ4_1(static_cast<const BlockQ4_1*>(src), blocks, dst);
    case DType::kQ5_0:
      return DequantizeQ5_0(static_cast<const BlockQ5_0*>(src), blocks, dst);
    case DType::kQ5_1:
      return DequantizeQ5_1(static_cast<const BlockQ5_1*>(src), blocks, dst);
    case DType::kQ4_K:
      return DequantizeK4Family<BlockQ4_K, false>(static_cast<const BlockQ4_K*>(src), blocks, dst);
    case DType::kQ5_K:
      return DequantizeK4Family<BlockQ5_K, true>(static_cast<const BlockQ5_K*>(src), blocks, dst);
    case DType::kQ6_K:
      return DequantizeQ6_K(static_cast<const BlockQ6_K*>(src), blocks, dst);
  }
}

}  // namespace pdserve::quant
