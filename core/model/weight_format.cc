#include "core/model/weight_format.h"

namespace pdserve {

Tensor WeightFormat::Apply(const Tensor& t) const {
  if (keep_quantized && IsQuantized(t.dtype)) return t;
  return ConvertTensor(t, dtype);
}

Tensor WeightFormat::ApplyReleasing(const Tensor& t) const {
  Tensor applied = Apply(t);
  if (applied.data != t.data) ReleaseResidentPages(t);
  return applied;
}

Tensor WeightFormat::ApplyOwned(const Tensor& t) const {
  Tensor copy = keep_quantized && IsQuantized(t.dtype) ? CopyTensor(t) : ConvertOwned(t, dtype);
  if (copy.data != t.data) ReleaseResidentPages(t);
  return copy;
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
  for (const Tensor& part : parts) ReleaseResidentPages(part);  // read, and now copied
  return stacked;
}

}  // namespace pdserve
