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

Tensor WeightFormat::Stack(const std::vector<Tensor>& parts) const {
  std::vector<Tensor> applied;
  for (const Tensor& part : parts) applied.push_back(Apply(part));
  for (const Tensor& part : applied) {
    if (part.dtype != applied.front().dtype) {
      for (Tensor& p : applied) p = ConvertTensor(p, dtype);
      break;
    }
  }
  return ConcatRows(applied);
}

}  // namespace pdserve
