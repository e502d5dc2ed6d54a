#include "core/tensor/tensor.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/tensor/float16.h"

namespace pdserve {
namespace {

template <typename T>
Tensor OwnedTensor(std::vector<T> values, DType dtype, std::vector<int64_t> shape) {
  auto storage = std::make_shared<std::vector<T>>(std::move(values));
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data = storage->data();
  t.owner = std::move(storage);
  return t;
}

}  // namespace

Tensor MakeF32Tensor(std::vector<float> values, std::vector<int64_t> shape) {
  return OwnedTensor(std::move(values), DType::kF32, std::move(shape));
}

float ElementAsFloat(const Tensor& tensor, int64_t index) {
  switch (tensor.dtype) {
    case DType::kF32:
      return tensor.as<float>()[index];
    case DType::kF16:
      return F16ToF32(tensor.as<uint16_t>()[index]);
    case DType::kBF16:
      return BF16ToF32(tensor.as<uint16_t>()[index]);
  }
  return 0.0f;
}

Tensor ToF32(const Tensor& tensor) { return ConvertTensor(tensor, DType::kF32); }

Tensor ConvertTensor(const Tensor& tensor, DType dtype) {
  if (tensor.dtype == dtype) {
    return tensor;
  }
  const int64_t n = tensor.NumElements();
  if (dtype == DType::kF32) {
    std::vector<float> out(n);
    for (int64_t i = 0; i < n; ++i) out[i] = ElementAsFloat(tensor, i);
    return OwnedTensor(std::move(out), dtype, tensor.shape);
  }
  std::vector<uint16_t> out(n);
  for (int64_t i = 0; i < n; ++i) {
    float v = ElementAsFloat(tensor, i);
    out[i] = dtype == DType::kF16 ? F32ToF16(v) : F32ToBF16(v);
  }
  return OwnedTensor(std::move(out), dtype, tensor.shape);
}

Tensor ConcatRows(const std::vector<Tensor>& parts) {
  size_t bytes = 0;
  int64_t rows = 0;
  for (const Tensor& part : parts) {
    bytes += part.NumBytes();
    rows += part.rows();
  }
  auto storage = std::make_shared<std::vector<uint8_t>>(bytes);
  size_t offset = 0;
  for (const Tensor& part : parts) {
    std::memcpy(storage->data() + offset, part.data, part.NumBytes());
    offset += part.NumBytes();
  }
  Tensor out;
  out.dtype = parts.front().dtype;
  out.shape = {rows, parts.front().cols()};
  out.data = storage->data();
  out.owner = std::move(storage);
  return out;
}

std::string DescribeTensor(const Tensor& tensor) {
  return absl::StrCat("[", absl::StrJoin(tensor.shape, ", "), "] ", DTypeName(tensor.dtype));
}

}  // namespace pdserve
