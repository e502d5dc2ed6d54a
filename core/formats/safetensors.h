// Reader and writer of the safetensors format (Hugging Face): an 8-byte little-endian header
// length N, N bytes of JSON
//   {"<name>": {"dtype": "F32"|"F16"|"BF16", "shape": [...], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"<key>": "<string>", ...}}
// and the data section, to which the offsets are relative. The reader treats the file as untrusted:
// every field is validated and any error is an InvalidArgument naming the file (and the tensor).
// Tensors are zero-copy views into a shared MappedFile (Tensor::owner keeps it alive); a tensor
// whose bytes are not aligned to its element size is copied instead.
// SafetensorsFile is a value; read it from many threads once loaded. Functions are thread-safe.
#ifndef PDSERVE_CORE_FORMATS_SAFETENSORS_H_
#define PDSERVE_CORE_FORMATS_SAFETENSORS_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/base/mapped_file.h"
#include "core/tensor/tensor.h"

namespace pdserve {

// Largest JSON header accepted (the format's own reference reader uses the same bound).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100'000'000;

struct SafetensorsFile {
  std::shared_ptr<const MappedFile> file;       // the mapping every tensor points into
  std::map<std::string, Tensor> tensors;        // by name
  std::map<std::string, std::string> metadata;  // "__metadata__", empty when absent
};

// Maps and validates `path`: header length within the file and kMaxSafetensorsHeaderBytes, a JSON
// object header, known dtypes (others: InvalidArgument naming the tensor and the dtype),
// non-negative dims, `end - begin` equal to the tensor's byte size, every range inside the data
// section and no two ranges overlapping, string metadata values. NotFound when the file is missing.
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

struct NamedTensor {
  std::string name;
  Tensor tensor;
};

// Writes `tensors` to `path` in the given order (data offsets ascending), the header padded with
// spaces so that the data section starts at a multiple of 8. `metadata` becomes "__metadata__"
// (omitted when empty). InvalidArgument for an empty or duplicate name, or the reserved name
// "__metadata__"; Internal when writing fails.
absl::Status WriteSafetensors(const std::string& path, const std::vector<NamedTensor>& tensors,
                              const std::map<std::string, std::string>& metadata = {
                                  {"format", "pt"}});

// "F32", "F16", "BF16": the safetensors spelling of `dtype`.
const char* SafetensorsDTypeName(DType dtype);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_SAFETENSORS_H_
