// Small dense fp64 linear algebra for calibration: the symmetric eigendecomposition behind the ZACK
// bases, Gram (XᵀX) and cross (XᵀY) accumulation over streamed sample rows, and the ridge
// least-squares fit and its error behind the SwiftKV recovery. Matrices are row-major
// std::vector<double>; sizes are small (head_dim ≤ 256 mostly, the model width up to ~1024).
//
// Pure functions are thread-safe; an accumulator is not (one per thread, or guard it).
#ifndef PDSERVE_CORE_CALIB_LINALG_H_
#define PDSERVE_CORE_CALIB_LINALG_H_

#include <cstdint>
#include <span>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve {

struct SymmetricEigenResult {
  int n = 0;
  std::vector<double> values;   // [n] descending
  std::vector<double> vectors;  // [n, n] row i = unit eigenvector of values[i]; rows orthonormal
};

// The eigendecomposition A = Vᵀ·diag(values)·V of the symmetric matrix `a` ([n, n] row-major; the
// symmetric part (A + Aᵀ)/2 is used) by cyclic Jacobi rotations, O(n³) per sweep, a few sweeps.
// Deterministic: eigenvalues sorted descending (equal ones keep their diagonal order) and each
// eigenvector's largest-magnitude component is positive (ties: the lowest index).
// InvalidArgument when n < 1, a.size() != n², or an entry is not finite; Internal when the
// iteration fails to converge (not expected for finite input).
absl::StatusOr<SymmetricEigenResult> SymmetricEigen(std::span<const double> a, int n);

// Σ rowᵀ·row over sample rows of width n, in fp64. Blocked: rows are buffered and folded into the
// upper triangle a block at a time, so Add may be called with any number of rows.
class GramAccumulator {
 public:
  explicit GramAccumulator(int n);  // n ≥ 1

  // Adds `count` rows; row r is rows[r·stride .. r·stride + n). stride ≥ n (n for packed rows).
  void Add(const float* rows, int64_t count, int64_t stride);
  void Add(const double* rows, int64_t count, int64_t stride);

  int n() const { return n_; }
  int64_t count() const { return count_; }  // rows added so far
  // The full symmetric [n, n] sum.
  std::vector<double> Matrix() const;

 private:
  template <typename T>
  void AddRows(const T* rows, int64_t count, int64_t stride);

  int n_;
  int padded_;  // n rounded up to the kernel's tile width
  int64_t count_ = 0;
  std::vector<double> sum_;  // [padded, padded], upper tiles only
};

// Σ xᵀ·y over paired sample rows (x of width n, y of width m) in fp64, plus Σ‖y‖² for
// MeanSquaredError.
class CrossAccumulator {
 public:
  CrossAccumulator(int n, int m);  // n, m ≥ 1

  // Adds `count` row pairs: x row r at x[r·x_stride], y row r at y[r·y_stride]; strides ≥ n, m.
  void Add(const float* x, int64_t x_stride, const float* y, int64_t y_stride, int64_t count);

  int n() const { return n_; }
  int m() const { return m_; }
  int64_t count() const { return count_; }
  double y_sum_squares() const { return y_sum_squares_; }
  std::vector<double> Matrix() const;  // [n, m] = XᵀY

 private:
  int n_, m_;
  int padded_n_, padded_m_;
  int64_t count_ = 0;
  double y_sum_squares_ = 0.0;
  std::vector<double> sum_;  // [padded_n, padded_m]
};

// A non-owning view of the sufficient statistics of a least-squares fit Y ≈ X·W over `count` rows.
struct LeastSquaresStats {
  int n = 0;                    // columns of X
  int m = 0;                    // columns of Y
  int64_t count = 0;            // sample rows
  std::span<const double> xtx;  // [n, n] XᵀX
  std::span<const double> xty;  // [n, m] XᵀY
  double y_sum_squares = 0.0;   // Σ‖y‖² = tr(YᵀY)
};

// W = (XᵀX + λI)⁻¹·XᵀY, [n, m], by Cholesky factorization in fp64 (uses xtx, xty, n, m).
// InvalidArgument for mismatched sizes or λ < 0 / not finite; FailedPrecondition when XᵀX + λI is
// not numerically positive definite (e.g. λ = 0 with fewer independent rows than n).
absl::StatusOr<std::vector<double>> RidgeSolve(const LeastSquaresStats& stats, double lambda);

// The mean squared error per element, ‖Y − X·W‖²/(count·m), of any W ([n, m]) from the statistics
// alone: (tr(WᵀXᵀXW) − 2·tr(WᵀXᵀY) + Σ‖y‖²)/(count·m), clamped at 0 (the expansion cancels when
// the error is tiny next to Σ‖y‖², so expect an absolute error of ~1e-15·Σ‖y‖²/(count·m)).
// InvalidArgument for mismatched sizes or count < 1.
absl::StatusOr<double> MeanSquaredError(const LeastSquaresStats& stats, std::span<const double> w);

}  // namespace pdserve

#endif  // PDSERVE_CORE_CALIB_LINALG_H_
