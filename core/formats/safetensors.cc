#include "core/formats/safetensors.h"

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/base/byte_reader.h"
#include "core/base/status_macros.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

using Json = nlohmann::json;

constexpr const char* kMetadataKey = "__metadata__";
constexpr int kMaxJsonDepth = 64;  // real headers nest 3 deep; bounds the parser's memory

struct Entry {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;
  uint64_t end = 0;
};

absl::Status Error(const std::string& path, absl::string_view message) {
  return absl::InvalidArgumentError(absl::StrCat(path, ": ", message));
}

std::optional<DType> ParseSafetensorsDType(const std::string& name) {
  if (name == "F32") return DType::kF32;
  if (name == "F16") return DType::kF16;
  if (name == "BF16") return DType::kBF16;
  return std::nullopt;
}

// Rejects JSON nested deeper than kMaxJsonDepth before the parser allocates for it.
bool NestingWithinLimit(std::string_view text) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') {
        ++i;
      } else if (c == '"') {
        in_string = false;
      }
    } else if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > kMaxJsonDepth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

// Reads a non-negative JSON integer no larger than `max`.
std::optional<uint64_t> ReadUnsigned(const Json& value, uint64_t max) {
  if (!value.is_number_unsigned()) return std::nullopt;
  const uint64_t v = value.get<uint64_t>();
  if (v > max) return std::nullopt;
  return v;
}

absl::Status ParseShape(const Json& json, const std::string& where, Entry& entry) {
  if (!json.is_array()) return absl::InvalidArgumentError(where + ": shape is not an array");
  uint64_t elements = 1;
  for (const Json& dim : json) {
    std::optional<uint64_t> d = ReadUnsigned(dim, std::numeric_limits<int64_t>::max());
    if (!d) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": shape has a dimension that is not a non-negative integer"));
    }
    if (__builtin_mul_overflow(elements, *d, &elements) ||
        elements > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": shape overflows"));
    }
    entry.shape.push_back(static_cast<int64_t>(*d));
  }
  return absl::OkStatus();
}

// Validates one tensor entry against a data section of `data_size` bytes.
absl::StatusOr<Entry> ParseEntry(const std::string& name, const Json& json, uint64_t data_size) {
  const std::string where = absl::StrCat("tensor '", name, "'");
  if (!json.is_object()) return absl::InvalidArgumentError(where + " is not a JSON object");
  Entry entry;
  entry.name = name;
  auto dtype_it = json.find("dtype");
  if (dtype_it == json.end() || !dtype_it->is_string()) {
    return absl::InvalidArgumentError(where + ": missing string \"dtype\"");
  }
  const std::string dtype_name = dtype_it->get<std::string>();
  std::optional<DType> dtype = ParseSafetensorsDType(dtype_name);
  if (!dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": unsupported dtype '", dtype_name, "' (supported: F32, F16, BF16)"));
  }
  entry.dtype = *dtype;
  auto shape_it = json.find("shape");
  if (shape_it == json.end()) return absl::InvalidArgumentError(where + ": missing \"shape\"");
  PDSERVE_RETURN_IF_ERROR(ParseShape(*shape_it, where, entry));
  auto offsets_it = json.find("data_offsets");
  if (offsets_it == json.end() || !offsets_it->is_array() || offsets_it->size() != 2) {
    return absl::InvalidArgumentError(where + ": missing \"data_offsets\" [begin, end]");
  }
  std::optional<uint64_t> begin = ReadUnsigned((*offsets_it)[0], data_size);
  std::optional<uint64_t> end = ReadUnsigned((*offsets_it)[1], data_size);
  if (!begin || !end || *begin > *end) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": data_offsets are not a range inside the data section (", data_size, " bytes)"));
  }
  entry.begin = *begin;
  entry.end = *end;
  Tensor probe;
  probe.dtype = entry.dtype;
  probe.shape = entry.shape;
  // NumElements() fits in int64 (checked above); the byte count fits once it is <= data_size.
  const uint64_t elements = static_cast<uint64_t>(probe.NumElements());
  const uint64_t expected = elements * DTypeSize(entry.dtype);
  if (elements > data_size || expected != entry.end - entry.begin) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": data_offsets span ", entry.end - entry.begin, " bytes, the shape (", elements,
        " ", dtype_name, " elements) needs ", elements, " x ", DTypeSize(entry.dtype)));
  }
  return entry;
}

absl::Status ParseMetadata(const Json& json, std::map<std::string, std::string>& out) {
  if (!json.is_object()) return absl::InvalidArgumentError("__metadata__ is not a JSON object");
  for (auto it = json.begin(); it != json.end(); ++it) {
    if (!it->is_string()) {
      return absl::InvalidArgumentError(
          absl::StrCat("__metadata__ value of '", it.key(), "' is not a string"));
    }
    out[it.key()] = it->get<std::string>();
  }
  return absl::OkStatus();
}

absl::Status CheckNoOverlap(std::vector<Entry>& entries) {
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  for (size_t i = 1; i < entries.size(); ++i) {
    if (entries[i].begin < entries[i - 1].end) {
      return absl::InvalidArgumentError(
          absl::StrCat("tensors '", entries[i - 1].name, "' and '", entries[i].name, "' overlap"));
    }
  }
  return absl::OkStatus();
}

// A view into the mapping, or an owned copy when the bytes are misaligned for the dtype.
Tensor MakeTensor(const Entry& entry, const std::shared_ptr<const MappedFile>& file,
                  size_t data_start) {
  Tensor t;
  t.dtype = entry.dtype;
  t.shape = entry.shape;
  const uint8_t* bytes = file->data() + data_start + entry.begin;
  if (reinterpret_cast<uintptr_t>(bytes) % DTypeSize(entry.dtype) == 0) {
    t.data = bytes;
    t.owner = file;
    return t;
  }
  auto copy = std::make_shared<std::vector<uint8_t>>(bytes, bytes + (entry.end - entry.begin));
  t.data = copy->data();
  t.owner = std::move(copy);
  return t;
}

absl::StatusOr<Json> ParseHeader(const MappedFile& file, uint64_t* data_start) {
  ByteReader reader(file.bytes(), file.path());
  PDSERVE_ASSIGN_OR_RETURN(uint64_t header_size, reader.Read<uint64_t>("the header length"));
  if (header_size > reader.remaining() || header_size > kMaxSafetensorsHeaderBytes) {
    return reader.Error(absl::StrCat("not a safetensors file: header length ", header_size,
                                     " exceeds the file (", file.size(), " bytes) or ",
                                     kMaxSafetensorsHeaderBytes));
  }
  PDSERVE_ASSIGN_OR_RETURN(auto header, reader.ReadBytes(header_size, "the header"));
  std::string_view text(reinterpret_cast<const char*>(header.data()), header.size());
  if (!NestingWithinLimit(text)) return reader.Error("header JSON is nested too deeply");
  Json json = Json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) return reader.Error("header is not valid JSON");
  if (!json.is_object()) return reader.Error("header is not a JSON object");
  *data_start = reader.offset();
  return json;
}

}  // namespace

const char* SafetensorsDTypeName(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    default:
      return "?";  // safetensors has no ggml block formats
  }
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  SafetensorsFile out;
  PDSERVE_ASSIGN_OR_RETURN(out.file, MappedFile::Open(path));
  uint64_t data_start = 0;
  PDSERVE_ASSIGN_OR_RETURN(Json header, ParseHeader(*out.file, &data_start));
  const uint64_t data_size = out.file->size() - data_start;
  std::vector<Entry> entries;
  for (auto it = header.begin(); it != header.end(); ++it) {
    if (it.key() == kMetadataKey) {
      if (absl::Status s = ParseMetadata(*it, out.metadata); !s.ok()) {
        return Error(path, s.message());
      }
      continue;
    }
    absl::StatusOr<Entry> entry = ParseEntry(it.key(), *it, data_size);
    if (!entry.ok()) return Error(path, entry.status().message());
    entries.push_back(*std::move(entry));
  }
  if (absl::Status s = CheckNoOverlap(entries); !s.ok()) return Error(path, s.message());
  for (const Entry& entry : entries) {
    out.tensors[entry.name] = MakeTensor(entry, out.file, data_start);
  }
  return out;
}

absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const NamedTensor& named : tensors) {
    if (named.name.empty() || named.name == kMetadataKey || !names.insert(named.name).second) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor name '", named.name, "' is empty, reserved or repeated"));
    }
    const Tensor& t = named.tensor;
    if (t.data == nullptr && t.NumBytes() > 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ": tensor '", named.name, "' has no data"));
    }
    header[named.name] = {{"dtype", SafetensorsDTypeName(t.dtype)},
                          {"shape", t.shape},
                          {"data_offsets", {offset, offset + t.NumBytes()}}};
    offset += t.NumBytes();
  }
  std::string text = header.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  while ((sizeof(uint64_t) + text.size()) % 8 != 0) text.push_back(' ');
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) return absl::InvalidArgumentError(absl::StrCat("cannot create '", path, "'"));
  const uint64_t header_size = text.size();
  out.write(reinterpret_cast<const char*>(&header_size), sizeof(header_size));
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
  for (const NamedTensor& named : tensors) {
    out.write(static_cast<const char*>(named.tensor.data),
              static_cast<std::streamsize>(named.tensor.NumBytes()));
  }
  out.close();
  if (!out) return absl::InternalError(absl::StrCat("failed writing '", path, "'"));
  return absl::OkStatus();
}

}  // namespace pdserve
