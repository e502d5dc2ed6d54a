#include "core/formats/gguf_writer.h"

#include <algorithm>
#include <fstream>

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

constexpr uint32_t kVersion = 3;
constexpr uint64_t kAlignment = kGgufDefaultAlignment;

template <typename T>
void Put(std::string& out, T value) {
  out.append(reinterpret_cast<const char*>(&value), sizeof(T));
}

void PutString(std::string& out, const std::string& s) {
  Put<uint64_t>(out, s.size());
  out.append(s);
}

void PutValue(std::string& out, const GgufValue& v) {
  Put<uint32_t>(out, static_cast<uint32_t>(v.type()));
  if (v.is_array()) {
    Put<uint32_t>(out, static_cast<uint32_t>(v.element_type()));
    Put<uint64_t>(out, v.size());
  }
  if (v.element_type() == GgufType::kString) {
    if (const std::string* s = v.AsString()) {
      PutString(out, *s);
    } else {
      for (const std::string& s : *v.AsStringArray()) PutString(out, s);
    }
    return;
  }
  const std::vector<uint8_t>& raw = v.raw_elements();
  out.append(reinterpret_cast<const char*>(raw.data()), raw.size());
}

uint64_t AlignUp(uint64_t n) { return (n + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

absl::Status GgufWriter::SetMetadata(std::string key, GgufValue value) {
  if (key.empty() || key.size() > kGgufMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat("gguf writer: metadata key of ", key.size(),
                                                   " bytes (1 to ", kGgufMaxKeyBytes, " allowed)"));
  }
  if (key == "general.alignment") {
    return absl::InvalidArgumentError("gguf writer: general.alignment is fixed at 32");
  }
  for (auto& [k, v] : metadata_) {
    if (k == key) {
      v = std::move(value);
      return absl::OkStatus();
    }
  }
  metadata_.emplace_back(std::move(key), std::move(value));
  return absl::OkStatus();
}

void GgufWriter::RemoveMetadata(const std::string& key) {
  std::erase_if(metadata_, [&key](const auto& kv) { return kv.first == key; });
}

absl::Status GgufWriter::AddTensor(std::string name, Tensor tensor) {
  if (name.empty() || name.size() > kGgufMaxTensorNameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("gguf writer: tensor name '", name,
                                                   "' must have 1 to ", kGgufMaxTensorNameBytes,
                                                   " bytes"));
  }
  if (tensor.empty() || tensor.shape.empty() || tensor.shape.size() > kGgufMaxDims ||
      std::any_of(tensor.shape.begin(), tensor.shape.end(), [](int64_t d) { return d < 1; })) {
    return absl::InvalidArgumentError(absl::StrCat("gguf writer: tensor ", name, " ",
                                                   DescribeTensor(tensor),
                                                   " is empty or has an unsupported shape"));
  }
  for (const auto& [n, t] : tensors_) {
    if (n == name) {
      return absl::InvalidArgumentError(absl::StrCat("gguf writer: tensor ", name, " added twice"));
    }
  }
  tensors_.emplace_back(std::move(name), std::move(tensor));
  return absl::OkStatus();
}

std::string GgufWriter::EncodeHeader() const {
  std::string out = "GGUF";
  Put<uint32_t>(out, kVersion);
  Put<uint64_t>(out, tensors_.size());
  Put<uint64_t>(out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    PutString(out, key);
    PutValue(out, value);
  }
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors_) {
    PutString(out, name);
    Put<uint32_t>(out, static_cast<uint32_t>(tensor.shape.size()));
    for (auto it = tensor.shape.rbegin(); it != tensor.shape.rend(); ++it) Put<int64_t>(out, *it);
    Put<uint32_t>(out, static_cast<uint32_t>(GgmlTypeOf(tensor.dtype)));
    Put<uint64_t>(out, offset);
    offset = AlignUp(offset + tensor.NumBytes());
  }
  out.resize(AlignUp(out.size()), '\0');
  return out;
}

absl::Status GgufWriter::WriteFile(const std::string& path) const {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) {
    return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  }
  const std::string header = EncodeHeader();
  out.write(header.data(), static_cast<std::streamsize>(header.size()));
  static constexpr char kZeros[kAlignment] = {};
  for (const auto& [name, tensor] : tensors_) {
    const uint64_t bytes = tensor.NumBytes();
    out.write(static_cast<const char*>(tensor.data), static_cast<std::streamsize>(bytes));
    out.write(kZeros, static_cast<std::streamsize>(AlignUp(bytes) - bytes));
  }
  out.close();
  if (!out) {
    return absl::InternalError(absl::StrCat("failed writing '", path, "'"));
  }
  return absl::OkStatus();
}

}  // namespace pdserve
