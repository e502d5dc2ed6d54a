#include "core/formats/gguf_file.h"

#include <algorithm>
#include <iterator>
#include <limits>
#include <utility>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/base/byte_reader.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

constexpr char kMagic[4] = {'G', 'G', 'U', 'F'};
constexpr uint64_t kMaxTensors = uint64_t{1} << 20;
constexpr uint64_t kMaxKeyValues = uint64_t{1} << 20;
constexpr uint64_t kMaxStringBytes = uint64_t{1} << 26;  // 64 MiB: chat templates, licenses
// Smallest possible encodings, to bound counts by the bytes that remain.
constexpr uint64_t kMinKeyValueBytes = 8 + 1 + 4 + 1;  // key length, key, type, uint8
constexpr uint64_t kMinTensorInfoBytes =
    8 + 1 + 4 + 8 + 4 + 8;  // name, n_dims, ne[0], type, offset

bool IsKnownType(GgufType type) { return static_cast<uint32_t>(type) <= 12; }

template <typename T>
T Load(const uint8_t* p) {
  T value;
  std::memcpy(&value, p, sizeof(T));
  return value;
}

// Every DType, with the ggml type that stores it.
constexpr std::pair<DType, GgmlType> kGgmlTypes[] = {
    {DType::kF32, GgmlType::kF32},   {DType::kF16, GgmlType::kF16},
    {DType::kBF16, GgmlType::kBF16}, {DType::kQ8_0, GgmlType::kQ8_0},
    {DType::kQ4_0, GgmlType::kQ4_0}, {DType::kQ4_1, GgmlType::kQ4_1},
    {DType::kQ5_0, GgmlType::kQ5_0}, {DType::kQ5_1, GgmlType::kQ5_1},
    {DType::kQ4_K, GgmlType::kQ4_K}, {DType::kQ5_K, GgmlType::kQ5_K},
    {DType::kQ6_K, GgmlType::kQ6_K}};

std::optional<DType> DTypeOfGgml(uint32_t type) {
  for (auto [dtype, ggml] : kGgmlTypes) {
    if (static_cast<uint32_t>(ggml) == type) return dtype;
  }
  return std::nullopt;
}

}  // namespace

const char* GgufTypeName(GgufType type) {
  static constexpr const char* kNames[] = {"uint8",  "int8",    "uint16", "int16",  "uint32",
                                           "int32",  "float32", "bool",   "string", "array",
                                           "uint64", "int64",   "float64"};
  return IsKnownType(type) ? kNames[static_cast<uint32_t>(type)] : "unknown";
}

size_t GgufTypeBytes(GgufType type) {
  switch (type) {
    case GgufType::kUint8:
    case GgufType::kInt8:
    case GgufType::kBool:
      return 1;
    case GgufType::kUint16:
    case GgufType::kInt16:
      return 2;
    case GgufType::kUint32:
    case GgufType::kInt32:
    case GgufType::kFloat32:
      return 4;
    case GgufType::kUint64:
    case GgufType::kInt64:
    case GgufType::kFloat64:
      return 8;
    case GgufType::kString:
    case GgufType::kArray:
      return 0;
  }
  return 0;
}

const char* GgmlTypeName(uint32_t type) {
  static constexpr const char* kNames[] = {
      "F32",   "F16",        "Q4_0",       "Q4_1",       "Q4_2",     "Q4_3",     "Q5_0",
      "Q5_1",  "Q8_0",       "Q8_1",       "Q2_K",       "Q3_K",     "Q4_K",     "Q5_K",
      "Q6_K",  "Q8_K",       "IQ2_XXS",    "IQ2_XS",     "IQ3_XXS",  "IQ1_S",    "IQ4_NL",
      "IQ3_S", "IQ2_S",      "IQ4_XS",     "I8",         "I16",      "I32",      "I64",
      "F64",   "IQ1_M",      "BF16",       "Q4_0_4_4",   "Q4_0_4_8", "Q4_0_8_8", "TQ1_0",
      "TQ2_0", "IQ4_NL_4_4", "IQ4_NL_4_8", "IQ4_NL_8_8", "MXFP4"};
  return type < std::size(kNames) ? kNames[type] : "unknown";
}

GgmlType GgmlTypeOf(DType dtype) {
  for (auto [d, ggml] : kGgmlTypes) {
    if (d == dtype) return ggml;
  }
  return GgmlType::kF32;
}

// ---------------------------------------------------------------------------------------------
// GgufValue

GgufValue GgufValue::Of(std::string value) {
  return ArrayOf(std::vector<std::string>{std::move(value)}).AsScalar();
}

GgufValue GgufValue::ArrayOf(std::vector<std::string> values) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.element_type_ = GgufType::kString;
  v.count_ = values.size();
  v.strings_ = std::move(values);
  return v;
}

GgufValue GgufValue::Numeric(GgufType element_type, uint64_t count, std::vector<uint8_t> raw) {
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.element_type_ = element_type;
  v.count_ = count;
  v.raw_ = std::move(raw);
  return v;
}

GgufValue GgufValue::AsScalar() && {
  type_ = element_type_;
  return std::move(*this);
}

std::optional<int64_t> GgufValue::IntAt(uint64_t index) const {
  const size_t size = GgufTypeBytes(element_type_);
  const uint8_t* p = raw_.data() + index * size;
  switch (element_type_) {
    case GgufType::kUint8:
      return Load<uint8_t>(p);
    case GgufType::kInt8:
      return Load<int8_t>(p);
    case GgufType::kUint16:
      return Load<uint16_t>(p);
    case GgufType::kInt16:
      return Load<int16_t>(p);
    case GgufType::kUint32:
      return Load<uint32_t>(p);
    case GgufType::kInt32:
      return Load<int32_t>(p);
    case GgufType::kInt64:
      return Load<int64_t>(p);
    case GgufType::kUint64: {
      uint64_t u = Load<uint64_t>(p);
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return std::nullopt;
      return static_cast<int64_t>(u);
    }
    default:
      return std::nullopt;
  }
}

std::optional<double> GgufValue::FloatAt(uint64_t index) const {
  if (element_type_ == GgufType::kFloat32) return Load<float>(raw_.data() + index * 4);
  if (element_type_ == GgufType::kFloat64) return Load<double>(raw_.data() + index * 8);
  return std::nullopt;
}

std::optional<int64_t> GgufValue::AsInt() const { return is_array() ? std::nullopt : IntAt(0); }

std::optional<double> GgufValue::AsFloat() const { return is_array() ? std::nullopt : FloatAt(0); }

std::optional<bool> GgufValue::AsBool() const {
  if (type_ != GgufType::kBool) return std::nullopt;
  return raw_[0] != 0;
}

const std::string* GgufValue::AsString() const {
  return type_ == GgufType::kString ? &strings_[0] : nullptr;
}

std::optional<std::vector<int64_t>> GgufValue::AsIntArray() const {
  if (!is_array()) return std::nullopt;
  std::vector<int64_t> out(count_);
  for (uint64_t i = 0; i < count_; ++i) {
    std::optional<int64_t> v = IntAt(i);
    if (!v) return std::nullopt;
    out[i] = *v;
  }
  return out;
}

std::optional<std::vector<float>> GgufValue::AsFloatArray() const {
  if (!is_array() || (element_type_ != GgufType::kFloat32 && element_type_ != GgufType::kFloat64)) {
    return std::nullopt;
  }
  std::vector<float> out(count_);
  for (uint64_t i = 0; i < count_; ++i) out[i] = static_cast<float>(*FloatAt(i));
  return out;
}

const std::vector<std::string>* GgufValue::AsStringArray() const {
  return is_array() && element_type_ == GgufType::kString ? &strings_ : nullptr;
}

std::string GgufValue::Describe() const {
  if (!is_array()) return GgufTypeName(type_);
  return absl::StrCat("array[", count_, "] of ", GgufTypeName(element_type_));
}

// ---------------------------------------------------------------------------------------------
// GgufParser: reads one file front to back; every failure names the path.

class GgufParser {
 public:
  explicit GgufParser(std::shared_ptr<const MappedFile> file)
      : file_(std::move(file)), reader_(file_->bytes(), file_->path()) {}

  absl::StatusOr<GgufFile> Parse();

 private:
  absl::Status ReadHeader(uint64_t& tensor_count, uint64_t& kv_count);
  absl::StatusOr<std::string> ReadString(absl::string_view what, uint64_t max_bytes);
  absl::StatusOr<GgufValue> ReadValue(GgufType type, const std::string& key, bool in_array);
  absl::StatusOr<GgufValue> ReadArray(const std::string& key);
  absl::Status ReadMetadata(uint64_t kv_count);
  absl::Status ReadAlignment();
  absl::StatusOr<GgufTensor> ReadTensorInfo(uint64_t index);
  absl::Status ReadTensorInfos(uint64_t tensor_count);
  absl::Status PlaceTensors();

  std::shared_ptr<const MappedFile> file_;
  ByteReader reader_;
  GgufFile out_;
};

absl::StatusOr<GgufFile> GgufParser::Parse() {
  out_.file_ = file_;
  uint64_t tensor_count = 0, kv_count = 0;
  PDSERVE_RETURN_IF_ERROR(ReadHeader(tensor_count, kv_count));
  PDSERVE_RETURN_IF_ERROR(ReadMetadata(kv_count));
  PDSERVE_RETURN_IF_ERROR(ReadAlignment());
  PDSERVE_RETURN_IF_ERROR(ReadTensorInfos(tensor_count));
  PDSERVE_RETURN_IF_ERROR(PlaceTensors());
  return std::move(out_);
}

absl::Status GgufParser::ReadHeader(uint64_t& tensor_count, uint64_t& kv_count) {
  PDSERVE_ASSIGN_OR_RETURN(auto magic, reader_.ReadBytes(4, "the magic"));
  if (std::memcmp(magic.data(), kMagic, 4) != 0) {
    std::string seen(reinterpret_cast<const char*>(magic.data()), 4);
    return reader_.Error(
        absl::StrCat("not a GGUF file (magic '", absl::CHexEscape(seen), "', expected 'GGUF')"));
  }
  PDSERVE_ASSIGN_OR_RETURN(out_.version_, reader_.Read<uint32_t>("the version"));
  if (out_.version_ != 2 && out_.version_ != 3) {
    const bool big_endian = (out_.version_ & 0xffffu) == 0 && out_.version_ != 0;
    return reader_.Error(absl::StrCat("unsupported GGUF version ", out_.version_,
                                      big_endian ? " (a big-endian file?)" : "",
                                      "; supported: 2, 3"));
  }
  PDSERVE_ASSIGN_OR_RETURN(tensor_count, reader_.Read<uint64_t>("the tensor count"));
  PDSERVE_ASSIGN_OR_RETURN(kv_count, reader_.Read<uint64_t>("the metadata count"));
  if (tensor_count > kMaxTensors || tensor_count > reader_.remaining() / kMinTensorInfoBytes) {
    return reader_.Error(absl::StrCat("tensor count ", tensor_count, " is implausible (limit ",
                                      kMaxTensors, ", ", reader_.remaining(),
                                      " bytes remain for metadata and tensor infos)"));
  }
  if (kv_count > kMaxKeyValues || kv_count > reader_.remaining() / kMinKeyValueBytes) {
    return reader_.Error(absl::StrCat("metadata count ", kv_count, " is implausible (limit ",
                                      kMaxKeyValues, ", ", reader_.remaining(), " bytes remain)"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::string> GgufParser::ReadString(absl::string_view what, uint64_t max_bytes) {
  const size_t at = reader_.offset();
  PDSERVE_ASSIGN_OR_RETURN(uint64_t length, reader_.Read<uint64_t>(absl::StrCat(what, " length")));
  if (length > max_bytes) {
    return reader_.Error(absl::StrCat(what, " at offset ", at, " has length ", length,
                                      ", over the limit of ", max_bytes, " bytes"));
  }
  return reader_.ReadString(static_cast<size_t>(length), what);
}

absl::StatusOr<GgufValue> GgufParser::ReadValue(GgufType type, const std::string& key,
                                                bool in_array) {
  const std::string what = absl::StrCat("the value of '", key, "'");
  if (type == GgufType::kArray) {
    if (in_array) return reader_.Error(absl::StrCat("key '", key, "' holds nested arrays"));
    return ReadArray(key);
  }
  if (!IsKnownType(type)) {
    return reader_.Error(
        absl::StrCat("key '", key, "' has unknown value type ", static_cast<uint32_t>(type)));
  }
  GgufValue v;
  v.type_ = v.element_type_ = type;
  v.count_ = 1;
  if (type == GgufType::kString) {
    PDSERVE_ASSIGN_OR_RETURN(std::string s, ReadString(what, kMaxStringBytes));
    v.strings_.push_back(std::move(s));
    return v;
  }
  PDSERVE_ASSIGN_OR_RETURN(auto bytes, reader_.ReadBytes(GgufTypeBytes(type), what));
  if (type == GgufType::kBool && bytes[0] > 1) {
    return reader_.Error(
        absl::StrCat("key '", key, "' has bool value ", static_cast<int>(bytes[0])));
  }
  v.raw_.assign(bytes.begin(), bytes.end());
  return v;
}

absl::StatusOr<GgufValue> GgufParser::ReadArray(const std::string& key) {
  const std::string what = absl::StrCat("the array '", key, "'");
  PDSERVE_ASSIGN_OR_RETURN(uint32_t raw_type, reader_.Read<uint32_t>(what));
  const auto type = static_cast<GgufType>(raw_type);
  if (type == GgufType::kArray || !IsKnownType(type)) {
    return reader_.Error(absl::StrCat("array '", key, "' has unsupported element type ", raw_type,
                                      " (", GgufTypeName(type), ")"));
  }
  PDSERVE_ASSIGN_OR_RETURN(uint64_t count, reader_.Read<uint64_t>(what));
  const uint64_t min_bytes = type == GgufType::kString ? 8 : GgufTypeBytes(type);
  if (count > reader_.remaining() / min_bytes) {
    return reader_.Error(absl::StrCat("array '", key, "' claims ", count, " elements of type ",
                                      GgufTypeName(type), ", more than the ", reader_.remaining(),
                                      " remaining bytes can hold"));
  }
  GgufValue v;
  v.type_ = GgufType::kArray;
  v.element_type_ = type;
  v.count_ = count;
  if (type == GgufType::kString) {
    for (uint64_t i = 0; i < count; ++i) {
      PDSERVE_ASSIGN_OR_RETURN(std::string s,
                               ReadString(absl::StrCat(what, "[", i, "]"), kMaxStringBytes));
      v.strings_.push_back(std::move(s));
    }
    return v;
  }
  PDSERVE_ASSIGN_OR_RETURN(auto bytes, reader_.ReadBytes(count * GgufTypeBytes(type), what));
  if (type == GgufType::kBool) {
    for (uint8_t b : bytes) {
      if (b > 1)
        return reader_.Error(
            absl::StrCat("array '", key, "' has bool value ", static_cast<int>(b)));
    }
  }
  v.raw_.assign(bytes.begin(), bytes.end());
  return v;
}

absl::Status GgufParser::ReadMetadata(uint64_t kv_count) {
  for (uint64_t i = 0; i < kv_count; ++i) {
    PDSERVE_ASSIGN_OR_RETURN(std::string key,
                             ReadString(absl::StrCat("metadata key #", i), kGgufMaxKeyBytes));
    if (key.empty()) return reader_.Error(absl::StrCat("metadata key #", i, " is empty"));
    if (out_.metadata_index_.count(key) != 0) {
      return reader_.Error(absl::StrCat("metadata key '", key, "' appears twice"));
    }
    PDSERVE_ASSIGN_OR_RETURN(uint32_t type,
                             reader_.Read<uint32_t>(absl::StrCat("the type of '", key, "'")));
    PDSERVE_ASSIGN_OR_RETURN(GgufValue value,
                             ReadValue(static_cast<GgufType>(type), key, /*in_array=*/false));
    out_.metadata_index_.emplace(key, out_.metadata_.size());
    out_.metadata_.emplace_back(std::move(key), std::move(value));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::ReadAlignment() {
  const GgufValue* v = out_.FindValue("general.alignment");
  if (v == nullptr) return absl::OkStatus();
  std::optional<int64_t> a = v->AsInt();
  if (v->type() != GgufType::kUint32 || !a || *a == 0 || (*a & (*a - 1)) != 0) {
    return reader_.Error(absl::StrCat("general.alignment must be a uint32 power of two, got ",
                                      v->Describe(), a ? absl::StrCat(" ", *a) : ""));
  }
  out_.alignment_ = static_cast<uint64_t>(*a);
  return absl::OkStatus();
}

absl::StatusOr<GgufTensor> GgufParser::ReadTensorInfo(uint64_t index) {
  GgufTensor t;
  PDSERVE_ASSIGN_OR_RETURN(
      t.name, ReadString(absl::StrCat("the name of tensor #", index), kGgufMaxTensorNameBytes));
  if (t.name.empty()) return reader_.Error(absl::StrCat("tensor #", index, " has an empty name"));
  const std::string what = absl::StrCat("the info of tensor ", t.name);
  PDSERVE_ASSIGN_OR_RETURN(uint32_t n_dims, reader_.Read<uint32_t>(what));
  if (n_dims < 1 || n_dims > kGgufMaxDims) {
    return reader_.Error(absl::StrCat("tensor ", t.name, " has ", n_dims, " dimensions; 1 to ",
                                      kGgufMaxDims, " are supported"));
  }
  std::vector<int64_t> ne(n_dims);
  int64_t elements = 1;
  for (uint32_t d = 0; d < n_dims; ++d) {
    PDSERVE_ASSIGN_OR_RETURN(ne[d], reader_.Read<int64_t>(what));
    if (ne[d] < 1 || __builtin_mul_overflow(elements, ne[d], &elements)) {
      return reader_.Error(absl::StrCat("tensor ", t.name, " has invalid dimensions [",
                                        absl::StrJoin(ne.begin(), ne.begin() + d + 1, ", "), "]"));
    }
  }
  PDSERVE_ASSIGN_OR_RETURN(uint32_t ggml_type, reader_.Read<uint32_t>(what));
  std::optional<DType> dtype = DTypeOfGgml(ggml_type);
  if (!dtype) {
    return reader_.Error(absl::StrCat(
        "tensor ", t.name, " has ggml type ", ggml_type, " (", GgmlTypeName(ggml_type),
        "); supported: F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K"));
  }
  const int64_t block = BlockElements(*dtype);
  if (ne[0] % block != 0) {
    return reader_.Error(
        absl::StrCat("tensor ", t.name, " is ", GgmlTypeName(ggml_type), " but its rows of ", ne[0],
                     " elements are not a whole number of ", block, "-element blocks"));
  }
  int64_t bytes = 0;
  if (__builtin_mul_overflow(elements / block, static_cast<int64_t>(BlockBytes(*dtype)), &bytes)) {
    return reader_.Error(absl::StrCat("tensor ", t.name, " is too large"));
  }
  PDSERVE_ASSIGN_OR_RETURN(t.offset, reader_.Read<uint64_t>(what));
  t.tensor.dtype = *dtype;
  t.tensor.shape.assign(ne.rbegin(), ne.rend());
  return t;
}

absl::Status GgufParser::ReadTensorInfos(uint64_t tensor_count) {
  for (uint64_t i = 0; i < tensor_count; ++i) {
    PDSERVE_ASSIGN_OR_RETURN(GgufTensor t, ReadTensorInfo(i));
    if (out_.tensor_index_.count(t.name) != 0) {
      return reader_.Error(absl::StrCat("tensor ", t.name, " appears twice"));
    }
    out_.tensor_index_.emplace(t.name, out_.tensors_.size());
    out_.tensors_.push_back(std::move(t));
  }
  return absl::OkStatus();
}

absl::Status GgufParser::PlaceTensors() {
  const uint64_t a = out_.alignment_;
  const uint64_t end = reader_.offset();
  out_.data_offset_ = (end + a - 1) / a * a;
  const uint64_t file_size = file_->size();
  for (GgufTensor& t : out_.tensors_) {
    if (t.offset % a != 0) {
      return reader_.Error(absl::StrCat("tensor ", t.name, " has offset ", t.offset,
                                        ", not a multiple of the alignment ", a));
    }
    const uint64_t bytes = t.tensor.NumBytes();
    const uint64_t available = file_size > out_.data_offset_ ? file_size - out_.data_offset_ : 0;
    if (t.offset > available || bytes > available - t.offset) {
      return reader_.Error(
          absl::StrCat("the data of tensor ", t.name, " (", bytes, " bytes at data offset ",
                       t.offset, ") lies outside the file: the data section starts at ",
                       out_.data_offset_, " and the file has ", file_size, " bytes"));
    }
    t.tensor.data = file_->data() + out_.data_offset_ + t.offset;
    t.tensor.owner = file_;
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// GgufFile

absl::StatusOr<GgufFile> GgufFile::Open(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  return GgufParser(std::move(file)).Parse();
}

const GgufValue* GgufFile::FindValue(std::string_view key) const {
  auto it = metadata_index_.find(key);
  return it == metadata_index_.end() ? nullptr : &metadata_[it->second].second;
}

const GgufTensor* GgufFile::FindTensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

absl::Status GgufFile::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(path(), ": ", message));
}

absl::StatusOr<const GgufValue*> GgufFile::Require(std::string_view key) const {
  const GgufValue* v = FindValue(key);
  if (v == nullptr) {
    return Error(absl::StrCat("metadata key '", std::string(key), "' is missing"));
  }
  return v;
}

namespace {
absl::Status WrongKind(const GgufFile& file, std::string_view key, const GgufValue& v,
                       const char* expected) {
  return file.Error(absl::StrCat("metadata key '", std::string(key), "' is ", v.Describe(),
                                 ", expected ", expected));
}
}  // namespace

absl::StatusOr<int64_t> GgufFile::GetInt(std::string_view key) const {
  PDSERVE_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  std::optional<int64_t> i = v->AsInt();
  if (!i) return WrongKind(*this, key, *v, "an integer");
  return *i;
}

absl::StatusOr<double> GgufFile::GetFloat(std::string_view key) const {
  PDSERVE_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  std::optional<double> f = v->AsFloat();
  if (!f) return WrongKind(*this, key, *v, "a float");
  return *f;
}

absl::StatusOr<bool> GgufFile::GetBool(std::string_view key) const {
  PDSERVE_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  std::optional<bool> b = v->AsBool();
  if (!b) return WrongKind(*this, key, *v, "a bool");
  return *b;
}

absl::StatusOr<std::string> GgufFile::GetString(std::string_view key) const {
  PDSERVE_ASSIGN_OR_RETURN(const GgufValue* v, Require(key));
  const std::string* s = v->AsString();
  if (s == nullptr) return WrongKind(*this, key, *v, "a string");
  return *s;
}

}  // namespace pdserve
