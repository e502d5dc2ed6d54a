#include "core/tensor/dtype.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pdserve {

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "f32";
    case DType::kF16:
      return "f16";
    case DType::kBF16:
      return "bf16";
  }
  return "unknown";
}

absl::StatusOr<DType> ParseDType(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "f32" || lower == "fp32" || lower == "float32") return DType::kF32;
  if (lower == "f16" || lower == "fp16" || lower == "float16") return DType::kF16;
  if (lower == "bf16" || lower == "bfloat16") return DType::kBF16;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown dtype '", std::string(name), "' (expected f32, f16 or bf16)"));
}

}  // namespace pdserve
