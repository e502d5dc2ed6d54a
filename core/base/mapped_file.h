// A read-only memory mapping of a whole file. The mapping lives as long as the MappedFile; share it
// with std::shared_ptr to keep weights that point into it valid. Thread-safe after construction.
#ifndef PDSERVE_CORE_BASE_MAPPED_FILE_H_
#define PDSERVE_CORE_BASE_MAPPED_FILE_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

class MappedFile {
 public:
  // Maps `path` read-only. NotFound when it does not exist, InvalidArgument when it is a
  // directory or empty, Internal on other system errors; the message names the path.
  static absl::StatusOr<std::shared_ptr<const MappedFile>> Open(const std::string& path);

  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<const uint8_t> bytes() const { return {data_, size_}; }
  const std::string& path() const { return path_; }

 private:
  MappedFile(std::string path, const uint8_t* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}

  std::string path_;
  const uint8_t* data_;
  size_t size_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_MAPPED_FILE_H_
