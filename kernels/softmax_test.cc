// The vectorized softmax behind attention against a double-precision softmax, each instruction
// set's version (the AVX-512 one skipped on CPUs without it).
#include "kernels/cpu/softmax.h"

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu_features.h"

namespace pdserve::kernels {
namespace {

struct Version {
  std::string name;
  void (*softmax)(float* x, int n);
  ExpStats (*exp)(float* x, int n);
  bool (*supported)();
};

class SoftmaxTest : public testing::TestWithParam<Version> {
 protected:
  void SetUp() override {
    if (!GetParam().supported()) GTEST_SKIP() << "the CPU lacks " << GetParam().name;
  }
  void SoftmaxInPlace(float* x, int n) { GetParam().softmax(x, n); }
};

TEST_P(SoftmaxTest, MatchesDoublePrecisionAcrossRangesAndLengths) {
  std::mt19937 rng(17);
  for (float spread : {0.1f, 5.0f, 40.0f, 200.0f}) {
    for (int n : {1, 3, 8, 9, 15, 16, 17, 100, 1000}) {
      std::uniform_real_distribution<float> dist(-spread, spread);
      std::vector<float> x(n);
      for (float& v : x) v = dist(rng);
      std::vector<double> want(n);
      double max_value = *std::max_element(x.begin(), x.end()), sum = 0;
      for (int i = 0; i < n; ++i) sum += want[i] = std::exp(x[i] - max_value);
      const std::vector<float> input = x;
      SoftmaxInPlace(x.data(), n);
      double total = 0;
      for (int i = 0; i < n; ++i) {
        total += x[i];
        // fp32 rounds x − max by up to half an ulp, which e^(·) turns into a relative error of
        // about 6e-8·|x − max|; the polynomial adds under 2e-7.
        const double relative = 4e-7 + 1.2e-7 * std::abs(input[i] - max_value);
        EXPECT_NEAR(x[i], want[i] / sum, relative * want[i] / sum + 1e-37) << spread << " " << n;
      }
      EXPECT_NEAR(total, 1.0, 1e-5);
    }
  }
}

// The maximum is found wherever it sits (any vector lane, the scalar tail): e^(x − max) overflows
// to infinity when a larger element is missed.
TEST_P(SoftmaxTest, FindsTheMaximumAtEveryPosition) {
  for (int n : {1, 7, 31, 32, 33, 64, 100}) {
    for (int at = 0; at < n; ++at) {
      std::vector<float> x(n, -50.0f);
      x[at] = 500.0f;
      SoftmaxInPlace(x.data(), n);
      for (int i = 0; i < n; ++i) {
        ASSERT_EQ(x[i], i == at ? 1.0f : 0.0f)
            << "n " << n << " max at " << at << ", x[" << i << "]";
      }
    }
  }
}

TEST_P(SoftmaxTest, VeryNegativeArgumentsGiveZeroNotGarbage) {
  std::vector<float> x = {0.0f, -80.0f, -87.0f, -88.0f, -100.0f, -1e30f, 0.0f, -3.0f, -1e4f};
  SoftmaxInPlace(x.data(), static_cast<int>(x.size()));
  for (float v : x) {
    EXPECT_TRUE(std::isfinite(v));
    EXPECT_GE(v, 0.0f);
  }
  EXPECT_EQ(x[4], 0.0f);
  EXPECT_EQ(x[5], 0.0f);
  EXPECT_NEAR(x[0], 1.0 / (2.0 + std::exp(-3.0)), 1e-6);
}

// The unnormalized softmax: the row's maximum exactly, e^(x − max) per element, and their sum; the
// normalized softmax is those elements times 1/sum, bit for bit.
TEST_P(SoftmaxTest, ExpInPlaceReturnsTheMaxAndTheSumOfWhatItWrites) {
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-30.0f, 30.0f);
  for (int n : {1, 5, 16, 31, 33, 1000}) {
    std::vector<float> x(n);
    for (float& v : x) v = dist(rng);
    std::vector<float> normalized = x, exps = x;
    const ExpStats stats = GetParam().exp(exps.data(), n);
    SoftmaxInPlace(normalized.data(), n);
    EXPECT_EQ(stats.max, *std::max_element(x.begin(), x.end())) << n;
    double sum = 0;
    for (int i = 0; i < n; ++i) {
      sum += exps[i];
      const double want = std::exp(double{x[i]} - stats.max);  // tolerance as above
      EXPECT_NEAR(exps[i], want, (4e-7 + 1.2e-7 * (stats.max - x[i])) * want + 1e-37) << n;
      ASSERT_EQ(exps[i] * (1.0f / stats.sum), normalized[i]) << n << " at " << i;
    }
    EXPECT_NEAR(stats.sum, sum, 1e-6 * sum) << n;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Isa, SoftmaxTest,
    testing::Values(Version{"avx2", &avx2::SoftmaxInPlace, &avx2::ExpInPlace,
                            [] { return CpuIsSupported(); }},
                    Version{"avx512", &avx512::SoftmaxInPlace, &avx512::ExpInPlace,
                            [] { return GetCpuFeatures().avx512; }}),
    [](const testing::TestParamInfo<Version>& info) { return info.param.name; });

}  // namespace
}  // namespace pdserve::kernels
