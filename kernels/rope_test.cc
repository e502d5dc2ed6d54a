// RoPE: the table path equals the reference bit for bit for both pairings; split-half rotation of
// a Hugging Face-permuted vector equals the permuted adjacent rotation; rotations preserve each
// pair's norm and match angles computed in double. Llama 3.1 scaling: factor 0 changes nothing;
// scaled angles match the rule computed in double, over all three frequency bands.
#include "kernels/rope.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <numbers>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve::kernels {
namespace {

std::vector<float> RandomVector(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2.0f, 2.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

bool AllZero(const std::vector<float>& v) {
  for (float x : v) {
    if (x != 0.0f) return false;
  }
  return true;
}

// The permutation Hugging Face applies to q/k rows: per head, y[i] = x[2i], y[i + d/2] = x[2i+1].
std::vector<float> HfPermute(const std::vector<float>& x, int n_heads, int head_dim) {
  const int half = head_dim / 2;
  std::vector<float> y(x.size());
  for (int h = 0; h < n_heads; ++h) {
    for (int i = 0; i < half; ++i) {
      y[h * head_dim + i] = x[h * head_dim + 2 * i];
      y[h * head_dim + i + half] = x[h * head_dim + 2 * i + 1];
    }
  }
  return y;
}

const RopePairing kPairings[] = {RopePairing::kAdjacent, RopePairing::kSplitHalf};

// Runs ApplyRope and ApplyRopeReference on the same seeded inputs over many configurations
// (unscaled, and Llama 3.1-scaled with an original context short enough for every band to occur
// at these head dims) and calls `check(x, fast, ref, description)` for each.
template <typename Check>
void ForEachRopeCase(Check check) {
  const RopeScaling scalings[] = {{},
                                  {.factor = 4.0f,
                                   .low_freq_factor = 1.0f,
                                   .high_freq_factor = 4.0f,
                                   .original_max_positions = 64}};
  uint32_t seed = 1;
  for (const RopeScaling& scaling : scalings) {
    for (float theta : {10000.0f, 500000.0f}) {
      for (int head_dim : {2, 8, 48, 64, 128}) {
        const int max_positions = 300;
        RopeTable table(head_dim, max_positions, theta, scaling);
        ASSERT_EQ(table.head_dim(), head_dim);
        ASSERT_EQ(table.max_positions(), max_positions);
        for (RopePairing pairing : kPairings) {
          for (int n_heads : {1, 3}) {
            for (int pos : {0, 1, 2, 17, 128, max_positions - 1}) {
              std::vector<float> x = RandomVector(n_heads * head_dim, seed++);
              ASSERT_FALSE(AllZero(x));
              std::vector<float> fast = x, ref = x;
              ApplyRope(fast.data(), n_heads, table, pos, pairing);
              ApplyRopeReference(
                  ref.data(), n_heads, pos,
                  {.head_dim = head_dim, .theta = theta, .pairing = pairing, .scaling = scaling});
              ASSERT_FALSE(AllZero(ref));
              if (pos > 0) {
                EXPECT_NE(fast, x) << "no rotation happened";
              }
              std::ostringstream description;
              description << "scaling factor " << scaling.factor << " theta " << theta
                          << " head_dim " << head_dim << " pairing "
                          << (pairing == RopePairing::kAdjacent ? "adjacent" : "split-half")
                          << " heads " << n_heads << " pos " << pos;
              check(x, fast, ref, description.str());
            }
          }
        }
      }
    }
  }
}

// rope.h: the table holds exactly the reference's cos/sin, "so both paths rotate by identical
// values". Reports how many elements differ and the first difference, bit for bit.
TEST(RopeTest, TableMatchesReferenceExactly) {
  int cases = 0, mismatched_cases = 0;
  int64_t mismatches = 0, elements = 0;
  std::string first;
  ForEachRopeCase([&](const std::vector<float>& x, const std::vector<float>& fast,
                      const std::vector<float>& ref, const std::string& description) {
    ++cases;
    bool any = false;
    for (size_t i = 0; i < x.size(); ++i) {
      ++elements;
      if (std::bit_cast<uint32_t>(fast[i]) == std::bit_cast<uint32_t>(ref[i])) continue;
      ++mismatches;
      any = true;
      if (first.empty()) {
        std::ostringstream out;
        out << std::hexfloat << description << ", element " << i << ": input x = [";
        for (size_t j = 0; j < x.size() && j < 8; ++j) out << (j ? ", " : "") << x[j];
        out << (x.size() > 8 ? ", ...]" : "]") << ", ApplyRope gives " << fast[i]
            << ", ApplyRopeReference gives " << ref[i];
        first = out.str();
      }
    }
    mismatched_cases += any ? 1 : 0;
  });
  EXPECT_EQ(mismatches, 0) << mismatches << " of " << elements << " elements differ in "
                           << mismatched_cases << " of " << cases << " cases; first: " << first;
}

// Whatever the compiler does with the rotation's products (fused or not), both paths agree to
// within a couple of roundings of each pair's magnitude.
TEST(RopeTest, TableMatchesReferenceWithinRounding) {
  ForEachRopeCase([](const std::vector<float>& x, const std::vector<float>& fast,
                     const std::vector<float>& ref, const std::string& description) {
    double norm = 0.0;
    for (float v : x) norm = std::max(norm, std::fabs(double{v}));
    for (size_t i = 0; i < x.size(); ++i) {
      ASSERT_NEAR(fast[i], ref[i], 4 * 0x1p-24 * 2 * norm) << description << " element " << i;
    }
  });
}

TEST(RopeTest, PositionZeroIsIdentity) {
  RopeTable table(64, 4, 10000.0f);
  for (RopePairing pairing : kPairings) {
    std::vector<float> x = RandomVector(2 * 64, 9);
    std::vector<float> y = x;
    ApplyRope(y.data(), 2, table, 0, pairing);
    EXPECT_EQ(y, x);
  }
}

TEST(RopeTest, SplitHalfOnPermutedEqualsPermutedAdjacent) {
  uint32_t seed = 50;
  for (int head_dim : {2, 8, 64, 128}) {
    RopeTable table(head_dim, 200, 10000.0f);
    for (int pos : {0, 1, 5, 77, 199}) {
      const int n_heads = 4;
      std::vector<float> x = RandomVector(n_heads * head_dim, seed++);
      std::vector<float> permuted = HfPermute(x, n_heads, head_dim);
      ApplyRope(x.data(), n_heads, table, pos, RopePairing::kAdjacent);
      ApplyRope(permuted.data(), n_heads, table, pos, RopePairing::kSplitHalf);
      std::vector<float> want = HfPermute(x, n_heads, head_dim);
      ASSERT_FALSE(AllZero(want));
      for (size_t i = 0; i < want.size(); ++i) {
        ASSERT_EQ(permuted[i], want[i]) << "head_dim " << head_dim << " pos " << pos << " i " << i;
      }
    }
  }
}

TEST(RopeTest, RotationPreservesPairNorms) {
  const int head_dim = 64, half = head_dim / 2, n_heads = 3;
  RopeTable table(head_dim, 4096, 10000.0f);
  uint32_t seed = 70;
  for (RopePairing pairing : kPairings) {
    for (int pos : {1, 3, 100, 1000, 4095}) {
      std::vector<float> x = RandomVector(n_heads * head_dim, seed++);
      std::vector<float> y = x;
      ApplyRope(y.data(), n_heads, table, pos, pairing);
      for (int h = 0; h < n_heads; ++h) {
        for (int i = 0; i < half; ++i) {
          int a = h * head_dim + (pairing == RopePairing::kAdjacent ? 2 * i : i);
          int b = h * head_dim + (pairing == RopePairing::kAdjacent ? 2 * i + 1 : i + half);
          double before = double{x[a]} * x[a] + double{x[b]} * x[b];
          double after = double{y[a]} * y[a] + double{y[b]} * y[b];
          ASSERT_GT(before, 0.0);
          EXPECT_NEAR(after, before, 1e-5 * before + 1e-12) << "pos " << pos << " pair " << i;
        }
      }
    }
  }
}

// Rotating unit vectors recovers the angle pos · θ^(−2i/d) computed in double.
TEST(RopeTest, AnglesMatchDoublePrecision) {
  const int head_dim = 16, half = head_dim / 2;
  const double theta = 10000.0;
  RopeTable table(head_dim, 64, static_cast<float>(theta));
  for (int pos : {1, 2, 7, 31}) {
    for (int i = 0; i < half; ++i) {
      std::vector<float> x(head_dim, 0.0f);
      x[2 * i] = 1.0f;
      ApplyRope(x.data(), 1, table, pos, RopePairing::kAdjacent);
      double angle = pos * std::pow(theta, -2.0 * i / head_dim);
      EXPECT_NEAR(x[2 * i], std::cos(angle), 1e-5) << "pos " << pos << " i " << i;
      EXPECT_NEAR(x[2 * i + 1], std::sin(angle), 1e-5) << "pos " << pos << " i " << i;
      for (int j = 0; j < head_dim; ++j) {
        if (j != 2 * i && j != 2 * i + 1) {
          EXPECT_EQ(x[j], 0.0f);
        }
      }
    }
  }
}

// Every table entry lies on the unit circle: cos² + sin² = 1 within fp32 rounding.
TEST(RopeTest, TableIsUnitCircle) {
  RopeTable table(128, 2048, 10000.0f);
  for (int pos = 0; pos < 2048; pos += 37) {
    for (int i = 0; i < 64; ++i) {
      double c = table.cos(pos)[i], s = table.sin(pos)[i];
      EXPECT_NEAR(c * c + s * s, 1.0, 1e-6);
    }
  }
}

// Llama 3.1's published configuration for a 128-wide head.
constexpr RopeScaling kLlama31Scaling = {.factor = 8.0f,
                                         .low_freq_factor = 1.0f,
                                         .high_freq_factor = 4.0f,
                                         .original_max_positions = 8192};

enum class Band { kHigh, kMedium, kLow };

// The Llama 3.1 rule in double, written from the published definition, and the band of frequency i.
double ScaledFrequency(int i, int head_dim, double theta, const RopeScaling& s, Band* band) {
  const double f = std::pow(theta, -2.0 * i / head_dim);
  const double wavelength = 2.0 * std::numbers::pi / f;
  const double original = s.original_max_positions;
  if (wavelength < original / s.high_freq_factor) {
    *band = Band::kHigh;
    return f;
  }
  if (wavelength > original / s.low_freq_factor) {
    *band = Band::kLow;
    return f / s.factor;
  }
  *band = Band::kMedium;
  const double smooth =
      (original / wavelength - s.low_freq_factor) / (s.high_freq_factor - s.low_freq_factor);
  return (1.0 - smooth) * f / s.factor + smooth * f;
}

bool SameBits(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }

// factor = 0 means no scaling whatever the other fields say: the table is the unscaled one bit for
// bit (and TableMatchesReferenceExactly ties the unscaled table to the reference).
TEST(RopeTest, ZeroFactorLeavesTableUnchanged) {
  const RopeScaling off = {.factor = 0.0f,
                           .low_freq_factor = 2.0f,
                           .high_freq_factor = 3.0f,
                           .original_max_positions = 64};
  for (float theta : {10000.0f, 500000.0f}) {
    for (int head_dim : {2, 64, 128}) {
      RopeTable plain(head_dim, 500, theta), scaled(head_dim, 500, theta, off);
      for (int pos = 0; pos < 500; ++pos) {
        for (int i = 0; i < head_dim / 2; ++i) {
          ASSERT_TRUE(SameBits(plain.cos(pos)[i], scaled.cos(pos)[i])) << pos << " " << i;
          ASSERT_TRUE(SameBits(plain.sin(pos)[i], scaled.sin(pos)[i])) << pos << " " << i;
        }
      }
    }
  }
}

// The table's angle (recovered with atan2 from its fp32 cos and sin) equals pos · f_scaled computed
// in double within 1e-5 relative (modulo 2π), with every band populated; high frequencies are
// untouched, bit for bit.
TEST(RopeTest, Llama3ScaledAnglesMatchDouble) {
  const int head_dim = 128, max_positions = 16384;
  const double theta = 500000.0;
  RopeTable scaled(head_dim, max_positions, static_cast<float>(theta), kLlama31Scaling);
  RopeTable plain(head_dim, max_positions, static_cast<float>(theta));
  int per_band[3] = {0, 0, 0};
  for (int i = 0; i < head_dim / 2; ++i) {
    Band band;
    const double freq = ScaledFrequency(i, head_dim, theta, kLlama31Scaling, &band);
    ++per_band[static_cast<int>(band)];
    for (int pos : {1, 2, 3, 100, 4095, 8191, 12000, max_positions - 1}) {
      const double want = pos * freq;
      const double got = std::atan2(double{scaled.sin(pos)[i]}, double{scaled.cos(pos)[i]});
      const double error = std::fabs(std::remainder(want - got, 2.0 * std::numbers::pi));
      EXPECT_LE(error, 1e-5 * want) << "pair " << i << " pos " << pos << " angle " << want;
      if (band == Band::kHigh) {
        EXPECT_TRUE(SameBits(scaled.cos(pos)[i], plain.cos(pos)[i])) << i << " " << pos;
        EXPECT_TRUE(SameBits(scaled.sin(pos)[i], plain.sin(pos)[i])) << i << " " << pos;
      }
    }
  }
  EXPECT_GE(per_band[static_cast<int>(Band::kHigh)], 1);
  EXPECT_GE(per_band[static_cast<int>(Band::kMedium)], 1);
  EXPECT_GE(per_band[static_cast<int>(Band::kLow)], 1);
}

// GGUF's form of the scaling (per-pair divisors, as llama.cpp's converter computes them) turns by
// the same angles as the rule within 1e-5 relative, in every band, in the table and the reference.
TEST(RopeTest, FreqFactorsReproduceTheLlama3Rule) {
  const int head_dim = 128, max_positions = 16384;
  const double theta = 500000.0;
  RopeScaling factors;
  factors.freq_factors = kLlama31Scaling.FreqFactors(head_dim, static_cast<float>(theta));
  ASSERT_EQ(factors.freq_factors.size(), 64u);
  EXPECT_TRUE(factors.enabled());
  EXPECT_EQ(factors.freq_factors.front(), 1.0f);  // the highest frequency keeps its speed
  EXPECT_EQ(factors.freq_factors.back(), 8.0f);   // the lowest is slowed by the factor
  EXPECT_TRUE(RopeScaling{}.FreqFactors(head_dim, 10000.0f).empty());
  RopeTable table(head_dim, max_positions, static_cast<float>(theta), factors);
  for (int i = 0; i < head_dim / 2; ++i) {
    Band band;
    const double freq = ScaledFrequency(i, head_dim, theta, kLlama31Scaling, &band);
    for (int pos : {1, 100, 8191, max_positions - 1}) {
      const double want = pos * freq;
      const double got = std::atan2(double{table.sin(pos)[i]}, double{table.cos(pos)[i]});
      EXPECT_LE(std::fabs(std::remainder(want - got, 2.0 * std::numbers::pi)), 1e-5 * want)
          << "pair " << i << " pos " << pos;
    }
  }
  // The reference rotates by the table's angles.
  std::vector<float> x(head_dim), y(head_dim);
  for (int i = 0; i < head_dim; ++i) x[i] = y[i] = 0.01f * static_cast<float>(i + 1);
  ApplyRope(x.data(), 1, table, 4000, RopePairing::kAdjacent);
  ApplyRopeReference(y.data(), 1, 4000,
                     {.head_dim = head_dim,
                      .theta = static_cast<float>(theta),
                      .pairing = RopePairing::kAdjacent,
                      .scaling = factors});
  for (int i = 0; i < head_dim; ++i) EXPECT_EQ(x[i], y[i]) << i;
}

// Scaling only ever slows a rotation down: f / factor ≤ f_scaled ≤ f, strictly below f in the low
// band.
TEST(RopeTest, Llama3ScalingNeverSpeedsUp) {
  const int head_dim = 128;
  RopeTable scaled(head_dim, 2, 500000.0f, kLlama31Scaling), plain(head_dim, 2, 500000.0f);
  for (int i = 0; i < head_dim / 2; ++i) {
    const double got = std::atan2(double{scaled.sin(1)[i]}, double{scaled.cos(1)[i]});
    const double unscaled = std::atan2(double{plain.sin(1)[i]}, double{plain.cos(1)[i]});
    EXPECT_LE(got, unscaled * (1 + 1e-6)) << i;
    EXPECT_GE(got, unscaled / kLlama31Scaling.factor * (1 - 1e-6)) << i;
  }
  const double lowest = std::atan2(double{scaled.sin(1)[63]}, double{scaled.cos(1)[63]});
  const double lowest_plain = std::atan2(double{plain.sin(1)[63]}, double{plain.cos(1)[63]});
  EXPECT_NEAR(lowest, lowest_plain / 8, 1e-6 * lowest_plain);
}

}  // namespace
}  // namespace pdserve::kernels
