// ggml block formats: hand-built blocks with values worked out from the format's definition, for
// every type; extreme scales, all-zero blocks and the extreme codes. (Bit-for-bit agreement with
// ggml's own dequantization on real files is checked in core/formats/quantized_gguf_test.cc.)
#include "core/tensor/quant_blocks.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "core/tensor/float16.h"
#include "core/tensor/tensor.h"
#include "gtest/gtest.h"

namespace pdserve::quant {
namespace {

template <typename Block>
std::vector<float> Dequantize(const Block& block, DType dtype) {
  std::vector<float> out(BlockElements(dtype));
  DequantizeRow(dtype, &block, static_cast<int64_t>(out.size()), out.data());
  return out;
}

TEST(QuantBlocksTest, Q8_0IsScaleTimesCode) {
  BlockQ8_0 b;
  b.d = F32ToF16(0.5f);
  for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<int8_t>(j * 8 - 128);
  const std::vector<float> y = Dequantize(b, DType::kQ8_0);
  for (int j = 0; j < kQK; ++j) EXPECT_EQ(y[j], (j * 8 - 128) * 0.5f) << j;
}

TEST(QuantBlocksTest, Q4_0LowNibblesFirstHalfHighNibblesSecond) {
  BlockQ4_0 b;
  b.d = F32ToF16(2.0f);
  for (int j = 0; j < kQK / 2; ++j) b.qs[j] = static_cast<uint8_t>((15 - j) << 4 | j);
  const std::vector<float> y = Dequantize(b, DType::kQ4_0);
  for (int j = 0; j < kQK / 2; ++j) {
    EXPECT_EQ(y[j], (j - 8) * 2.0f) << j;
    EXPECT_EQ(y[j + 16], (15 - j - 8) * 2.0f) << j;
  }
}

TEST(QuantBlocksTest, Q4_1AddsTheMinimum) {
  BlockQ4_1 b;
  b.d = F32ToF16(0.25f);
  b.m = F32ToF16(-1.0f);
  std::memset(b.qs, 0xF0, sizeof(b.qs));  // low nibble 0, high nibble 15
  const std::vector<float> y = Dequantize(b, DType::kQ4_1);
  EXPECT_EQ(y[0], -1.0f);
  EXPECT_EQ(y[16], 15 * 0.25f - 1.0f);
}

TEST(QuantBlocksTest, Q5FifthBitComesFromQh) {
  BlockQ5_0 b;
  b.d = F32ToF16(1.0f);
  std::memset(b.qs, 0, sizeof(b.qs));
  const uint32_t qh = (1u << 3) | (1u << 20);  // elements 3 and 20 get 16
  std::memcpy(b.qh, &qh, 4);
  const std::vector<float> y = Dequantize(b, DType::kQ5_0);
  for (int j = 0; j < kQK; ++j) EXPECT_EQ(y[j], (j == 3 || j == 20) ? 0.0f : -16.0f) << j;

  BlockQ5_1 c;
  c.d = F32ToF16(1.0f);
  c.m = F32ToF16(0.5f);
  std::memset(c.qs, 0xFF, sizeof(c.qs));
  std::memset(c.qh, 0xFF, sizeof(c.qh));
  for (float v : Dequantize(c, DType::kQ5_1)) EXPECT_EQ(v, 31.5f);
}

// Packs 8 (scale, min) pairs of 6 bits the way ggml's Q4_K/Q5_K quantizer does.
void PackScalesK4(const uint8_t scales[8], const uint8_t mins[8], uint8_t out[kScaleBytesK]) {
  for (int j = 0; j < 8; ++j) {
    if (j < 4) {
      out[j] = scales[j];
      out[j + 4] = mins[j];
    } else {
      out[j + 4] = (scales[j] & 0xF) | ((mins[j] & 0xF) << 4);
      out[j - 4] |= (scales[j] >> 4) << 6;
      out[j] |= (mins[j] >> 4) << 6;
    }
  }
}

TEST(QuantBlocksTest, ScaleMinK4UnpacksWhatThePackerPacked) {
  const uint8_t scales[8] = {0, 1, 17, 63, 32, 45, 5, 63};
  const uint8_t mins[8] = {63, 2, 33, 0, 16, 63, 47, 1};
  uint8_t packed[kScaleBytesK];
  PackScalesK4(scales, mins, packed);
  for (int j = 0; j < 8; ++j) {
    uint8_t s, m;
    ScaleMinK4(j, packed, &s, &m);
    EXPECT_EQ(s, scales[j]) << j;
    EXPECT_EQ(m, mins[j]) << j;
  }
}

TEST(QuantBlocksTest, Q4_KSubBlocksScaleAndShift) {
  BlockQ4_K b;
  b.d = F32ToF16(0.5f);
  b.dmin = F32ToF16(0.25f);
  uint8_t scales[8], mins[8];
  for (int j = 0; j < 8; ++j) {
    scales[j] = static_cast<uint8_t>(j + 1);
    mins[j] = static_cast<uint8_t>(2 * j);
  }
  PackScalesK4(scales, mins, b.scales);
  for (int i = 0; i < kQK_K / 2; ++i) b.qs[i] = static_cast<uint8_t>((i % 16) << 4 | (i % 7));
  const std::vector<float> y = Dequantize(b, DType::kQ4_K);
  for (int e = 0; e < kQK_K; ++e) {
    const int sub = e / 32, l = e % 32, byte = (sub / 2) * 32 + l;
    const int code = sub % 2 == 0 ? b.qs[byte] & 0xF : b.qs[byte] >> 4;
    EXPECT_EQ(y[e], 0.5f * scales[sub] * code - 0.25f * mins[sub]) << e;
  }
}

TEST(QuantBlocksTest, Q5_KHighBitsByTwoBitsPerChunk) {
  BlockQ5_K b;
  b.d = F32ToF16(1.0f);
  b.dmin = F32ToF16(0.0f);
  uint8_t scales[8] = {1, 1, 1, 1, 1, 1, 1, 1}, mins[8] = {};
  PackScalesK4(scales, mins, b.scales);
  std::memset(b.qs, 0, sizeof(b.qs));
  std::memset(b.qh, 0, sizeof(b.qh));
  b.qh[5] = 1u << 3;  // sub-block 3: chunk 1, high nibbles → element 64 + 32 + 5
  const std::vector<float> y = Dequantize(b, DType::kQ5_K);
  for (int e = 0; e < kQK_K; ++e) EXPECT_EQ(y[e], e == 101 ? 16.0f : 0.0f) << e;
}

TEST(QuantBlocksTest, Q6_KCodesAndSignedScales) {
  BlockQ6_K b;
  b.d = F32ToF16(0.5f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 == 0 ? -128 : 127);
  std::memset(b.ql, 0xFF, sizeof(b.ql));
  std::memset(b.qh, 0xFF, sizeof(b.qh));  // every code 63 → 31 after the offset
  const std::vector<float> y = Dequantize(b, DType::kQ6_K);
  for (int e = 0; e < kQK_K; ++e) {
    EXPECT_EQ(y[e], 0.5f * b.scales[e / 16] * 31) << e;
  }
  std::memset(b.ql, 0, sizeof(b.ql));
  std::memset(b.qh, 0, sizeof(b.qh));  // code 0 → −32
  const std::vector<float> z = Dequantize(b, DType::kQ6_K);
  for (int e = 0; e < kQK_K; ++e) EXPECT_EQ(z[e], 0.5f * b.scales[e / 16] * -32) << e;
}

TEST(QuantBlocksTest, ExtremeScalesAndZeroBlocks) {
  BlockQ8_0 b;
  b.d = 0x7bff;  // 65504, f16's largest finite value
  for (int j = 0; j < kQK; ++j) b.qs[j] = j % 2 ? 127 : -128;
  const std::vector<float> y = Dequantize(b, DType::kQ8_0);
  EXPECT_EQ(y[0], -128 * 65504.0f);
  EXPECT_EQ(y[1], 127 * 65504.0f);
  BlockQ4_K zero{};
  for (float v : Dequantize(zero, DType::kQ4_K)) EXPECT_EQ(v, 0.0f);
}

TEST(QuantBlocksTest, TensorHelpersReadBlocks) {
  std::vector<BlockQ8_0> blocks(4);  // a [2, 64] matrix
  for (int i = 0; i < 4; ++i) {
    blocks[i].d = F32ToF16(static_cast<float>(i + 1));
    for (int j = 0; j < kQK; ++j) blocks[i].qs[j] = static_cast<int8_t>(j);
  }
  Tensor t;
  t.dtype = DType::kQ8_0;
  t.shape = {2, 64};
  t.data = blocks.data();
  EXPECT_EQ(t.NumBytes(), 4 * sizeof(BlockQ8_0));
  EXPECT_EQ(RowBytes(DType::kQ8_0, 64), 2 * sizeof(BlockQ8_0));
  EXPECT_EQ(ElementAsFloat(t, 64 + 32 + 5), 4.0f * 5);
  std::vector<float> row(64);
  RowAsFloat(t, 1, row.data());
  EXPECT_EQ(row[3], 3.0f * 3);
  EXPECT_EQ(row[40], 4.0f * 8);
  const Tensor f32 = ToF32(t);
  const Tensor bf16 = ConvertTensor(t, DType::kBF16);
  for (int64_t i = 0; i < t.NumElements(); ++i) {
    EXPECT_EQ(f32.as<float>()[i], ElementAsFloat(t, i)) << i;
    EXPECT_EQ(bf16.as<uint16_t>()[i], F32ToBF16(ElementAsFloat(t, i))) << i;
  }
}

}  // namespace
}  // namespace pdserve::quant
