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
    case DType::kQ8_0:
      return "q8_0";
    case DType::kQ4_0:
      return "q4_0";
    case DType::kQ4_1:
      return "q4_1";
    case DType::kQ5_0:
      return "q5_0";
    case DType::kQ5_1:
      return "q5_1";
    case DType::kQ4_K:
      return "q4_k";
    case DType::kQ5_K:
      return "q5_k";
    case DType::kQ6_K:
      return "q6_k";
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
