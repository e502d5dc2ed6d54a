// Element types of weights and activations. Values are stored in files we write: DO NOT RENUMBER.
//
// f32, f16 and bf16 are plain element types. The quantized types are ggml's block formats
// (core/tensor/quant_blocks.h has their layouts): a row is a sequence of blocks, each holding
// BlockElements(dtype) consecutive elements in BlockBytes(dtype) bytes, so a row's length must be
// a multiple of the block and a tensor's bytes are rows · RowBytes(dtype, cols).
#ifndef PDSERVE_CORE_TENSOR_DTYPE_H_
#define PDSERVE_CORE_TENSOR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace pdserve {

enum class DType : uint8_t {
  kF32 = 0,
  kF16 = 1,
  kBF16 = 2,
  kQ8_0 = 3,
  kQ4_0 = 4,
  kQ4_1 = 5,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ4_K = 8,
  kQ5_K = 9,
  kQ6_K = 10,
};

constexpr bool IsQuantized(DType dtype) { return static_cast<uint8_t>(dtype) >= 3; }

// Elements per block: 1 for f32/f16/bf16, 32 for Q8_0 … Q5_1, 256 for the K-quants.
constexpr int64_t BlockElements(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
      return 1;
    case DType::kQ8_0:
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
      return 32;
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
      return 256;
  }
  return 1;
}

// Bytes per block.
constexpr size_t BlockBytes(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return 4;
    case DType::kF16:
    case DType::kBF16:
      return 2;
    case DType::kQ8_0:
      return 34;
    case DType::kQ4_0:
      return 18;
    case DType::kQ4_1:
      return 20;
    case DType::kQ5_0:
      return 22;
    case DType::kQ5_1:
      return 24;
    case DType::kQ4_K:
      return 144;
    case DType::kQ5_K:
      return 176;
    case DType::kQ6_K:
      return 210;
  }
  return 4;
}

// Bytes of one element of a plain type (f32 4, f16/bf16 2). Requires !IsQuantized(dtype).
constexpr size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

// Bytes of a row of `cols` elements. Requires cols % BlockElements(dtype) == 0.
constexpr size_t RowBytes(DType dtype, int64_t cols) {
  return static_cast<size_t>(cols / BlockElements(dtype)) * BlockBytes(dtype);
}

// "f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k".
const char* DTypeName(DType dtype);

// Parses "f32", "f16" or "bf16" (case-insensitive); InvalidArgument names the accepted values.
// The quantized types are not engine dtypes to convert to: files bring them.
absl::StatusOr<DType> ParseDType(std::string_view name);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TENSOR_DTYPE_H_
