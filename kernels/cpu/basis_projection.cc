#include "kernels/basis_projection.h"

namespace pdserve::kernels {

void ProjectRows(const float* basis, int rank, int dim, const float* x, float* out) {
  for (int i = 0; i < rank; ++i) {
    const float* row = basis + static_cast<long>(i) * dim;
    float sum = 0.0f;
    for (int c = 0; c < dim; ++c) sum += row[c] * x[c];
    out[i] = sum;
  }
}

}  // namespace pdserve::kernels
