// Tensor: a typed, row-major, read-only view of weight bytes plus a shared owner that keeps the
// bytes alive (a memory-mapped file or an owned buffer). Copying a Tensor shares the bytes.
// Thread-safe for concurrent reads.
#ifndef PDSERVE_CORE_TENSOR_TENSOR_H_
#define PDSERVE_CORE_TENSOR_TENSOR_H_

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor/dtype.h"

namespace pdserve {

struct Tensor {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;  // outermost first; a matrix is [rows, cols], rows contiguous
  const void* data = nullptr;
  std::shared_ptr<const void> owner;

  int64_t NumElements() const {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    return n;
  }
  // Whole blocks for a quantized dtype (loaders check that rows are whole blocks).
  size_t NumBytes() const {
    return static_cast<size_t>(NumElements() / BlockElements(dtype)) * BlockBytes(dtype);
  }
  int64_t rows() const { return shape.empty() ? 0 : shape.front(); }
  int64_t cols() const { return shape.empty() ? 0 : shape.back(); }
  bool empty() const { return data == nullptr; }

  template <typename T>
  const T* as() const {
    return static_cast<const T*>(data);
  }
};

// Returns a tensor that owns a copy of `values` with the given shape (dtype f32).
Tensor MakeF32Tensor(std::vector<float> values, std::vector<int64_t> shape);

// An uninitialized tensor of `dtype` and `shape` in memory of its own (like CopyTensor's), and its
// bytes, which the caller fills before sharing the tensor.
std::pair<Tensor, uint8_t*> NewTensor(DType dtype, std::vector<int64_t> shape);

// Converts any tensor to an owned f32 tensor of the same shape (quantized ones dequantized).
Tensor ToF32(const Tensor& tensor);

// Converts `tensor` to `dtype` (round to nearest even; quantized sources are dequantized first;
// quantized targets by quant::QuantizeRow, ggml's reference quantization) into memory like
// CopyTensor's; returns it unchanged when already `dtype`. A quantized `dtype` requires rows of
// whole blocks and finite values.
Tensor ConvertTensor(const Tensor& tensor, DType dtype);

// `tensor` in `dtype` in memory of its own: ConvertTensor, then CopyTensor when the conversion
// had nothing to do (so the result never shares `tensor`'s bytes, e.g. a file mapping).
Tensor ConvertOwned(const Tensor& tensor, DType dtype);

// An owned copy of `tensor` in memory of its own: 2 MiB aligned and advised into transparent huge
// pages when large (streaming it then costs fewer TLB misses than a file mapping would).
Tensor CopyTensor(const Tensor& tensor);

// Advises the kernel that `tensor`'s bytes will not be read again soon (MADV_PAGEOUT on the whole
// pages inside them): pages of a file mapping leave the resident set and are re-read from the
// file if touched again. Contents never change. For sources an engine has copied.
void ReleaseResidentPages(const Tensor& tensor);

// Stacks matrices of one dtype and column count row-wise into one owned [Σ rows, cols] tensor
// (memory like CopyTensor's).
// Requires a non-empty list of matching matrices.
Tensor ConcatRows(const std::vector<Tensor>& parts);

// Reads element `index` of any dtype as float (for quantized ones, dequantizes its whole block:
// use RowAsFloat to read many).
float ElementAsFloat(const Tensor& tensor, int64_t index);

// dst[c] = element (row, c) as float for c < cols(); `tensor` is a matrix of any dtype.
void RowAsFloat(const Tensor& tensor, int64_t row, float* dst);

// "[768, 288] bf16".
std::string DescribeTensor(const Tensor& tensor);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TENSOR_TENSOR_H_
