#include "kernels/basis_projection.h"

#include <immintrin.h>

namespace pdserve::kernels {
namespace {

// The four sums of each accumulator's lanes, in order.
inline __m128 Sums4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 s = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
}

// out[0, 4) for basis rows row[0, 4): each x vector loaded once for the four rows.
void FourRows(const float* const row[4], int dim, const float* x, float* out) {
  __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(),
                   _mm256_setzero_ps()};
  int c = 0;
  for (; c + 8 <= dim; c += 8) {
    const __m256 xv = _mm256_loadu_ps(x + c);
    for (int j = 0; j < 4; ++j) acc[j] = _mm256_fmadd_ps(_mm256_loadu_ps(row[j] + c), xv, acc[j]);
  }
  _mm_storeu_ps(out, Sums4(acc[0], acc[1], acc[2], acc[3]));
  for (; c < dim; ++c) {
    for (int j = 0; j < 4; ++j) out[j] += row[j][c] * x[c];
  }
}

}  // namespace

void ProjectRows(const float* basis, int rank, int dim, const float* x, float* out) {
  int i = 0;
  for (; i + 4 <= rank; i += 4) {
    const float* row[4];
    for (int j = 0; j < 4; ++j) row[j] = basis + static_cast<long>(i + j) * dim;
    FourRows(row, dim, x, out + i);
  }
  if (i < rank) {  // the last 1 to 3 rows, row i standing in for the missing ones
    const float* row[4];
    for (int j = 0; j < 4; ++j)
      row[j] = basis + static_cast<long>(i + (i + j < rank ? j : 0)) * dim;
    float sums[4];
    FourRows(row, dim, x, sums);
    for (int j = 0; i + j < rank; ++j) out[i + j] = sums[j];
  }
}

}  // namespace pdserve::kernels
