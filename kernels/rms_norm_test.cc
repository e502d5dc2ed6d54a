// RmsNorm: the vectorized path against RmsNormReference and a double-precision computation on the
// same seeded inputs; in-place use.
#include "kernels/rms_norm.h"

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve::kernels {
namespace {

constexpr double kTolerance = 1e-5;

std::vector<float> RandomVector(int64_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(lo, hi);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

double Norm(const std::vector<float>& v) {
  double sum = 0.0;
  for (float x : v) sum += double{x} * x;
  return std::sqrt(sum);
}

double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  double diff = 0.0, ref = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    double d = double{got[i]} - want[i];
    diff += d * d;
    ref += double{want[i]} * want[i];
  }
  return std::sqrt(diff) / std::sqrt(ref);
}

std::vector<float> RmsNormDouble(const std::vector<float>& x, const std::vector<float>& weight,
                                 int64_t n, int64_t dim, float eps) {
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < n; ++r) {
    double sum = 0.0;
    for (int64_t i = 0; i < dim; ++i) sum += double{x[r * dim + i]} * x[r * dim + i];
    double scale = 1.0 / std::sqrt(sum / static_cast<double>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) {
      out[r * dim + i] = static_cast<float>(weight[i] * scale * x[r * dim + i]);
    }
  }
  return out;
}

TEST(RmsNormTest, FastPathMatchesReference) {
  uint32_t seed = 1;
  for (int64_t dim : {1, 7, 8, 15, 16, 17, 31, 33, 288, 768, 4096}) {
    for (int64_t n : {1, 3}) {
      for (float eps : {1e-5f, 1e-6f}) {
        SCOPED_TRACE(testing::Message() << "dim " << dim << " n " << n << " eps " << eps);
        std::vector<float> x = RandomVector(n * dim, seed++, -3.0f, 3.0f);
        std::vector<float> weight = RandomVector(dim, seed++, 0.5f, 1.5f);
        ASSERT_GT(Norm(x), 0.0);
        std::vector<float> fast(n * dim), ref(n * dim);
        RmsNorm(x.data(), weight.data(), n, dim, eps, fast.data());
        RmsNormReference(x.data(), weight.data(), n, dim, eps, ref.data());
        ASSERT_GT(Norm(ref), 0.0);
        ASSERT_GT(Norm(fast), 0.0);
        EXPECT_LT(RelativeError(fast, ref), kTolerance);
        EXPECT_LT(RelativeError(fast, RmsNormDouble(x, weight, n, dim, eps)), kTolerance);
        EXPECT_LT(RelativeError(ref, RmsNormDouble(x, weight, n, dim, eps)), kTolerance);
      }
    }
  }
}

TEST(RmsNormTest, InPlace) {
  const int64_t n = 4, dim = 100;
  std::vector<float> x = RandomVector(n * dim, 42);
  std::vector<float> weight = RandomVector(dim, 43, 0.5f, 1.5f);
  std::vector<float> want(n * dim);
  RmsNorm(x.data(), weight.data(), n, dim, 1e-5f, want.data());
  std::vector<float> in_place = x;
  RmsNorm(in_place.data(), weight.data(), n, dim, 1e-5f, in_place.data());
  EXPECT_EQ(in_place, want);
  std::vector<float> in_place_ref = x, want_ref(n * dim);
  RmsNormReference(x.data(), weight.data(), n, dim, 1e-5f, want_ref.data());
  RmsNormReference(in_place_ref.data(), weight.data(), n, dim, 1e-5f, in_place_ref.data());
  EXPECT_EQ(in_place_ref, want_ref);
}

// Each row is normalized on its own: a row of large values does not change its neighbours.
TEST(RmsNormTest, RowsAreIndependent) {
  const int64_t dim = 48;
  std::vector<float> weight(dim, 1.0f);
  std::vector<float> row = RandomVector(dim, 5);
  std::vector<float> alone(dim);
  RmsNorm(row.data(), weight.data(), 1, dim, 1e-5f, alone.data());
  std::vector<float> x = RandomVector(dim, 6, -1000.0f, 1000.0f);
  x.insert(x.end(), row.begin(), row.end());
  std::vector<float> out(2 * dim);
  RmsNorm(x.data(), weight.data(), 2, dim, 1e-5f, out.data());
  EXPECT_EQ(std::vector<float>(out.begin() + dim, out.end()), alone);
  // With unit weights the output has mean square ≈ 1.
  double mean_square = 0.0;
  for (float v : alone) mean_square += double{v} * v / dim;
  EXPECT_NEAR(mean_square, 1.0, 1e-3);
}

TEST(RmsNormTest, ZeroRowStaysFinite) {
  const int64_t dim = 20;
  std::vector<float> x(dim, 0.0f), weight(dim, 1.0f), out(dim, 1.0f), ref(dim, 1.0f);
  RmsNorm(x.data(), weight.data(), 1, dim, 1e-5f, out.data());
  RmsNormReference(x.data(), weight.data(), 1, dim, 1e-5f, ref.data());
  for (int64_t i = 0; i < dim; ++i) {
    EXPECT_EQ(out[i], 0.0f);
    EXPECT_EQ(ref[i], 0.0f);
  }
}

}  // namespace
}  // namespace pdserve::kernels
