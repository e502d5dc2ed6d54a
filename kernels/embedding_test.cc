// EmbeddingLookup: rows of an f32/f16/bf16 table widened to f32, in the order of the ids, with
// repeated ids and the first and last rows.
#include "kernels/embedding.h"

#include <cstdint>
#include <random>
#include <vector>

#include "core/tensor/tensor.h"
#include "gtest/gtest.h"

namespace pdserve::kernels {
namespace {

TEST(EmbeddingTest, CopiesRowsForEveryDtype) {
  const int64_t vocab = 50, dim = 37;
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> values(vocab * dim);
  for (float& v : values) v = dist(rng);
  const std::vector<int32_t> ids = {0, 49, 7, 7, 23, 0};
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    Tensor table = ConvertTensor(MakeF32Tensor(values, {vocab, dim}), dtype);
    std::vector<float> out(ids.size() * dim + 4, 99.0f);
    EmbeddingLookup(table, ids.data(), static_cast<int64_t>(ids.size()), out.data());
    for (size_t i = 0; i < ids.size(); ++i) {
      for (int64_t c = 0; c < dim; ++c) {
        ASSERT_EQ(out[i * dim + c], ElementAsFloat(table, ids[i] * dim + c))
            << DTypeName(dtype) << " id " << ids[i] << " c " << c;
      }
    }
    for (size_t i = ids.size() * dim; i < out.size(); ++i) EXPECT_EQ(out[i], 99.0f);
    double norm = 0.0;
    for (size_t i = 0; i < ids.size() * dim; ++i) norm += double{out[i]} * out[i];
    EXPECT_GT(norm, 0.0);
  }
}

}  // namespace
}  // namespace pdserve::kernels
