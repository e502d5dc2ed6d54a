// linalg: Jacobi eigendecomposition (reconstruction, orthonormality, order, signs, degenerate
// spectra), Gram and cross accumulation against brute-force sums, ridge solves against known
// solutions, and the quadratic-form MSE against the explicit residual.
#include "core/calib/linalg.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

std::vector<double> RandomMatrix(int rows, int cols, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal;
  std::vector<double> out(static_cast<size_t>(rows) * cols);
  for (double& x : out) x = normal(rng);
  return out;
}

// C = Aᵀ·B for row-major A [rows, n], B [rows, m].
std::vector<double> TransposeTimes(const std::vector<double>& a, const std::vector<double>& b,
                                   int rows, int n, int m) {
  std::vector<double> c(static_cast<size_t>(n) * m, 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int i = 0; i < n; ++i) {
      for (int j = 0; j < m; ++j) c[i * m + j] += a[r * n + i] * b[r * m + j];
    }
  }
  return c;
}

double MaxAbs(const std::vector<double>& v) {
  double m = 0.0;
  for (double x : v) m = std::max(m, std::fabs(x));
  return m;
}

// max |Vᵀ·diag(values)·V − A| and max |V·Vᵀ − I|.
struct EigenErrors {
  double reconstruction = 0.0;
  double orthonormality = 0.0;
};

EigenErrors Check(const std::vector<double>& a, const SymmetricEigenResult& e) {
  const int n = e.n;
  EigenErrors errors;
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      double rec = 0.0;
      double dot = 0.0;
      for (int k = 0; k < n; ++k) {
        rec += e.vectors[k * n + i] * e.values[k] * e.vectors[k * n + j];
        dot += e.vectors[i * n + k] * e.vectors[j * n + k];
      }
      errors.reconstruction = std::max(errors.reconstruction, std::fabs(rec - a[i * n + j]));
      errors.orthonormality = std::max(errors.orthonormality, std::fabs(dot - (i == j)));
    }
  }
  return errors;
}

void ExpectOriented(const SymmetricEigenResult& e) {
  for (int i = 0; i < e.n; ++i) {
    const double* row = e.vectors.data() + i * e.n;
    int best = 0;
    for (int k = 1; k < e.n; ++k) {
      if (std::fabs(row[k]) > std::fabs(row[best])) best = k;
    }
    EXPECT_GT(row[best], 0.0) << "eigenvector " << i;
  }
}

TEST(SymmetricEigenTest, ReconstructsRandomSpdMatrices) {
  for (int n : {1, 2, 3, 7, 16, 64, 128}) {
    SCOPED_TRACE(n);
    const int rows = 2 * n + 3;
    std::vector<double> x = RandomMatrix(rows, n, 100 + n);
    std::vector<double> a = TransposeTimes(x, x, rows, n, n);
    absl::StatusOr<SymmetricEigenResult> e = SymmetricEigen(a, n);
    ASSERT_TRUE(e.ok()) << e.status();
    EigenErrors errors = Check(a, *e);
    EXPECT_LT(errors.reconstruction, 1e-10 * MaxAbs(a));
    EXPECT_LT(errors.orthonormality, 1e-12);
    EXPECT_TRUE(std::is_sorted(e->values.begin(), e->values.end(), std::greater<>()));
    EXPECT_GT(e->values.back(), 0.0);
    ExpectOriented(*e);
  }
}

TEST(SymmetricEigenTest, IndefiniteMatrix) {
  const int n = 20;
  std::vector<double> r = RandomMatrix(n, n, 7);
  std::vector<double> a(n * n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) a[i * n + j] = r[i * n + j] + r[j * n + i];
  }
  absl::StatusOr<SymmetricEigenResult> e = SymmetricEigen(a, n);
  ASSERT_TRUE(e.ok()) << e.status();
  EigenErrors errors = Check(a, *e);
  EXPECT_LT(errors.reconstruction, 1e-10 * MaxAbs(a));
  EXPECT_LT(errors.orthonormality, 1e-12);
  EXPECT_GT(e->values.front(), 0.0);
  EXPECT_LT(e->values.back(), 0.0);
  double trace = 0.0, sum = 0.0;
  for (int i = 0; i < n; ++i) trace += a[i * n + i], sum += e->values[i];
  EXPECT_NEAR(trace, sum, 1e-10);
}

TEST(SymmetricEigenTest, DiagonalInputSortsAndKeepsUnitVectors) {
  const std::vector<double> a = {1, 0, 0,  0,  //
                                 0, 4, 0,  0,  //
                                 0, 0, -2, 0,  //
                                 0, 0, 0,  3};
  absl::StatusOr<SymmetricEigenResult> e = SymmetricEigen(a, 4);
  ASSERT_TRUE(e.ok()) << e.status();
  EXPECT_THAT(e->values, ::testing::ElementsAre(4, 3, 1, -2));
  EXPECT_THAT(e->vectors, ::testing::ElementsAre(0, 1, 0, 0,  //
                                                 0, 0, 0, 1,  //
                                                 1, 0, 0, 0,  //
                                                 0, 0, 1, 0));
}

TEST(SymmetricEigenTest, ZeroMatrixGivesIdentity) {
  absl::StatusOr<SymmetricEigenResult> e = SymmetricEigen(std::vector<double>(9, 0.0), 3);
  ASSERT_TRUE(e.ok());
  EXPECT_THAT(e->values, ::testing::Each(0.0));
  EXPECT_THAT(e->vectors, ::testing::ElementsAre(1, 0, 0, 0, 1, 0, 0, 0, 1));
}

TEST(SymmetricEigenTest, RepeatedEigenvalues) {
  // A = Qᵀ·diag(5, 5, 5, 1, 1, 0)·Q with Q a random orthogonal matrix (eigenvectors of a random
  // symmetric matrix).
  const int n = 6;
  std::vector<double> r = RandomMatrix(n, n, 11);
  std::vector<double> s(n * n);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) s[i * n + j] = r[i * n + j] + r[j * n + i];
  }
  absl::StatusOr<SymmetricEigenResult> q = SymmetricEigen(s, n);
  ASSERT_TRUE(q.ok());
  const std::vector<double> lambda = {5, 5, 5, 1, 1, 0};
  std::vector<double> a(n * n, 0.0);
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      for (int k = 0; k < n; ++k)
        a[i * n + j] += q->vectors[k * n + i] * lambda[k] * q->vectors[k * n + j];
    }
  }
  absl::StatusOr<SymmetricEigenResult> e = SymmetricEigen(a, n);
  ASSERT_TRUE(e.ok()) << e.status();
  for (int i = 0; i < n; ++i) EXPECT_NEAR(e->values[i], lambda[i], 1e-12);
  EigenErrors errors = Check(a, *e);
  EXPECT_LT(errors.reconstruction, 1e-12 * 5);
  EXPECT_LT(errors.orthonormality, 1e-12);
  ExpectOriented(*e);
}

TEST(SymmetricEigenTest, DeterministicAndUsesSymmetricPart) {
  const int n = 12;
  std::vector<double> x = RandomMatrix(30, n, 5);
  std::vector<double> a = TransposeTimes(x, x, 30, n, n);
  std::vector<double> skewed = a;
  for (int i = 0; i < n; ++i) {
    for (int j = i + 1; j < n; ++j) skewed[i * n + j] += 0.5, skewed[j * n + i] -= 0.5;
  }
  absl::StatusOr<SymmetricEigenResult> e1 = SymmetricEigen(a, n);
  absl::StatusOr<SymmetricEigenResult> e2 = SymmetricEigen(a, n);
  absl::StatusOr<SymmetricEigenResult> e3 = SymmetricEigen(skewed, n);
  ASSERT_TRUE(e1.ok() && e2.ok() && e3.ok());
  EXPECT_EQ(e1->values, e2->values);
  EXPECT_EQ(e1->vectors, e2->vectors);
  for (int i = 0; i < n * n; ++i) EXPECT_NEAR(e1->vectors[i], e3->vectors[i], 1e-9);
}

TEST(SymmetricEigenTest, RejectsBadInput) {
  EXPECT_EQ(SymmetricEigen(std::vector<double>(8), 3).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(SymmetricEigen({}, 0).status().code(), absl::StatusCode::kInvalidArgument);
  std::vector<double> a(4, 1.0);
  a[1] = std::nan("");
  absl::Status status = SymmetricEigen(a, 2).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("not finite"));
  a[1] = INFINITY;
  EXPECT_EQ(SymmetricEigen(a, 2).status().code(), absl::StatusCode::kInvalidArgument);
}

// ---------------------------------------------------------------------------------------------

TEST(GramAccumulatorTest, MatchesBruteForceForOddShapesAndStrides) {
  for (int n : {1, 3, 8, 13, 40}) {
    SCOPED_TRACE(n);
    const int rows = 201;  // not a multiple of the 64-row block
    const int stride = n + 5;
    std::vector<double> data = RandomMatrix(rows, stride, 300 + n);
    std::vector<float> floats(data.begin(), data.end());
    std::vector<double> packed(rows * n);
    for (int r = 0; r < rows; ++r) {
      for (int k = 0; k < n; ++k) packed[r * n + k] = static_cast<double>(floats[r * stride + k]);
    }
    const std::vector<double> expected = TransposeTimes(packed, packed, rows, n, n);

    GramAccumulator from_floats(n);
    from_floats.Add(floats.data(), 70, stride);  // in pieces
    from_floats.Add(floats.data() + 70 * stride, rows - 70, stride);
    EXPECT_EQ(from_floats.count(), rows);
    GramAccumulator from_doubles(n);
    from_doubles.Add(packed.data(), rows, n);
    for (const GramAccumulator* g : {&from_floats, &from_doubles}) {
      std::vector<double> m = g->Matrix();
      ASSERT_EQ(m.size(), expected.size());
      for (size_t i = 0; i < m.size(); ++i) EXPECT_NEAR(m[i], expected[i], 1e-9) << i;
    }
  }
}

TEST(GramAccumulatorTest, EmptyIsZero) {
  GramAccumulator g(5);
  g.Add(static_cast<const float*>(nullptr), 0, 5);
  EXPECT_EQ(g.count(), 0);
  EXPECT_THAT(g.Matrix(), ::testing::Each(0.0));
}

TEST(CrossAccumulatorTest, MatchesBruteForce) {
  const int rows = 150, n = 11, m = 5, x_stride = 12, y_stride = 9;
  std::vector<double> xd = RandomMatrix(rows, x_stride, 1);
  std::vector<double> yd = RandomMatrix(rows, y_stride, 2);
  std::vector<float> x(xd.begin(), xd.end()), y(yd.begin(), yd.end());
  std::vector<double> xp(rows * n), yp(rows * m);
  double y_squares = 0.0;
  for (int r = 0; r < rows; ++r) {
    for (int k = 0; k < n; ++k) xp[r * n + k] = x[r * x_stride + k];
    for (int k = 0; k < m; ++k) {
      yp[r * m + k] = y[r * y_stride + k];
      y_squares += yp[r * m + k] * yp[r * m + k];
    }
  }
  const std::vector<double> expected = TransposeTimes(xp, yp, rows, n, m);
  CrossAccumulator cross(n, m);
  cross.Add(x.data(), x_stride, y.data(), y_stride, 100);
  cross.Add(x.data() + 100 * x_stride, x_stride, y.data() + 100 * y_stride, y_stride, rows - 100);
  EXPECT_EQ(cross.count(), rows);
  EXPECT_NEAR(cross.y_sum_squares(), y_squares, 1e-9);
  std::vector<double> got = cross.Matrix();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], expected[i], 1e-9) << i;
}

// ---------------------------------------------------------------------------------------------

struct Problem {
  int rows, n, m;
  std::vector<double> x, y, xtx, xty;
  double y_sum_squares = 0.0;
  LeastSquaresStats Stats() const { return {n, m, rows, xtx, xty, y_sum_squares}; }
};

// Y = X·W_true + noise·E.
Problem MakeProblem(int rows, int n, int m, double noise, const std::vector<double>& w_true) {
  Problem p{rows, n, m, RandomMatrix(rows, n, 21), {}, {}, {}};
  std::vector<double> e = RandomMatrix(rows, m, 22);
  p.y.assign(rows * m, 0.0);
  for (int r = 0; r < rows; ++r) {
    for (int c = 0; c < m; ++c) {
      double v = noise * e[r * m + c];
      for (int k = 0; k < n; ++k) v += p.x[r * n + k] * w_true[k * m + c];
      p.y[r * m + c] = v;
      p.y_sum_squares += v * v;
    }
  }
  p.xtx = TransposeTimes(p.x, p.x, rows, n, n);
  p.xty = TransposeTimes(p.x, p.y, rows, n, m);
  return p;
}

double BruteMse(const Problem& p, const std::vector<double>& w) {
  double sse = 0.0;
  for (int r = 0; r < p.rows; ++r) {
    for (int c = 0; c < p.m; ++c) {
      double pred = 0.0;
      for (int k = 0; k < p.n; ++k) pred += p.x[r * p.n + k] * w[k * p.m + c];
      sse += (p.y[r * p.m + c] - pred) * (p.y[r * p.m + c] - pred);
    }
  }
  return sse / (static_cast<double>(p.rows) * p.m);
}

TEST(RidgeSolveTest, RecoversExactLinearMap) {
  const std::vector<double> w_true = RandomMatrix(6, 3, 9);
  Problem p = MakeProblem(200, 6, 3, 0.0, w_true);
  absl::StatusOr<std::vector<double>> w = RidgeSolve(p.Stats(), 0.0);
  ASSERT_TRUE(w.ok()) << w.status();
  for (size_t i = 0; i < w_true.size(); ++i) EXPECT_NEAR((*w)[i], w_true[i], 1e-10);
  absl::StatusOr<double> mse = MeanSquaredError(p.Stats(), *w);
  ASSERT_TRUE(mse.ok());
  EXPECT_NEAR(*mse, 0.0, 1e-12);
}

TEST(RidgeSolveTest, DiagonalGramHasClosedForm) {
  // XᵀX = diag(d): W[i][j] = XᵀY[i][j] / (d_i + λ).
  const std::vector<double> xtx = {2, 0, 0, 0, 5, 0, 0, 0, 10};
  const std::vector<double> xty = {1, -2, 3, 4, 5, 6};
  LeastSquaresStats stats{3, 2, 10, xtx, xty, 0.0};
  absl::StatusOr<std::vector<double>> w = RidgeSolve(stats, 0.5);
  ASSERT_TRUE(w.ok()) << w.status();
  const double d[] = {2.5, 5.5, 10.5};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 2; ++j) EXPECT_NEAR((*w)[i * 2 + j], xty[i * 2 + j] / d[i], 1e-15);
  }
}

TEST(RidgeSolveTest, SatisfiesNormalEquations) {
  const int n = 24, m = 7;
  Problem p = MakeProblem(60, n, m, 0.3, RandomMatrix(n, m, 3));
  const double lambda = 2.5;
  absl::StatusOr<std::vector<double>> w = RidgeSolve(p.Stats(), lambda);
  ASSERT_TRUE(w.ok()) << w.status();
  for (int i = 0; i < n; ++i) {
    for (int c = 0; c < m; ++c) {
      double lhs = lambda * (*w)[i * m + c];
      for (int k = 0; k < n; ++k) lhs += p.xtx[i * n + k] * (*w)[k * m + c];
      EXPECT_NEAR(lhs, p.xty[i * m + c], 1e-9 * MaxAbs(p.xty));
    }
  }
}

TEST(RidgeSolveTest, RejectsSingularAndBadArguments) {
  // Rank-deficient X (a repeated column): singular at λ = 0, fine with λ > 0.
  const int rows = 20, n = 3;
  std::vector<double> x = RandomMatrix(rows, n, 4);
  for (int r = 0; r < rows; ++r) x[r * n + 2] = x[r * n + 0];
  std::vector<double> xtx = TransposeTimes(x, x, rows, n, n);
  std::vector<double> xty(n, 1.0);
  LeastSquaresStats stats{n, 1, rows, xtx, xty, 0.0};
  EXPECT_EQ(RidgeSolve(stats, 0.0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(RidgeSolve(stats, 1e-3).ok());
  const std::vector<double> indefinite = {1, 2, 2, 1};
  LeastSquaresStats bad{2, 1, 1, indefinite, std::vector<double>{1, 1}, 0.0};
  EXPECT_EQ(RidgeSolve(bad, 0.0).status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(RidgeSolve(stats, -1.0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RidgeSolve(stats, NAN).status().code(), absl::StatusCode::kInvalidArgument);
  LeastSquaresStats mismatched{n, 2, rows, xtx, xty, 0.0};
  EXPECT_EQ(RidgeSolve(mismatched, 1.0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(MeanSquaredErrorTest, MatchesExplicitResidual) {
  const int n = 9, m = 4;
  Problem p = MakeProblem(300, n, m, 0.5, RandomMatrix(n, m, 8));
  for (uint64_t seed : {30, 31, 32}) {
    const std::vector<double> w = RandomMatrix(n, m, seed);
    absl::StatusOr<double> mse = MeanSquaredError(p.Stats(), w);
    ASSERT_TRUE(mse.ok()) << mse.status();
    const double brute = BruteMse(p, w);
    EXPECT_NEAR(*mse, brute, 1e-10 * brute);
  }
  // The least-squares fit beats any perturbation of it and its error is the noise level.
  absl::StatusOr<std::vector<double>> fit = RidgeSolve(p.Stats(), 0.0);
  ASSERT_TRUE(fit.ok());
  const double best = *MeanSquaredError(p.Stats(), *fit);
  EXPECT_NEAR(best, BruteMse(p, *fit), 1e-10);
  EXPECT_NEAR(best, 0.25, 0.05);
  std::vector<double> nudged = *fit;
  nudged[5] += 1e-3;
  EXPECT_GT(*MeanSquaredError(p.Stats(), nudged), best);
}

TEST(MeanSquaredErrorTest, RejectsBadArguments) {
  Problem p = MakeProblem(10, 2, 2, 0.1, RandomMatrix(2, 2, 1));
  EXPECT_EQ(MeanSquaredError(p.Stats(), std::vector<double>(3)).status().code(),
            absl::StatusCode::kInvalidArgument);
  LeastSquaresStats empty = p.Stats();
  empty.count = 0;
  EXPECT_EQ(MeanSquaredError(empty, std::vector<double>(4)).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(LinalgPipelineTest, AccumulatorsFeedRidgeSolve) {
  // Float rows through the accumulators give the same fit as the fp64 brute-force statistics.
  const int rows = 500, n = 10, m = 6;
  const std::vector<double> w_true = RandomMatrix(n, m, 40);
  Problem p = MakeProblem(rows, n, m, 0.01, w_true);
  std::vector<float> x(p.x.begin(), p.x.end()), y(p.y.begin(), p.y.end());
  GramAccumulator gram(n);
  CrossAccumulator cross(n, m);
  gram.Add(x.data(), rows, n);
  cross.Add(x.data(), n, y.data(), m, rows);
  const std::vector<double> xtx = gram.Matrix(), xty = cross.Matrix();
  LeastSquaresStats stats{n, m, cross.count(), xtx, xty, cross.y_sum_squares()};
  absl::StatusOr<std::vector<double>> w = RidgeSolve(stats, 0.0);
  ASSERT_TRUE(w.ok()) << w.status();
  for (size_t i = 0; i < w_true.size(); ++i) EXPECT_NEAR((*w)[i], w_true[i], 2e-3);
  absl::StatusOr<double> mse = MeanSquaredError(stats, *w);
  ASSERT_TRUE(mse.ok());
  EXPECT_NEAR(*mse, 1e-4, 3e-5);
}

}  // namespace
}  // namespace pdserve
