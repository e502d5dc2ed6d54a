// rank_selection: ranks for a removal rate on spectra with known singular-value sums, the special
// cases (ρ = 0, ρ ≥ 1, zero tails, empty), monotonicity, and the exact ρ for a target kept
// fraction over weighted heads.
#include "core/calib/rank_selection.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

// Singular values 4, 3, 2, 1 (sum 10): dropped mass 0.6 at r = 1, 0.3 at r = 2, 0.1 at r = 3.
const std::vector<double> kSpectrum = {16, 9, 4, 1};

TEST(RankForRemovalRateTest, KnownSpectrum) {
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.0), 4);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.05), 4);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.1), 3);  // boundaries are inclusive
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.29), 3);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.3), 2);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.59), 2);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.6), 1);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 0.99), 1);
}

TEST(RankForRemovalRateTest, SpecialCases) {
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 1.0), 1);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, 7.0), 1);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, -0.5), 4);
  EXPECT_EQ(RankForRemovalRate(kSpectrum, std::nan("")), 4);
  // Exactly-zero tails survive ρ = 0 and go at any ρ > 0.
  const std::vector<double> zero_tail = {4, 1, 0, 0};
  EXPECT_EQ(RankForRemovalRate(zero_tail, 0.0), 4);
  EXPECT_EQ(RankForRemovalRate(zero_tail, std::numeric_limits<double>::denorm_min()), 2);
  // All-zero: 1 for any ρ > 0; negatives and non-finite count as zero.
  EXPECT_EQ(RankForRemovalRate(std::vector<double>{0, 0, 0}, 0.2), 1);
  EXPECT_EQ(RankForRemovalRate(std::vector<double>{0, 0, 0}, 0.0), 3);
  EXPECT_EQ(RankForRemovalRate(std::vector<double>{4, -1e-12, -1e-12}, 1e-9), 1);
  EXPECT_EQ(RankForRemovalRate(std::vector<double>{4, 1, std::nan("")}, 1e-9), 2);
  EXPECT_EQ(RankForRemovalRate(std::vector<double>{5}, 0.0), 1);
  EXPECT_EQ(RankForRemovalRate(std::vector<double>{}, 0.5), 0);
}

TEST(RankForRemovalRateTest, NonIncreasingInRho) {
  std::mt19937_64 rng(3);
  std::exponential_distribution<double> exp;
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<double> spectrum(64);
    for (double& x : spectrum) x = exp(rng);
    std::sort(spectrum.rbegin(), spectrum.rend());
    int previous = 64;
    for (int step = 0; step <= 1000; ++step) {
      const int rank = RankForRemovalRate(spectrum, step / 1000.0);
      EXPECT_LE(rank, previous);
      EXPECT_GE(rank, 1);
      previous = rank;
    }
    EXPECT_EQ(previous, 1);
  }
}

TEST(RoundRankUpToMultipleTest, NextMultipleWithinTheHead) {
  EXPECT_EQ(RoundRankUpToMultiple(37, 64, 16), 48);
  EXPECT_EQ(RoundRankUpToMultiple(32, 64, 16), 32);  // already whole
  EXPECT_EQ(RoundRankUpToMultiple(33, 64, 16), 48);
  EXPECT_EQ(RoundRankUpToMultiple(1, 64, 16), 16);  // at least one vector
  EXPECT_EQ(RoundRankUpToMultiple(64, 64, 16), 64);
  EXPECT_EQ(RoundRankUpToMultiple(65, 72, 16), 72);  // never past the head
  EXPECT_EQ(RoundRankUpToMultiple(3, 8, 16), 8);     // a head narrower than one multiple: d
  EXPECT_EQ(RoundRankUpToMultiple(37, 64, 1), 37);
  EXPECT_EQ(RoundRankUpToMultiple(37, 64, 0), 37);
}

// Rounded up, a head keeps at least the rank ρ gave it; the target is met with whole multiples, by
// the smallest ρ that does, and a target below one multiple per head is refused.
TEST(RemovalRateForTargetTest, RankMultiplesMeetTheTarget) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  std::vector<std::vector<double>> heads(6, std::vector<double>(64));
  for (auto& h : heads) {
    for (double& e : h) e = std::pow(u(rng), 4.0) * 100.0;
    std::sort(h.begin(), h.end(), std::greater<>());
  }
  std::vector<WeightedSpectrum> spectra;
  for (const auto& h : heads) spectra.push_back({h, 1.0});
  for (double target : {0.3, 0.5, 0.75}) {
    SCOPED_TRACE(target);
    const absl::StatusOr<double> rho = RemovalRateForTarget(spectra, target, 16);
    ASSERT_TRUE(rho.ok()) << rho.status();
    EXPECT_LE(KeptFraction(spectra, *rho, 16), target);
    int kept = 0;
    for (const auto& h : heads) {
      const int rank = RoundRankUpToMultiple(RankForRemovalRate(h, *rho), 64, 16);
      EXPECT_EQ(rank % 16, 0);
      EXPECT_GE(rank, RankForRemovalRate(h, *rho));
      kept += rank;
    }
    EXPECT_DOUBLE_EQ(KeptFraction(spectra, *rho, 16), kept / (6.0 * 64));
    // Any smaller ρ (the largest breakpoint below it among the heads' dropped masses) keeps more.
    EXPECT_GT(KeptFraction(spectra, std::nextafter(*rho, 0.0), 16), target);
  }
  const absl::StatusOr<double> below = RemovalRateForTarget(spectra, 0.2, 16);
  ASSERT_FALSE(below.ok());
  EXPECT_THAT(std::string(below.status().message()), HasSubstr("rank 16 in every head keeps 0.25"));
}

TEST(KeptFractionTest, WeightsCountBytes) {
  const std::vector<double> flat = {1, 1, 1, 1};
  const std::vector<WeightedSpectrum> spectra = {{kSpectrum, 1.0}, {flat, 2.0}};
  EXPECT_DOUBLE_EQ(KeptFraction(spectra, 0.0), 1.0);
  EXPECT_DOUBLE_EQ(KeptFraction(spectra, 0.1), 11.0 / 12);  // 3 + 2·4
  EXPECT_DOUBLE_EQ(KeptFraction(spectra, 0.25), 9.0 / 12);  // 3 + 2·3
  EXPECT_DOUBLE_EQ(KeptFraction(spectra, 1.0), 3.0 / 12);   // 1 + 2·1
}

TEST(RemovalRateForTargetTest, SingleSpectrumBreakpoints) {
  const std::vector<WeightedSpectrum> spectra = {{kSpectrum, 1.0}};
  auto rho = [&](double f) { return *RemovalRateForTarget(spectra, f); };
  EXPECT_EQ(rho(1.0), 0.0);
  EXPECT_EQ(rho(0.8), 0.1);
  EXPECT_EQ(rho(0.75), 0.1);
  EXPECT_EQ(rho(0.6), 0.3);
  EXPECT_EQ(rho(0.5), 0.3);
  EXPECT_EQ(rho(0.25), 0.6);
}

TEST(RemovalRateForTargetTest, WeightedHeads) {
  // Head A: breakpoints 0.1, 0.3, 0.6; head B (flat, weight 2): 0.25, 0.5, 0.75. Of 12:
  // ρ 0.1 → 11, 0.25 → 9, 0.3 → 8, 0.5 → 6, 0.6 → 5, 0.75 → 3.
  const std::vector<double> flat = {1, 1, 1, 1};
  const std::vector<WeightedSpectrum> spectra = {{kSpectrum, 1.0}, {flat, 2.0}};
  auto rho = [&](double f) { return *RemovalRateForTarget(spectra, f); };
  EXPECT_EQ(rho(11.5 / 12), 0.1);
  EXPECT_EQ(rho(0.75), 0.25);
  EXPECT_EQ(rho(8.0 / 12), 0.3);
  EXPECT_EQ(rho(0.5), 0.5);
  EXPECT_EQ(rho(0.45), 0.6);
  EXPECT_EQ(rho(0.25), 0.75);
}

TEST(RemovalRateForTargetTest, SmallestRhoMeetingTargetOnRandomSpectra) {
  std::mt19937_64 rng(17);
  std::exponential_distribution<double> exp;
  std::vector<std::vector<double>> storage(16, std::vector<double>(32));
  std::vector<WeightedSpectrum> spectra;
  for (size_t h = 0; h < storage.size(); ++h) {
    for (double& x : storage[h]) x = exp(rng) * exp(rng);
    std::sort(storage[h].rbegin(), storage[h].rend());
    spectra.push_back({storage[h], h % 2 == 0 ? 1.0 : 1.5});
  }
  double previous = 0.0;
  for (double f : {1.0, 0.9, 0.7, 0.5, 0.3, 0.1, 0.05}) {
    absl::StatusOr<double> rho = RemovalRateForTarget(spectra, f);
    ASSERT_TRUE(rho.ok()) << rho.status();
    EXPECT_LE(KeptFraction(spectra, *rho), f);
    if (*rho > 0.0) {
      EXPECT_GT(KeptFraction(spectra, std::nextafter(*rho, 0.0)), f);
    }
    EXPECT_GE(*rho, previous);  // a smaller target needs a larger ρ
    previous = *rho;
  }
}

TEST(RemovalRateForTargetTest, DroppingZeroTailsNeedsOnlyTheSmallestPositiveRho) {
  const std::vector<double> zero_tail = {4, 1, 0, 0};
  const std::vector<WeightedSpectrum> spectra = {{zero_tail, 1.0}};
  EXPECT_EQ(*RemovalRateForTarget(spectra, 0.5), std::numeric_limits<double>::denorm_min());
  EXPECT_EQ(*RemovalRateForTarget(spectra, 1.0), 0.0);
}

TEST(RemovalRateForTargetTest, RejectsBadArguments) {
  const std::vector<double> empty;
  const std::vector<double> with_nan = {1, std::nan("")};
  const std::vector<WeightedSpectrum> good = {{kSpectrum, 1.0}};
  auto code = [](std::vector<WeightedSpectrum> s, double f) {
    return RemovalRateForTarget(s, f).status().code();
  };
  EXPECT_EQ(code(good, 0.0), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(good, 1.5), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code(good, std::nan("")), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({}, 0.5), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{empty, 1.0}}, 0.5), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{kSpectrum, 0.0}}, 0.5), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(code({{with_nan, 1.0}}, 0.5), absl::StatusCode::kInvalidArgument);
  absl::Status unattainable = RemovalRateForTarget(good, 0.2).status();
  EXPECT_EQ(unattainable.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(unattainable.message(), HasSubstr("unattainable"));
}

}  // namespace
}  // namespace pdserve
