#include "kernels/embedding.h"

namespace pdserve::kernels {

void EmbeddingLookup(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t dim = table.cols();
  for (int64_t i = 0; i < n; ++i) {
    const int64_t base = static_cast<int64_t>(ids[i]) * dim;
    for (int64_t c = 0; c < dim; ++c) out[i * dim + c] = ElementAsFloat(table, base + c);
  }
}

}  // namespace pdserve::kernels
