#include "core/model/weight_format.h"

namespace pdserve {

Tensor WeightFormat::Apply(const Tensor& t) const {
  if (keep_quantized && IsQuantized(t.dtype)) return t;
  return ConvertTensor(t, dtype);
}

Tensor WeightFormat::ApplyOwned(const Tensor& t) const {
  if (keep_quantized && IsQuantized(t.dtype)) {
    Tensor copy = CopyTensor(t);
    ReleaseResidentPages(t);
    return copy;
  }
  return ConvertOwned(t, dtype);
}

int64_t StackedWeights::rows() const {
  int64_t rows = 0;
  for (const Tensor& part : parts) rows += part.rows();
  return rows;
}

StackedWeights WeightFormat::Stack(const std::vector<Tensor>& parts) const {
  std::vector<Tensor> applied;
  bool mixed = false;
  for (const Tensor& part : parts) {
    applied.push_back(Apply(part));
    mixed |= applied.back().dtype != applied.front().dtype;
  }
  if (mixed) {  // only kept quantized matrices can differ: each its own part
    for (Tensor& part : applied) part = ApplyOwned(part);
    return StackedWeights{std::move(applied)};
  }
  StackedWeights stacked{{ConcatRows(applied)}};
  for (const Tensor& part : applied) {
    if (IsQuantized(part.dtype)) ReleaseResidentPages(part);  // stored ones, now copied
  }
  return stacked;
}

}  // namespace pdserve
