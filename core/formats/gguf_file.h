// GgufFile: a strict reader of GGUF v2/v3 files (ggml's model format): a header, typed metadata
// key/values, tensor infos, and an aligned data section. The whole file is memory-mapped; tensors
// point into the mapping (Tensor::owner keeps it alive), metadata is copied out. Only F32, F16 and
// BF16 tensors are supported. Every count, length and offset read from the file is validated
// before use; any defect is an InvalidArgument naming the file path. Immutable after Open; safe to
// read from many threads.
//
// GgufValue: one metadata value (a scalar, a string, or an array of either), for readers and
// writers alike. A plain value type.
#ifndef PDSERVE_CORE_FORMATS_GGUF_FILE_H_
#define PDSERVE_CORE_FORMATS_GGUF_FILE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/mapped_file.h"
#include "core/tensor/tensor.h"

namespace pdserve {

// Metadata value types, as stored on disk. DO NOT RENUMBER.
enum class GgufType : uint32_t {
  kUint8 = 0,
  kInt8 = 1,
  kUint16 = 2,
  kInt16 = 3,
  kUint32 = 4,
  kInt32 = 5,
  kFloat32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kUint64 = 10,
  kInt64 = 11,
  kFloat64 = 12,
};

// "uint32", "string", ...; "unknown" for values outside the enum.
const char* GgufTypeName(GgufType type);

// Bytes of one element of a fixed-size type (numbers and bool); 0 for strings, arrays and values
// outside the enum.
size_t GgufTypeBytes(GgufType type);

// The ggml tensor types this code reads and writes, as stored on disk. DO NOT RENUMBER.
enum class GgmlType : uint32_t {
  kF32 = 0,
  kF16 = 1,
  kQ4_0 = 2,
  kQ4_1 = 3,
  kQ5_0 = 6,
  kQ5_1 = 7,
  kQ8_0 = 8,
  kQ4_K = 12,
  kQ5_K = 13,
  kQ6_K = 14,
  kBF16 = 30,
};

// ggml's name of any tensor type ("F32", "Q4_0", "BF16", ...); "unknown" when not a ggml type.
const char* GgmlTypeName(uint32_t type);
GgmlType GgmlTypeOf(DType dtype);

inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr size_t kGgufMaxKeyBytes = 65535;      // the GGUF specification's limit
inline constexpr size_t kGgufMaxTensorNameBytes = 63;  // llama.cpp: GGML_MAX_NAME − 1
inline constexpr int kGgufMaxDims = 4;

// The GGUF type of a C++ scalar; undefined (a compile error) for other types.
template <typename T>
struct GgufTypeOf;
#define PDSERVE_GGUF_TYPE_OF_(T, t)                \
  template <>                                      \
  struct GgufTypeOf<T> {                           \
    static constexpr GgufType value = GgufType::t; \
  }
PDSERVE_GGUF_TYPE_OF_(uint8_t, kUint8);
PDSERVE_GGUF_TYPE_OF_(int8_t, kInt8);
PDSERVE_GGUF_TYPE_OF_(uint16_t, kUint16);
PDSERVE_GGUF_TYPE_OF_(int16_t, kInt16);
PDSERVE_GGUF_TYPE_OF_(uint32_t, kUint32);
PDSERVE_GGUF_TYPE_OF_(int32_t, kInt32);
PDSERVE_GGUF_TYPE_OF_(uint64_t, kUint64);
PDSERVE_GGUF_TYPE_OF_(int64_t, kInt64);
PDSERVE_GGUF_TYPE_OF_(float, kFloat32);
PDSERVE_GGUF_TYPE_OF_(double, kFloat64);
PDSERVE_GGUF_TYPE_OF_(bool, kBool);
#undef PDSERVE_GGUF_TYPE_OF_

class GgufValue {
 public:
  // A scalar of the GGUF type matching T (bool, [u]int8..64_t, float, double).
  template <typename T>
  static GgufValue Of(T value) {
    return ArrayOf(std::vector<T>{value}).AsScalar();
  }
  static GgufValue Of(std::string value);
  // An array of the GGUF type matching T.
  template <typename T>
  static GgufValue ArrayOf(const std::vector<T>& values) {
    std::vector<uint8_t> raw(values.size() * sizeof(T));
    for (size_t i = 0; i < values.size(); ++i) {
      const T element = values[i];  // also unpacks std::vector<bool>
      std::memcpy(raw.data() + i * sizeof(T), &element, sizeof(T));
    }
    return Numeric(GgufTypeOf<T>::value, values.size(), std::move(raw));
  }
  static GgufValue ArrayOf(std::vector<std::string> values);

  GgufType type() const { return type_; }                  // kArray for arrays
  GgufType element_type() const { return element_type_; }  // the scalar's or elements' type
  bool is_array() const { return type_ == GgufType::kArray; }
  uint64_t size() const { return count_; }  // 1 for a scalar

  // Scalar accessors; nullopt/nullptr when the value is not of that kind. AsInt accepts any
  // integer type whose value fits int64; AsFloat float32 or float64.
  std::optional<int64_t> AsInt() const;
  std::optional<double> AsFloat() const;
  std::optional<bool> AsBool() const;
  const std::string* AsString() const;
  // Array accessors, with the same type rules applied to the elements.
  std::optional<std::vector<int64_t>> AsIntArray() const;
  std::optional<std::vector<float>> AsFloatArray() const;
  const std::vector<std::string>* AsStringArray() const;

  // Little-endian element bytes of a numeric or bool value; empty for strings.
  const std::vector<uint8_t>& raw_elements() const { return raw_; }
  // "uint32", "string", "array[300] of float32".
  std::string Describe() const;

 private:
  friend class GgufParser;
  static GgufValue Numeric(GgufType element_type, uint64_t count, std::vector<uint8_t> raw);
  GgufValue AsScalar() &&;
  std::optional<int64_t> IntAt(uint64_t index) const;
  std::optional<double> FloatAt(uint64_t index) const;

  GgufType type_ = GgufType::kUint8;
  GgufType element_type_ = GgufType::kUint8;
  uint64_t count_ = 0;
  std::vector<uint8_t> raw_;
  std::vector<std::string> strings_;
};

struct GgufTensor {
  std::string name;
  Tensor tensor;        // shape outermost first: ggml's ne[] reversed ([out, in] for a matrix)
  uint64_t offset = 0;  // from the start of the data section
};

class GgufFile {
 public:
  // Maps and parses `path`. NotFound when missing; InvalidArgument (naming `path`) for a bad
  // magic, an unsupported version, a truncated or inconsistent structure, a tensor of a type other
  // than F32/F16/BF16, or tensor data outside the file.
  static absl::StatusOr<GgufFile> Open(const std::string& path);

  const std::string& path() const { return file_->path(); }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t data_offset() const { return data_offset_; }  // start of the data section
  const std::shared_ptr<const MappedFile>& mapped_file() const { return file_; }

  // All key/values in file order.
  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }
  // nullptr when absent.
  const GgufValue* FindValue(std::string_view key) const;
  // Typed lookups: InvalidArgument naming the path and key when absent or of another kind.
  absl::StatusOr<int64_t> GetInt(std::string_view key) const;
  absl::StatusOr<double> GetFloat(std::string_view key) const;
  absl::StatusOr<bool> GetBool(std::string_view key) const;
  absl::StatusOr<std::string> GetString(std::string_view key) const;

  // All tensors in file order; FindTensor returns nullptr when absent.
  const std::vector<GgufTensor>& tensors() const { return tensors_; }
  const GgufTensor* FindTensor(std::string_view name) const;

  // InvalidArgument "<path>: <message>".
  absl::Status Error(absl::string_view message) const;

 private:
  friend class GgufParser;
  GgufFile() = default;
  absl::StatusOr<const GgufValue*> Require(std::string_view key) const;

  std::shared_ptr<const MappedFile> file_;
  uint32_t version_ = 0;
  uint64_t alignment_ = kGgufDefaultAlignment;
  uint64_t data_offset_ = 0;
  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::map<std::string, size_t, std::less<>> metadata_index_;
  std::vector<GgufTensor> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_GGUF_FILE_H_
