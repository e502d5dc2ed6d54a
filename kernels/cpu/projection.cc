#include "kernels/projection.h"

#include <algorithm>
#include <utility>

#include "kernels/matmul.h"

namespace pdserve::kernels {

Projection::Projection(std::vector<Tensor> parts, bool release_source, ThreadPool* pool) {
  for (const Tensor& part : parts) rows_ += part.rows();
  cols_ = parts.empty() ? 0 : parts.front().cols();
  const bool quantized_stack =
      parts.size() > 1 && std::all_of(parts.begin(), parts.end(), [](const Tensor& part) {
        return IsQuantized(part.dtype) && PanelMatrix::Takes(part.dtype);
      });
  if ((parts.size() == 1 && PanelMatrix::Takes(parts.front().dtype)) || quantized_stack) {
    for (const Tensor& part : parts) {
      panels_.emplace_back(part, ActiveSimdLevel(), Bf16DotActive(), release_source, pool);
    }
  } else {
    parts_ = std::move(parts);
  }
}

void Matmul(ThreadPool& pool, const float* x, int64_t n, const Projection& w, float* y,
            std::span<float> workspace) {
  if (w.panels_.size() == 1) {
    Matmul(pool, x, n, w.panels_.front(), y, w.rows_, workspace);
  } else if (w.packed()) {
    Matmul(pool, x, n, std::span<const PanelMatrix>(w.panels_), y, w.rows_, workspace);
  } else {
    Matmul(pool, x, n, std::span<const Tensor>(w.parts_), y, workspace);
  }
}

}  // namespace pdserve::kernels
