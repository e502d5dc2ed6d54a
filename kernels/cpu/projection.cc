#include "kernels/projection.h"

#include <utility>

#include "kernels/matmul.h"

namespace pdserve::kernels {

Projection::Projection(std::vector<Tensor> parts, bool release_source) {
  for (const Tensor& part : parts) rows_ += part.rows();
  cols_ = parts.empty() ? 0 : parts.front().cols();
  if (parts.size() == 1 && PanelMatrix::Takes(parts.front().dtype)) {
    panels_ = PanelMatrix(parts.front(), ActiveSimdLevel(), Bf16DotActive(), release_source);
  } else {
    parts_ = std::move(parts);
  }
}

void Matmul(ThreadPool& pool, const float* x, int64_t n, const Projection& w, float* y,
            std::span<float> workspace) {
  if (w.packed()) {
    Matmul(pool, x, n, w.panels_, y, w.rows_, workspace);
  } else {
    Matmul(pool, x, n, std::span<const Tensor>(w.parts_), y, workspace);
  }
}

}  // namespace pdserve::kernels
