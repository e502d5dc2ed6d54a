// Element types of weights and activations. Values are stored in files we write: DO NOT RENUMBER.
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
};

constexpr size_t DTypeSize(DType dtype) { return dtype == DType::kF32 ? 4 : 2; }

// "f32", "f16", "bf16".
const char* DTypeName(DType dtype);

// Parses "f32", "f16" or "bf16" (case-insensitive); InvalidArgument names the accepted values.
absl::StatusOr<DType> ParseDType(std::string_view name);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TENSOR_DTYPE_H_
