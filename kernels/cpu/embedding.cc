#include "kernels/embedding.h"

namespace pdserve::kernels {

void EmbeddingLookup(const Tensor& table, const int32_t* ids, int64_t n, float* out) {
  const int64_t dim = table.cols();
  for (int64_t i = 0; i < n; ++i) RowAsFloat(table, ids[i], out + i * dim);
}

}  // namespace pdserve::kernels
