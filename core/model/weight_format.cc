#include "core/model/weight_format.h"

namespace pdserve {

Tensor WeightFormat::Apply(const Tensor& t) const {
  if (keep_quantized && IsQuantized(t.dtype)) return t;
  return ConvertTensor(t, dtype);
}

Tensor WeightFormat::ApplyOwned(const Tensor& t) const {
  if (keep_quantized && IsQuantized(t.dtype)) return t;
  return ConvertOwned(t, dtype);
}

int64_t StackedWeights::rows() const {
  int64_t rows = 0;
  for (const Tensor& part : parts) rows += part.rows();
  return rows;
}

StackedWeights WeightFormat::Stack(const std::vector<Tensor>& parts) const {
  std::vector<Tensor> applied;
  for (const Tensor& part : parts) applied.push_back(Apply(part));
  for (const Tensor& part : applied) {
    if (part.dtype != applied.front().dtype) return StackedWeights{std::move(applied)};
  }
  return StackedWeights{{ConcatRows(applied)}};
}

}  // namespace pdserve
