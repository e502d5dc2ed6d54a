// float16.h: exhaustive round trips of every f16 and bf16 bit pattern, round-to-nearest-even at
// every midpoint (checked against an exact oracle and, for f16, the F16C hardware conversion),
// overflow to infinity, subnormals and NaN.
#include "core/tensor/float16.h"

#include <immintrin.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

bool IsF16NaN(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0; }
bool IsBF16NaN(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0; }

float Bits(uint32_t bits) { return std::bit_cast<float>(bits); }

// The value of f16 pattern h, computed independently (ldexp on the fields), for finite h.
double F16Value(uint16_t h) {
  const int exponent = (h >> 10) & 0x1f;
  const int mantissa = h & 0x3ff;
  double magnitude =
      exponent == 0 ? std::ldexp(mantissa, -24) : std::ldexp(1024 + mantissa, exponent - 25);
  return (h & 0x8000u) ? -magnitude : magnitude;
}

// Exact oracle for rounding a non-NaN float to f16: the nearest of the two candidates bracketing
// it, ties to the even pattern; beyond 65520 (half an ulp past the largest finite) infinity.
uint16_t F16Oracle(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a) || a >= 65520.0) return sign | 0x7c00u;
  // Largest positive pattern whose value is ≤ a.
  uint16_t lo = 0;
  for (int step = 1 << 14; step > 0; step >>= 1) {
    if (lo + step <= 0x7bff && F16Value(static_cast<uint16_t>(lo + step)) <= a) lo += step;
  }
  if (F16Value(lo) == a || lo == 0x7bff) return sign | lo;
  const uint16_t hi = lo + 1;
  const double down = a - F16Value(lo), up = F16Value(hi) - a;
  if (down < up) return sign | lo;
  if (up < down) return sign | hi;
  return sign | ((lo & 1u) ? hi : lo);
}

// Exact oracle for bf16: the truncated pattern or the next one up, by distance, ties to even.
uint16_t BF16Oracle(float f) {
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint16_t lo = static_cast<uint16_t>(bits >> 16);
  if ((bits & 0xffffu) == 0) return lo;
  const uint16_t hi = lo + 1;  // for a finite max-exponent input this is the infinity pattern
  const double value = std::fabs(static_cast<double>(f));
  const double lo_value = std::fabs(static_cast<double>(BF16ToF32(lo)));
  const double hi_value = (hi & 0x7fffu) == 0x7f80u ? std::ldexp(1.0, 128)  // as if unbounded
                                                    : std::fabs(static_cast<double>(BF16ToF32(hi)));
  const double down = value - lo_value, up = hi_value - value;
  if (down < up) return lo;
  if (up < down) return hi;
  return (lo & 1u) ? hi : lo;
}

uint16_t HardwareF32ToF16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
}

TEST(Float16Test, AllF16PatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = F16ToF32(h);
    const uint16_t back = F32ToF16(f);
    if (IsF16NaN(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << "pattern 0x" << i;
      ASSERT_TRUE(IsF16NaN(back)) << std::hex << "pattern 0x" << i << " came back as 0x" << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << "NaN sign, pattern 0x" << std::hex << i;
      continue;
    }
    ASSERT_EQ(back, h) << std::hex << "pattern 0x" << i << " -> " << f << " -> 0x" << back;
    // The widening agrees with the hardware and with the field arithmetic.
    ASSERT_EQ(std::bit_cast<uint32_t>(f), std::bit_cast<uint32_t>(_cvtsh_ss(h)))
        << std::hex << "pattern 0x" << i;
    if ((h & 0x7c00u) != 0x7c00u) {
      ASSERT_EQ(static_cast<double>(f), F16Value(h));
    }
  }
}

TEST(Float16Test, MidpointsRoundToNearestEven) {
  // Around every midpoint between consecutive finite positive f16 values (exact in f32): the
  // midpoint itself and its f32 neighbours on either side, both signs.
  for (uint32_t i = 0; i < 0x7bff; ++i) {
    const double mid =
        (F16Value(static_cast<uint16_t>(i)) + F16Value(static_cast<uint16_t>(i + 1))) / 2;
    const float m = static_cast<float>(mid);
    ASSERT_EQ(static_cast<double>(m), mid);
    const uint16_t even = (i & 1u) ? static_cast<uint16_t>(i + 1) : static_cast<uint16_t>(i);
    ASSERT_EQ(F32ToF16(m), even) << std::hex << "midpoint above 0x" << i;
    ASSERT_EQ(F32ToF16(-m), 0x8000u | even) << std::hex << "midpoint above -0x" << i;
    ASSERT_EQ(F32ToF16(std::nextafter(m, 0.0f)), i) << std::hex << "below midpoint of 0x" << i;
    ASSERT_EQ(F32ToF16(std::nextafter(m, 1e9f)), i + 1) << std::hex << "above midpoint of 0x" << i;
  }
}

TEST(Float16Test, RandomFloatsMatchOracleAndHardware) {
  std::mt19937 rng(2024);
  // Exponents concentrated on the f16 range (incl. subnormal and overflow), plus raw patterns.
  std::uniform_int_distribution<uint32_t> exponent(96, 146), mantissa(0, 0x7fffff), coin(0, 1);
  for (int i = 0; i < 2000000; ++i) {
    uint32_t bits = (i % 4 == 0) ? static_cast<uint32_t>(rng())
                                 : (coin(rng) << 31) | (exponent(rng) << 23) | mantissa(rng);
    const float f = Bits(bits);
    const uint16_t got = F32ToF16(f);
    if (std::isnan(f)) {
      ASSERT_TRUE(IsF16NaN(got)) << std::hex << "0x" << bits;
      continue;
    }
    ASSERT_EQ(got, HardwareF32ToF16(f)) << std::hex << "f32 0x" << bits << " (" << f << ")";
    if (i % 16 == 0) {
      ASSERT_EQ(got, F16Oracle(f)) << std::hex << "f32 0x" << bits;
    }
  }
}

TEST(Float16Test, SpecificRounding) {
  EXPECT_EQ(F32ToF16(1.0f), 0x3c00u);
  EXPECT_EQ(F32ToF16(-2.0f), 0xc000u);
  EXPECT_EQ(F32ToF16(0.0f), 0x0000u);
  EXPECT_EQ(F32ToF16(-0.0f), 0x8000u);
  // 1 + 2^-11 lies halfway between 1 and 1 + 2^-10: ties to the even 1.0.
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f), 0x3c00u);
  // 1 + 3·2^-11 lies halfway between 1 + 2^-10 (odd) and 1 + 2^-9 (even).
  EXPECT_EQ(F32ToF16(1.0f + 3 * 0x1p-11f), 0x3c02u);
  EXPECT_EQ(F32ToF16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01u);
  EXPECT_EQ(F32ToF16(0.1f), 0x2e66u);
}

TEST(Float16Test, OverflowGoesToInfinity) {
  EXPECT_EQ(F32ToF16(65504.0f), 0x7bffu);  // largest finite
  EXPECT_EQ(F32ToF16(std::nextafter(65520.0f, 0.0f)), 0x7bffu);
  EXPECT_EQ(F32ToF16(65520.0f), 0x7c00u);  // the tie goes to the even pattern: infinity
  EXPECT_EQ(F32ToF16(-65520.0f), 0xfc00u);
  EXPECT_EQ(F32ToF16(1e10f), 0x7c00u);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::max()), 0x7c00u);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::infinity()), 0x7c00u);
  EXPECT_EQ(F32ToF16(-std::numeric_limits<float>::infinity()), 0xfc00u);
  EXPECT_TRUE(std::isinf(F16ToF32(0x7c00u)));
  EXPECT_LT(F16ToF32(0xfc00u), 0.0f);
}

TEST(Float16Test, Subnormals) {
  EXPECT_EQ(F32ToF16(0x1p-24f), 0x0001u);  // smallest subnormal
  EXPECT_EQ(F16ToF32(0x0001u), 0x1p-24f);
  EXPECT_EQ(F32ToF16(0x1p-25f), 0x0000u);  // halfway to zero: ties to even (zero)
  EXPECT_EQ(F32ToF16(std::nextafter(0x1p-25f, 1.0f)), 0x0001u);
  EXPECT_EQ(F32ToF16(1.5f * 0x1p-24f), 0x0002u);  // halfway between 1 and 2: even 2
  EXPECT_EQ(F32ToF16(2.5f * 0x1p-24f), 0x0002u);  // halfway between 2 and 3: even 2
  EXPECT_EQ(F32ToF16(0x1p-30f), 0x0000u);
  EXPECT_EQ(F32ToF16(-0x1p-30f), 0x8000u);           // underflow keeps the sign
  EXPECT_EQ(F32ToF16(1023 * 0x1p-24f), 0x03ffu);     // largest subnormal
  EXPECT_EQ(F32ToF16(1023.5f * 0x1p-24f), 0x0400u);  // tie rounds up into the normal range
  EXPECT_EQ(F32ToF16(0x1p-14f), 0x0400u);            // smallest normal
  EXPECT_EQ(F16ToF32(0x03ffu), 1023 * 0x1p-24f);
  EXPECT_EQ(F16ToF32(0x8001u), -0x1p-24f);
  EXPECT_EQ(F32ToF16(std::numeric_limits<float>::denorm_min()), 0x0000u);
}

TEST(Float16Test, NaN) {
  const float qnan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(IsF16NaN(F32ToF16(qnan)));
  EXPECT_TRUE(IsF16NaN(F32ToF16(-qnan)));
  // A signalling NaN whose payload sits only in the low bits must not collapse to infinity.
  EXPECT_TRUE(IsF16NaN(F32ToF16(Bits(0x7f800001u))));
  EXPECT_TRUE(IsF16NaN(F32ToF16(Bits(0xff800001u))));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7e00u)));
  EXPECT_TRUE(std::isnan(F16ToF32(0x7c01u)));
}

TEST(BFloat16Test, AllBF16PatternsRoundTrip) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = BF16ToF32(h);
    EXPECT_EQ(std::bit_cast<uint32_t>(f), i << 16);
    const uint16_t back = F32ToBF16(f);
    if (IsBF16NaN(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << "pattern 0x" << i;
      ASSERT_TRUE(IsBF16NaN(back)) << std::hex << "pattern 0x" << i << " came back as 0x" << back;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u);
      continue;
    }
    ASSERT_EQ(back, h) << std::hex << "pattern 0x" << i;
  }
}

TEST(BFloat16Test, MidpointsRoundToNearestEven) {
  for (uint32_t i = 0; i < 0x7f80; ++i) {      // every finite positive pattern and the next one up
    const uint32_t mid = (i << 16) | 0x8000u;  // exactly halfway to pattern i + 1
    const uint16_t even = (i & 1u) ? static_cast<uint16_t>(i + 1) : static_cast<uint16_t>(i);
    ASSERT_EQ(F32ToBF16(Bits(mid)), even) << std::hex << "midpoint above 0x" << i;
    ASSERT_EQ(F32ToBF16(Bits(mid | 0x80000000u)), 0x8000u | even);
    ASSERT_EQ(F32ToBF16(Bits(mid - 1)), i) << std::hex << "below midpoint of 0x" << i;
    ASSERT_EQ(F32ToBF16(Bits(mid + 1)), i + 1) << std::hex << "above midpoint of 0x" << i;
  }
}

TEST(BFloat16Test, RandomFloatsMatchOracle) {
  std::mt19937 rng(7);
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t bits = static_cast<uint32_t>(rng());
    const float f = Bits(bits);
    if (std::isnan(f)) {
      ASSERT_TRUE(IsBF16NaN(F32ToBF16(f))) << std::hex << "0x" << bits;
      continue;
    }
    ASSERT_EQ(F32ToBF16(f), BF16Oracle(f)) << std::hex << "f32 0x" << bits;
  }
}

TEST(BFloat16Test, SpecificValues) {
  EXPECT_EQ(F32ToBF16(1.0f), 0x3f80u);
  EXPECT_EQ(F32ToBF16(1.0f + 0x1p-8f), 0x3f80u);      // tie to even
  EXPECT_EQ(F32ToBF16(1.0f + 3 * 0x1p-8f), 0x3f82u);  // tie to even (up)
  EXPECT_EQ(F32ToBF16(-0.0f), 0x8000u);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::infinity()), 0x7f80u);
  EXPECT_EQ(F32ToBF16(-std::numeric_limits<float>::infinity()), 0xff80u);
  // FLT_MAX lies beyond the midpoint between the largest bf16 (0x7f7f) and 2^128: infinity.
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::max()), 0x7f80u);
  EXPECT_EQ(F32ToBF16(Bits(0x7f7f7fffu)), 0x7f7fu);
  EXPECT_EQ(F32ToBF16(std::numeric_limits<float>::denorm_min()), 0x0000u);
  EXPECT_EQ(F32ToBF16(Bits(0x00018000u)), 0x0002u);      // subnormal tie to even
  EXPECT_TRUE(IsBF16NaN(F32ToBF16(Bits(0x7f800001u))));  // low-payload sNaN stays NaN
  EXPECT_TRUE(IsBF16NaN(F32ToBF16(Bits(0xffc00000u))));
}

}  // namespace
}  // namespace pdserve
