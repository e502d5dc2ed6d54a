// SwiGlu against a double-precision silu(gate)·up on seeded inputs, including large-magnitude
// gates where e^(−gate) overflows or underflows.
#include "kernels/swiglu.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve::kernels {
namespace {

TEST(SwiGluTest, MatchesDoublePrecision) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> dist(-8.0f, 8.0f);
  for (int64_t n : {1, 7, 8, 33, 768, 2048}) {
    std::vector<float> gate(n), up(n);
    for (float& g : gate) g = dist(rng);
    for (float& u : up) u = dist(rng);
    std::vector<float> out = gate;
    SwiGlu(out.data(), up.data(), n, out.data());
    double diff = 0.0, ref = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double g = gate[i];
      const double want = g / (1.0 + std::exp(-g)) * up[i];
      diff += (out[i] - want) * (out[i] - want);
      ref += want * want;
    }
    ASSERT_GT(ref, 0.0);
    EXPECT_LT(std::sqrt(diff / ref), 1e-6) << "n " << n;
  }
}

TEST(SwiGluTest, ExtremeGates) {
  std::vector<float> gate = {-200.0f, -90.0f, 0.0f, 90.0f, 200.0f};
  std::vector<float> up = {1.0f, 1.0f, 5.0f, 2.0f, -1.0f};
  SwiGlu(gate.data(), up.data(), static_cast<int64_t>(gate.size()), gate.data());
  for (float v : gate) EXPECT_TRUE(std::isfinite(v)) << v;
  EXPECT_EQ(gate[0], 0.0f * 1.0f);  // silu(−200) underflows to −0
  EXPECT_NEAR(gate[1], 0.0f, 1e-30f);
  EXPECT_EQ(gate[2], 0.0f);
  EXPECT_FLOAT_EQ(gate[3], 180.0f);
  EXPECT_FLOAT_EQ(gate[4], -200.0f);
}

}  // namespace
}  // namespace pdserve::kernels
