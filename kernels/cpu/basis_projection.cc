#include "kernels/basis_projection.h"

#include "kernels/cpu/gemv_kernels.h"

namespace pdserve::kernels {

// The batched GEMV with one x row: the basis rows are its weight rows.
void ProjectRows(const float* basis, int rank, int dim, const float* x, float* out) {
  ActiveBatchGemvRows({.x = x,
                       .ldx = dim,
                       .n = 1,
                       .w = basis,
                       .w_dtype = DType::kF32,
                       .ldw = dim,
                       .rows = rank,
                       .cols = dim,
                       .y = out,
                       .ldy = rank,
                       .accumulate = false,
                       .prefetch = nullptr,
                       .prefetch_bytes = 0});
}

}  // namespace pdserve::kernels
