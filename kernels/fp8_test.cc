// FP8 e4m3: CUDA's SATFINITE edge cases; decoding against the format's formula; the encoder
// against an independent nearest-value search over every fp16 and bf16 input; the error bound;
// the AVX2 (de)quantizers equal the scalar reference bit for bit.
#include "kernels/fp8.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <random>
#include <vector>

#include "core/tensor/float16.h"
#include "gtest/gtest.h"

namespace pdserve::kernels {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// The value of a finite code from the format's definition, in double.
double DecodeByFormula(int code) {
  const int exponent = (code >> 3) & 0xF;
  const int mantissa = code & 0x7;
  const double magnitude = exponent == 0 ? (mantissa / 8.0) * std::ldexp(1.0, -6)
                                         : (1.0 + mantissa / 8.0) * std::ldexp(1.0, exponent - 7);
  return (code & 0x80) ? -magnitude : magnitude;
}

// The straightforward encoder: the nearest of the 127 non-negative finite codes to |x|, ties to
// the even code (the even mantissa), saturating at 448 (0x7F is NaN, so nothing rounds up to it);
// the sign bit is copied, so tiny negatives give 0x80.
uint8_t ReferenceEncode(float x) {
  if (std::isnan(x)) return 0x7F;
  const uint8_t sign = std::signbit(x) ? 0x80 : 0x00;
  const double magnitude = std::fabs(static_cast<double>(x));
  if (magnitude >= 448.0) return sign | 0x7E;
  int best = 0;
  double best_error = std::numeric_limits<double>::infinity();
  for (int code = 0; code <= 0x7E; ++code) {
    const double error = std::fabs(DecodeByFormula(code) - magnitude);
    if (error < best_error || (error == best_error && code % 2 == 0)) {
      best = code;
      best_error = error;
    }
  }
  return static_cast<uint8_t>(sign | best);
}

TEST(Fp8Test, CudaSatfiniteEdgeCases) {
  struct Case {
    float x;
    uint8_t code;
  };
  const Case cases[] = {
      {448.0f, 0x7E},
      {464.0f, 0x7E},  // tie between 448 and 480: even mantissa
      {std::nextafter(464.0f, kInf), 0x7E},
      {480.0f, 0x7E},
      {kInf, 0x7E},
      {-kInf, 0xFE},
      {std::numeric_limits<float>::quiet_NaN(), 0x7F},
      {-std::numeric_limits<float>::quiet_NaN(), 0x7F},
      {0x1p-10f, 0x00},  // half the smallest subnormal: tie to 0
      {std::nextafter(0x1p-10f, kInf), 0x01},
      {-0x1p-11f, 0x80},
      {3 * 0x1p-10f, 0x02},             // tie between 0x01 and 0x02: even
      {0x1p-6f * (1 - 0x1p-5f), 0x08},  // rounds up into the smallest normal
      {0.0f, 0x00},
      {-0.0f, 0x80},
      {1.0f, 0x38},
      {-2.0f, 0xC0},
  };
  for (const Case& c : cases) {
    EXPECT_EQ(FloatToE4M3(c.x), c.code) << "x = " << c.x;
  }
}

TEST(Fp8Test, DecodeMatchesFormula) {
  const float* table = E4M3Table();
  for (int code = 0; code < 256; ++code) {
    const float value = E4M3ToFloat(static_cast<uint8_t>(code));
    EXPECT_EQ(std::bit_cast<uint32_t>(table[code]), std::bit_cast<uint32_t>(value));
    if ((code & 0x7F) == 0x7F) {
      EXPECT_TRUE(std::isnan(value)) << code;
      continue;
    }
    EXPECT_EQ(static_cast<double>(value), DecodeByFormula(code)) << code;
    EXPECT_EQ(std::signbit(value), code >= 0x80) << code;  // ±0 distinct
  }
  EXPECT_EQ(E4M3ToFloat(0x7E), kE4M3Max);
  EXPECT_EQ(E4M3ToFloat(0x01), 0x1p-9f);
}

TEST(Fp8Test, EncodeInvertsDecode) {
  for (int code = 0; code < 256; ++code) {
    if ((code & 0x7F) == 0x7F) continue;
    EXPECT_EQ(FloatToE4M3(E4M3ToFloat(static_cast<uint8_t>(code))), code);
  }
}

TEST(Fp8Test, EveryF16MatchesNearestValueSearch) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float x = F16ToF32(static_cast<uint16_t>(h));
    ASSERT_EQ(FloatToE4M3(x), ReferenceEncode(x)) << "fp16 0x" << std::hex << h;
  }
}

TEST(Fp8Test, EveryBf16MatchesNearestValueSearch) {
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float x = BF16ToF32(static_cast<uint16_t>(h));
    ASSERT_EQ(FloatToE4M3(x), ReferenceEncode(x)) << "bf16 0x" << std::hex << h;
  }
}

// Floats with all 23 mantissa bits random (fp16 and bf16 leave the low ones zero), exponents
// around the e4m3 range.
TEST(Fp8Test, RandomFloatsMatchNearestValueSearch) {
  std::mt19937 rng(7);
  std::uniform_int_distribution<uint32_t> mantissa(0, 0x7FFFFF);
  std::uniform_int_distribution<uint32_t> exponent(127 - 12, 127 + 10);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t bits = ((rng() & 1u) << 31) | (exponent(rng) << 23) | mantissa(rng);
    const float x = std::bit_cast<float>(bits);
    ASSERT_EQ(FloatToE4M3(x), ReferenceEncode(x)) << "bits 0x" << std::hex << bits;
  }
}

TEST(Fp8Test, RelativeErrorInNormalRangeAtMostOneSixteenth) {
  int checked = 0;
  for (uint32_t h = 0; h <= 0xFFFF; ++h) {
    const float x = F16ToF32(static_cast<uint16_t>(h));
    const float magnitude = std::fabs(x);
    if (!(magnitude >= 0x1p-6f && magnitude <= kE4M3Max)) continue;
    const float decoded = E4M3ToFloat(FloatToE4M3(x));
    EXPECT_LE(std::fabs(decoded - x), 0x1p-4f * magnitude) << x;
    ++checked;
  }
  EXPECT_GT(checked, 10000);
}

TEST(Fp8Test, ScaleFor) {
  EXPECT_EQ(E4M3ScaleFor(448.0f), 1.0f);
  EXPECT_EQ(E4M3ScaleFor(896.0f), 2.0f);
  EXPECT_EQ(E4M3ScaleFor(0.0f), 1.0f);
  EXPECT_EQ(E4M3ScaleFor(-1.0f), 1.0f);
  EXPECT_EQ(E4M3ScaleFor(kInf), 1.0f);
  EXPECT_EQ(E4M3ScaleFor(std::numeric_limits<float>::quiet_NaN()), 1.0f);
  EXPECT_EQ(E4M3ScaleFor(std::numeric_limits<float>::denorm_min()),
            std::numeric_limits<float>::min());
  // The block maximum lands on ±448 (or rounds there) and nothing saturates beyond it.
  for (float amax : {1e-30f, 0.003f, 1.0f, 77.7f, 1e30f}) {
    const float scale = E4M3ScaleFor(amax);
    ASSERT_TRUE(std::isfinite(scale) && scale > 0.0f) << amax;
    EXPECT_EQ(FloatToE4M3(amax / scale), 0x7E) << amax;
    EXPECT_EQ(FloatToE4M3(-amax / scale), 0xFE) << amax;
  }
}

// Normal, subnormal-range, tiny, huge and special values, mixed.
std::vector<float> MixedInput(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  const float specials[] = {
      0.0f,  -0.0f,  kInf,  -kInf,  464.0f,  -464.0f, 0x1p-10f,
      3e-3f, 1e-40f, 1e30f, -1e30f, 0x1p-7f, 448.0f,  std::numeric_limits<float>::quiet_NaN()};
  std::vector<float> x(static_cast<size_t>(n));
  for (float& v : x) {
    const uint32_t pick = rng() % 8;
    if (pick == 0) {
      v = specials[rng() % std::size(specials)];
    } else if (pick == 1) {
      v = normal(rng) * 1e-3f;
    } else {
      v = normal(rng) * 50.0f;
    }
  }
  return x;
}

TEST(Fp8Test, FastQuantizeEqualsReference) {
  for (int64_t n : {1, 7, 8, 9, 1003, 4096}) {
    const std::vector<float> x = MixedInput(n, static_cast<uint32_t>(n));
    for (float scale : {1.0f, 0.37f, 3.0f, E4M3ScaleFor(200.0f), 1e-20f}) {
      std::vector<uint8_t> fast(x.size()), reference(x.size());
      QuantizeE4M3(x.data(), n, scale, fast.data());
      QuantizeE4M3Reference(x.data(), n, scale, reference.data());
      ASSERT_EQ(fast, reference) << "n = " << n << ", scale = " << scale;
    }
  }
}

TEST(Fp8Test, FastDequantizeEqualsReference) {
  std::mt19937 rng(11);
  std::vector<uint8_t> codes(256 * 4 + 5);
  for (size_t i = 0; i < codes.size(); ++i) {
    codes[i] = i < 256 ? static_cast<uint8_t>(i) : static_cast<uint8_t>(rng());
  }
  const int64_t n = static_cast<int64_t>(codes.size());
  for (float scale : {1.0f, 0.37f, 1e-30f, 1e30f}) {
    std::vector<float> fast(codes.size()), reference(codes.size());
    DequantizeE4M3(codes.data(), n, scale, fast.data());
    DequantizeE4M3Reference(codes.data(), n, scale, reference.data());
    ASSERT_EQ(std::memcmp(fast.data(), reference.data(), fast.size() * sizeof(float)), 0)
        << "scale = " << scale;
  }
}

TEST(Fp8Test, QuantizeRoundTripWithinScaledBound) {
  const int64_t n = 4096;
  const std::vector<float> x = MixedInput(n, 5);
  std::vector<float> finite;
  for (float v : x) {
    if (std::isfinite(v) && std::fabs(v) < 1e20f) finite.push_back(v);
  }
  float amax = 0.0f;
  for (float v : finite) amax = std::max(amax, std::fabs(v));
  ASSERT_GT(amax, 0.0f);
  const float scale = E4M3ScaleFor(amax);
  const int64_t m = static_cast<int64_t>(finite.size());
  std::vector<uint8_t> codes(finite.size());
  std::vector<float> decoded(finite.size());
  QuantizeE4M3(finite.data(), m, scale, codes.data());
  DequantizeE4M3(codes.data(), m, scale, decoded.data());
  for (int64_t i = 0; i < m; ++i) {
    const float bound = std::max(0x1p-4f * std::fabs(finite[i]), scale * 0x1p-10f);
    EXPECT_LE(std::fabs(decoded[i] - finite[i]), bound * (1 + 0x1p-20f)) << finite[i];
  }
}

}  // namespace
}  // namespace pdserve::kernels
