#include "core/calib/linalg.h"

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <numeric>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

// ---------------------------------------------------------------------------------------------
// Jacobi eigenvalue iteration.

constexpr int kMaxSweeps = 100;

// (x, y) ← (x − s·(y + τ·x), y + s·(x − τ·y)) elementwise: a plane rotation in the form that
// loses least precision (Numerical Recipes' `ROTATE`).
void RotateRows(double* __restrict x, double* __restrict y, int n, double s, double tau) {
  for (int k = 0; k < n; ++k) {
    const double g = x[k];
    const double h = y[k];
    x[k] = g - s * (h + g * tau);
    y[k] = h + s * (g - h * tau);
  }
}

// Applies the rotation that zeroes a[p][q] to the symmetric matrix `a` (both triangles kept) and
// to the rows p and q of `v` (v holds the eigenvectors as rows). Requires a[p][q] != 0.
void Rotate(std::vector<double>& a, std::vector<double>& v, int n, int p, int q) {
  double* ap = a.data() + static_cast<size_t>(p) * n;
  double* aq = a.data() + static_cast<size_t>(q) * n;
  const double apq = ap[q];
  const double diff = aq[q] - ap[p];
  double t;  // tan of the rotation angle, the smaller root
  if (std::fabs(diff) + 100.0 * std::fabs(apq) == std::fabs(diff)) {
    t = apq / diff;
  } else {
    const double theta = 0.5 * diff / apq;
    t = 1.0 / (std::fabs(theta) + std::sqrt(1.0 + theta * theta));
    if (theta < 0.0) t = -t;
  }
  const double c = 1.0 / std::sqrt(1.0 + t * t);
  const double s = t * c;
  const double tau = s / (1.0 + c);
  const double app = ap[p] - t * apq;
  const double aqq = aq[q] + t * apq;
  // Rows p and q first (contiguous, vectorized), then the 2×2 block exactly, then the columns.
  RotateRows(ap, aq, n, s, tau);
  ap[p] = app;
  aq[q] = aqq;
  ap[q] = aq[p] = 0.0;
  for (int k = 0; k < n; ++k) {
    a[static_cast<size_t>(k) * n + p] = ap[k];
    a[static_cast<size_t>(k) * n + q] = aq[k];
  }
  RotateRows(v.data() + static_cast<size_t>(p) * n, v.data() + static_cast<size_t>(q) * n, n, s,
             tau);
}

double OffDiagonalSum(const std::vector<double>& a, int n) {
  double sum = 0.0;
  for (int p = 0; p < n; ++p) {
    for (int q = p + 1; q < n; ++q) sum += std::fabs(a[static_cast<size_t>(p) * n + q]);
  }
  return sum;
}

// Cyclic Jacobi sweeps (the thresholded variant of Numerical Recipes' `jacobi`) until every
// off-diagonal entry is exactly zero: after four sweeps an entry negligible next to both its
// diagonal entries is set to zero instead of rotated. `a` ends diagonal; `v` accumulates rows.
absl::Status JacobiSweeps(std::vector<double>& a, std::vector<double>& v, int n) {
  for (int sweep = 1; sweep <= kMaxSweeps; ++sweep) {
    const double off = OffDiagonalSum(a, n);
    if (off == 0.0) return absl::OkStatus();
    const double threshold = sweep < 4 ? 0.2 * off / (static_cast<double>(n) * n) : 0.0;
    for (int p = 0; p + 1 < n; ++p) {
      for (int q = p + 1; q < n; ++q) {
        double& apq = a[static_cast<size_t>(p) * n + q];
        const double g = 100.0 * std::fabs(apq);
        const double dp = std::fabs(a[static_cast<size_t>(p) * n + p]);
        const double dq = std::fabs(a[static_cast<size_t>(q) * n + q]);
        if (sweep > 4 && dp + g == dp && dq + g == dq) {
          apq = a[static_cast<size_t>(q) * n + p] = 0.0;
        } else if (std::fabs(apq) > threshold) {
          Rotate(a, v, n, p, q);
        }
      }
    }
  }
  return absl::InternalError(
      absl::StrCat("SymmetricEigen: Jacobi iteration did not converge in ", kMaxSweeps, " sweeps"));
}

// Negates `row` unless its largest-magnitude component (the first of equals) is positive.
void Orient(double* row, int n) {
  int best = 0;
  for (int k = 1; k < n; ++k) {
    if (std::fabs(row[k]) > std::fabs(row[best])) best = k;
  }
  if (row[best] < 0.0) {
    for (int k = 0; k < n; ++k) row[k] = -row[k];
  }
}

// ---------------------------------------------------------------------------------------------
// Blocked accumulation of Σ aᵀ·c over buffered fp64 rows.

constexpr int kTileRows = 4;    // rows of the output tile (columns of a)
constexpr int kTileCols = 8;    // columns of the output tile (columns of c)
constexpr int kBlockRows = 64;  // sample rows buffered per fold

int PadToTile(int n) { return (n + kTileCols - 1) / kTileCols * kTileCols; }

// out[0..4)[0..8) += Σ_r a[r·a_stride + 0..4)ᵀ · c[r·c_stride + 0..8), with `out` row stride
// `out_stride`. The accumulators stay in registers across the sample rows.
void AccumulateTile(const double* a, const double* c, int stride_a, int stride_c, int rows,
                    double* out, int out_stride) {
  double acc[kTileRows][kTileCols];
  for (int i = 0; i < kTileRows; ++i) {
    for (int j = 0; j < kTileCols; ++j) acc[i][j] = out[i * out_stride + j];
  }
  for (int r = 0; r < rows; ++r) {
    const double* ar = a + static_cast<size_t>(r) * stride_a;
    const double* cr = c + static_cast<size_t>(r) * stride_c;
    for (int i = 0; i < kTileRows; ++i) {
      const double ai = ar[i];
      for (int j = 0; j < kTileCols; ++j) acc[i][j] += ai * cr[j];
    }
  }
  for (int i = 0; i < kTileRows; ++i) {
    for (int j = 0; j < kTileCols; ++j) out[i * out_stride + j] = acc[i][j];
  }
}

// Copies `count` rows of width n (row stride `stride`) into `buffer` as fp64 rows of width
// `padded`; the padding columns stay zero.
template <typename T>
void Buffer(const T* rows, int64_t count, int64_t stride, int n, int padded,
            std::vector<double>& buffer) {
  for (int64_t r = 0; r < count; ++r) {
    const T* src = rows + r * stride;
    double* dst = buffer.data() + r * padded;
    for (int k = 0; k < n; ++k) dst[k] = static_cast<double>(src[k]);
  }
}

}  // namespace

absl::StatusOr<SymmetricEigenResult> SymmetricEigen(std::span<const double> a_in, int n) {
  if (n < 1 || a_in.size() != static_cast<size_t>(n) * n) {
    return absl::InvalidArgumentError(
        absl::StrCat("SymmetricEigen: ", a_in.size(), " entries for an n = ", n, " square matrix"));
  }
  std::vector<double> a(a_in.size());
  for (int i = 0; i < n; ++i) {
    for (int j = 0; j < n; ++j) {
      const double x = a_in[static_cast<size_t>(i) * n + j];
      if (!std::isfinite(x)) {
        return absl::InvalidArgumentError(
            absl::StrCat("SymmetricEigen: entry (", i, ", ", j, ") is not finite"));
      }
      a[static_cast<size_t>(i) * n + j] = 0.5 * (x + a_in[static_cast<size_t>(j) * n + i]);
    }
  }
  std::vector<double> v(a.size(), 0.0);
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i) * n + i] = 1.0;
  PDSERVE_RETURN_IF_ERROR(JacobiSweeps(a, v, n));

  std::vector<int> order(n);
  std::iota(order.begin(), order.end(), 0);
  auto diag = [&](int i) { return a[static_cast<size_t>(i) * n + i]; };
  std::stable_sort(order.begin(), order.end(), [&](int x, int y) { return diag(x) > diag(y); });
  SymmetricEigenResult result;
  result.n = n;
  result.values.resize(n);
  result.vectors.resize(a.size());
  for (int i = 0; i < n; ++i) {
    result.values[i] = diag(order[i]);
    double* row = result.vectors.data() + static_cast<size_t>(i) * n;
    std::copy_n(v.data() + static_cast<size_t>(order[i]) * n, n, row);
    Orient(row, n);
  }
  return result;
}

// ---------------------------------------------------------------------------------------------
// GramAccumulator

GramAccumulator::GramAccumulator(int n)
    : n_(n), padded_(PadToTile(n)), sum_(static_cast<size_t>(padded_) * padded_, 0.0) {}

void GramAccumulator::Add(const float* rows, int64_t count, int64_t stride) {
  AddRows(rows, count, stride);
}

void GramAccumulator::Add(const double* rows, int64_t count, int64_t stride) {
  AddRows(rows, count, stride);
}

template <typename T>
void GramAccumulator::AddRows(const T* rows, int64_t count, int64_t stride) {
  std::vector<double> buffer(static_cast<size_t>(kBlockRows) * padded_, 0.0);
  for (int64_t start = 0; start < count; start += kBlockRows) {
    const int block = static_cast<int>(std::min<int64_t>(kBlockRows, count - start));
    Buffer(rows + start * stride, block, stride, n_, padded_, buffer);
    for (int i0 = 0; i0 < padded_; i0 += kTileRows) {
      // Tiles holding an element on or above the diagonal: j0 + kTileCols > i0.
      for (int j0 = i0 / kTileCols * kTileCols; j0 < padded_; j0 += kTileCols) {
        AccumulateTile(buffer.data() + i0, buffer.data() + j0, padded_, padded_, block,
                       sum_.data() + static_cast<size_t>(i0) * padded_ + j0, padded_);
      }
    }
  }
  count_ += count;
}

std::vector<double> GramAccumulator::Matrix() const {
  std::vector<double> out(static_cast<size_t>(n_) * n_);
  for (int i = 0; i < n_; ++i) {
    for (int j = i; j < n_; ++j) {
      const double x = sum_[static_cast<size_t>(i) * padded_ + j];
      out[static_cast<size_t>(i) * n_ + j] = x;
      out[static_cast<size_t>(j) * n_ + i] = x;
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// CrossAccumulator

CrossAccumulator::CrossAccumulator(int n, int m)
    : n_(n),
      m_(m),
      padded_n_(PadToTile(n)),
      padded_m_(PadToTile(m)),
      sum_(static_cast<size_t>(padded_n_) * padded_m_, 0.0) {}

void CrossAccumulator::Add(const float* x, int64_t x_stride, const float* y, int64_t y_stride,
                           int64_t count) {
  std::vector<double> x_buffer(static_cast<size_t>(kBlockRows) * padded_n_, 0.0);
  std::vector<double> y_buffer(static_cast<size_t>(kBlockRows) * padded_m_, 0.0);
  for (int64_t start = 0; start < count; start += kBlockRows) {
    const int block = static_cast<int>(std::min<int64_t>(kBlockRows, count - start));
    Buffer(x + start * x_stride, block, x_stride, n_, padded_n_, x_buffer);
    Buffer(y + start * y_stride, block, y_stride, m_, padded_m_, y_buffer);
    for (int64_t k = 0; k < static_cast<int64_t>(block) * padded_m_; ++k) {
      y_sum_squares_ += y_buffer[k] * y_buffer[k];
    }
    for (int i0 = 0; i0 < padded_n_; i0 += kTileRows) {
      for (int j0 = 0; j0 < padded_m_; j0 += kTileCols) {
        AccumulateTile(x_buffer.data() + i0, y_buffer.data() + j0, padded_n_, padded_m_, block,
                       sum_.data() + static_cast<size_t>(i0) * padded_m_ + j0, padded_m_);
      }
    }
  }
  count_ += count;
}

std::vector<double> CrossAccumulator::Matrix() const {
  std::vector<double> out(static_cast<size_t>(n_) * m_);
  for (int i = 0; i < n_; ++i) {
    std::copy_n(sum_.data() + static_cast<size_t>(i) * padded_m_, m_,
                out.data() + static_cast<size_t>(i) * m_);
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
// Least squares

namespace {

absl::Status CheckStats(const LeastSquaresStats& stats, const char* who) {
  if (stats.n < 1 || stats.m < 1 || stats.xtx.size() != static_cast<size_t>(stats.n) * stats.n ||
      stats.xty.size() != static_cast<size_t>(stats.n) * stats.m) {
    return absl::InvalidArgumentError(absl::StrCat(who, ": n = ", stats.n, ", m = ", stats.m,
                                                   " with XᵀX of ", stats.xtx.size(),
                                                   " and XᵀY of ", stats.xty.size(), " entries"));
  }
  return absl::OkStatus();
}

// The lower Cholesky factor L (row-major [n, n], upper part zero) of the symmetric part of
// xtx + λI. FailedPrecondition when a pivot is not above n·ε times its diagonal entry.
absl::StatusOr<std::vector<double>> Cholesky(std::span<const double> xtx, int n, double lambda) {
  std::vector<double> l(static_cast<size_t>(n) * n, 0.0);
  for (int j = 0; j < n; ++j) {
    const double* lj = l.data() + static_cast<size_t>(j) * n;
    for (int i = j; i < n; ++i) {
      double* li = l.data() + static_cast<size_t>(i) * n;
      double x = 0.5 * (xtx[static_cast<size_t>(i) * n + j] + xtx[static_cast<size_t>(j) * n + i]);
      if (i == j) x += lambda;
      const double diagonal = x;
      for (int k = 0; k < j; ++k) x -= li[k] * lj[k];
      if (i == j) {
        if (!(x > n * DBL_EPSILON * diagonal) || !std::isfinite(x)) {
          return absl::FailedPreconditionError(
              absl::StrCat("RidgeSolve: XᵀX + λI is not positive definite (pivot ", j, " is ", x,
                           " of diagonal ", diagonal, ")"));
        }
        li[j] = std::sqrt(x);
      } else {
        li[j] = x / lj[j];
      }
    }
  }
  return l;
}

}  // namespace

absl::StatusOr<std::vector<double>> RidgeSolve(const LeastSquaresStats& stats, double lambda) {
  PDSERVE_RETURN_IF_ERROR(CheckStats(stats, "RidgeSolve"));
  if (!(lambda >= 0.0) || !std::isfinite(lambda)) {
    return absl::InvalidArgumentError(absl::StrCat("RidgeSolve: λ = ", lambda));
  }
  const int n = stats.n;
  const int m = stats.m;
  PDSERVE_ASSIGN_OR_RETURN(std::vector<double> l, Cholesky(stats.xtx, n, lambda));
  // Forward substitution L·Z = XᵀY, then back substitution Lᵀ·W = Z, all m columns at once.
  std::vector<double> w(stats.xty.begin(), stats.xty.end());
  for (int i = 0; i < n; ++i) {
    double* wi = w.data() + static_cast<size_t>(i) * m;
    for (int k = 0; k < i; ++k) {
      const double lik = l[static_cast<size_t>(i) * n + k];
      const double* wk = w.data() + static_cast<size_t>(k) * m;
      for (int c = 0; c < m; ++c) wi[c] -= lik * wk[c];
    }
    const double inv = 1.0 / l[static_cast<size_t>(i) * n + i];
    for (int c = 0; c < m; ++c) wi[c] *= inv;
  }
  for (int i = n - 1; i >= 0; --i) {
    double* wi = w.data() + static_cast<size_t>(i) * m;
    for (int k = i + 1; k < n; ++k) {
      const double lki = l[static_cast<size_t>(k) * n + i];
      const double* wk = w.data() + static_cast<size_t>(k) * m;
      for (int c = 0; c < m; ++c) wi[c] -= lki * wk[c];
    }
    const double inv = 1.0 / l[static_cast<size_t>(i) * n + i];
    for (int c = 0; c < m; ++c) wi[c] *= inv;
  }
  return w;
}

absl::StatusOr<double> MeanSquaredError(const LeastSquaresStats& stats, std::span<const double> w) {
  PDSERVE_RETURN_IF_ERROR(CheckStats(stats, "MeanSquaredError"));
  const int n = stats.n;
  const int m = stats.m;
  if (w.size() != static_cast<size_t>(n) * m || stats.count < 1) {
    return absl::InvalidArgumentError(absl::StrCat("MeanSquaredError: W of ", w.size(),
                                                   " entries for [", n, ", ", m, "], count ",
                                                   stats.count));
  }
  // tr(WᵀAW) = Σ_i w_i·(AW)_i, with (AW)_i = Σ_k A[i][k]·w_k (w_i the rows of W).
  double quadratic = 0.0;
  double cross = 0.0;
  std::vector<double> aw_row(m);
  for (int i = 0; i < n; ++i) {
    std::fill(aw_row.begin(), aw_row.end(), 0.0);
    for (int k = 0; k < n; ++k) {
      const double aik = stats.xtx[static_cast<size_t>(i) * n + k];
      const double* wk = w.data() + static_cast<size_t>(k) * m;
      for (int c = 0; c < m; ++c) aw_row[c] += aik * wk[c];
    }
    const double* wi = w.data() + static_cast<size_t>(i) * m;
    const double* bi = stats.xty.data() + static_cast<size_t>(i) * m;
    for (int c = 0; c < m; ++c) {
      quadratic += wi[c] * aw_row[c];
      cross += wi[c] * bi[c];
    }
  }
  const double sse = quadratic - 2.0 * cross + stats.y_sum_squares;
  return std::max(0.0, sse) / (static_cast<double>(stats.count) * m);
}

}  // namespace pdserve
