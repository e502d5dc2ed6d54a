// Quantization into ggml's block formats: round trips stay within each format's resolution on
// seeded rows, and adversarial rows (all zeros, constants, one outlier, f16's extremes, tiny
// values) come back finite and as close as the format allows. (Bit-for-bit agreement with
// llama-quantize is checked in core/formats/quantized_gguf_test.cc.)
#include "core/tensor/quantize.h"

#include <cmath>
#include <random>
#include <vector>

#include "core/tensor/quant_blocks.h"
#include "gtest/gtest.h"

namespace pdserve::quant {
namespace {

constexpr DType kTypes[] = {DType::kQ8_0, DType::kQ4_0, DType::kQ4_1, DType::kQ5_0,
                            DType::kQ5_1, DType::kQ4_K, DType::kQ5_K, DType::kQ6_K};

std::vector<float> RoundTrip(DType dtype, const std::vector<float>& x) {
  std::vector<uint8_t> blocks(RowBytes(dtype, static_cast<int64_t>(x.size())));
  QuantizeRow(dtype, x.data(), static_cast<int64_t>(x.size()), blocks.data());
  std::vector<float> y(x.size());
  DequantizeRow(dtype, blocks.data(), static_cast<int64_t>(x.size()), y.data());
  return y;
}

// Root-mean-square error relative to the row's RMS a format of these bits per weight keeps
// under on Gaussian rows (ggml's own figures are about half of these).
double RelativeErrorBound(DType dtype) {
  switch (dtype) {
    case DType::kQ8_0:
      return 0.01;
    case DType::kQ6_K:
      return 0.04;
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ5_K:
      return 0.08;
    default:
      return 0.16;
  }
}

double RelativeRmsError(const std::vector<float>& x, const std::vector<float>& y) {
  double err = 0, ref = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    err += (x[i] - y[i]) * (x[i] - y[i]);
    ref += x[i] * x[i];
  }
  return std::sqrt(err / ref);
}

TEST(QuantizeTest, SeededRowsRoundTripWithinTheFormatsResolution) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> x(4 * kQK_K);
  for (float& v : x) v = normal(rng);
  for (DType dtype : kTypes) {
    EXPECT_LT(RelativeRmsError(x, RoundTrip(dtype, x)), RelativeErrorBound(dtype))
        << DTypeName(dtype);
  }
}

TEST(QuantizeTest, ZeroRowsStayZero) {
  const std::vector<float> x(kQK_K, 0.0f);
  for (DType dtype : kTypes) {
    for (float v : RoundTrip(dtype, x)) ASSERT_EQ(v, 0.0f) << DTypeName(dtype);
  }
}

TEST(QuantizeTest, AdversarialRowsComeBackFiniteAndClose) {
  std::vector<std::vector<float>> rows;
  rows.emplace_back(kQK_K, 0.37f);      // constant
  rows.emplace_back(kQK_K, -60000.0f);  // near f16's largest finite value
  rows.emplace_back(kQK_K, 1e-30f);     // below f16's smallest subnormal
  std::vector<float> outlier(kQK_K, 0.001f);
  outlier[77] = 50.0f;
  rows.push_back(outlier);
  std::vector<float> alternating(kQK_K);
  for (int i = 0; i < kQK_K; ++i) alternating[i] = i % 2 ? 1000.0f : -1000.0f;
  rows.push_back(alternating);
  for (DType dtype : kTypes) {
    for (const std::vector<float>& x : rows) {
      const std::vector<float> y = RoundTrip(dtype, x);
      float amax = 0;
      for (float v : x) amax = std::max(amax, std::fabs(v));
      for (int i = 0; i < kQK_K; ++i) {
        ASSERT_TRUE(std::isfinite(y[i])) << DTypeName(dtype) << " element " << i;
        // Every format can hold the block's extreme to within a sixth of it (4-bit steps are
        // amax/8, plus f16 rounding of the scales); values far below it may round to zero.
        ASSERT_LE(std::fabs(y[i] - x[i]), amax / 6 + 1e-6f)
            << DTypeName(dtype) << " element " << i << ": " << x[i] << " came back " << y[i];
      }
    }
  }
}

}  // namespace
}  // namespace pdserve::quant
