// GgufWriter: collects metadata and F32/F16/BF16 tensors, then writes one GGUF v3 file
// (little-endian, alignment 32, so general.alignment is never written). Tensors are shared, not
// copied: their bytes must stay valid (Tensor::owner sees to that) until WriteFile returns.
// Not thread-safe; use one writer per file.
#ifndef PDSERVE_CORE_FORMATS_GGUF_WRITER_H_
#define PDSERVE_CORE_FORMATS_GGUF_WRITER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/formats/gguf_file.h"
#include "core/tensor/tensor.h"

namespace pdserve {

class GgufWriter {
 public:
  // Sets `key` to `value`: a new key goes last, an existing one keeps its place. InvalidArgument
  // for an empty key, one over kGgufMaxKeyBytes, or general.alignment (fixed at 32).
  absl::Status SetMetadata(std::string key, GgufValue value);

  // Removes `key`; a no-op when absent.
  void RemoveMetadata(const std::string& key);

  // Appends `tensor` (shape outermost first, 1 to 4 dims) under `name`. InvalidArgument for an
  // empty, over-long or duplicate name, an empty tensor, or an unsupported rank.
  absl::Status AddTensor(std::string name, Tensor tensor);

  const std::vector<std::pair<std::string, GgufValue>>& metadata() const { return metadata_; }

  // Writes the file, replacing any at `path`. InvalidArgument when it cannot be created,
  // Internal when a write fails.
  absl::Status WriteFile(const std::string& path) const;

 private:
  std::string EncodeHeader() const;

  std::vector<std::pair<std::string, GgufValue>> metadata_;
  std::vector<std::pair<std::string, Tensor>> tensors_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_GGUF_WRITER_H_
