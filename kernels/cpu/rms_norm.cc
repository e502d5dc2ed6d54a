#include "kernels/rms_norm.h"

#include <immintrin.h>

#include <cmath>

namespace pdserve::kernels {
namespace {

float SumOfSquares(const float* x, int64_t dim) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= dim; i += 16) {
    __m256 a = _mm256_loadu_ps(x + i), b = _mm256_loadu_ps(x + i + 8);
    acc0 = _mm256_fmadd_ps(a, a, acc0);
    acc1 = _mm256_fmadd_ps(b, b, acc1);
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_add_ps(acc0, acc1));
  float sum = 0.0f;
  for (float v : lanes) sum += v;
  for (; i < dim; ++i) sum += x[i] * x[i];
  return sum;
}

}  // namespace

void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * dim;
    float* dst = out + r * dim;
    float scale = 1.0f / std::sqrt(SumOfSquares(row, dim) / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) dst[i] = weight[i] * (scale * row[i]);
  }
}

void RmsNormReference(const float* x, const float* weight, int64_t n, int64_t dim, float eps,
                      float* out) {
  for (int64_t r = 0; r < n; ++r) {
    const float* row = x + r * dim;
    float sum = 0.0f;
    for (int64_t i = 0; i < dim; ++i) sum += row[i] * row[i];
    float scale = 1.0f / std::sqrt(sum / static_cast<float>(dim) + eps);
    for (int64_t i = 0; i < dim; ++i) out[r * dim + i] = weight[i] * (scale * row[i]);
  }
}

}  // namespace pdserve::kernels
