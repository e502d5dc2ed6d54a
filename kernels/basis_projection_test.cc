#include "kernels/basis_projection.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

namespace pdserve::kernels {
namespace {

std::vector<float> Random(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = dist(rng);
  return v;
}

// Every rank (whole blocks of four rows and 1 to 3 left over) and dims off the vector width,
// against double-precision dot products; nothing written past out[rank).
TEST(ProjectRowsTest, MatchesDoublePrecisionDotProducts) {
  uint32_t seed = 1;
  for (int rank : {1, 2, 3, 4, 5, 7, 32}) {
    for (int dim : {1, 7, 8, 9, 64, 65}) {
      const std::vector<float> basis = Random(rank * dim, seed++), x = Random(dim, seed++);
      std::vector<float> out(rank + 4, 12345.0f);
      ProjectRows(basis.data(), rank, dim, x.data(), out.data());
      for (int i = 0; i < rank; ++i) {
        double want = 0.0, scale = 0.0;
        for (int c = 0; c < dim; ++c) {
          want += double{basis[i * dim + c]} * x[c];
          scale += std::abs(double{basis[i * dim + c]} * x[c]);
        }
        ASSERT_NEAR(out[i], want, 1e-6 * scale)
            << "rank " << rank << " dim " << dim << " row " << i;
      }
      for (int i = rank; i < rank + 4; ++i) ASSERT_EQ(out[i], 12345.0f) << "wrote past out[rank)";
    }
  }
}

// ZACK's identity setting: the identity basis gives x back exactly.
TEST(ProjectRowsTest, IdentityBasisIsExact) {
  for (int dim : {3, 8, 64}) {
    std::vector<float> basis(dim * dim, 0.0f);
    for (int i = 0; i < dim; ++i) basis[i * dim + i] = 1.0f;
    const std::vector<float> x = Random(dim, 7);
    std::vector<float> out(dim);
    ProjectRows(basis.data(), dim, dim, x.data(), out.data());
    EXPECT_EQ(out, x) << "dim " << dim;
  }
}

}  // namespace
}  // namespace pdserve::kernels
