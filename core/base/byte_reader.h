// A bounds-checked little-endian cursor over untrusted bytes (model files, wire data). Every read
// either succeeds or returns InvalidArgument naming `what` and the offset; nothing reads past the
// end. Not thread-safe; cheap to copy.
#ifndef PDSERVE_CORE_BASE_BYTE_READER_H_
#define PDSERVE_CORE_BASE_BYTE_READER_H_

#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"

namespace pdserve {

class ByteReader {
 public:
  // `context` prefixes every error message, e.g. the file path.
  ByteReader(std::span<const uint8_t> bytes, std::string context)
      : bytes_(bytes), context_(std::move(context)) {}

  size_t offset() const { return offset_; }
  size_t remaining() const { return bytes_.size() - offset_; }
  const std::string& context() const { return context_; }

  // Reads one trivially copyable value (little-endian host assumed: x86-64).
  template <typename T>
  absl::StatusOr<T> Read(absl::string_view what) {
    static_assert(std::is_trivially_copyable_v<T>);
    T value;
    if (remaining() < sizeof(T)) {
      return Truncated(what, sizeof(T));
    }
    std::memcpy(&value, bytes_.data() + offset_, sizeof(T));
    offset_ += sizeof(T);
    return value;
  }

  // Returns a view of the next `n` bytes and advances past them.
  absl::StatusOr<std::span<const uint8_t>> ReadBytes(size_t n, absl::string_view what) {
    if (remaining() < n) {
      return Truncated(what, n);
    }
    std::span<const uint8_t> out = bytes_.subspan(offset_, n);
    offset_ += n;
    return out;
  }

  absl::StatusOr<std::string> ReadString(size_t n, absl::string_view what) {
    auto bytes = ReadBytes(n, what);
    if (!bytes.ok()) {
      return bytes.status();
    }
    return std::string(reinterpret_cast<const char*>(bytes->data()), bytes->size());
  }

  absl::Status Seek(size_t offset, absl::string_view what) {
    if (offset > bytes_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(context_, ": ", what, " at offset ", offset,
                                                     " lies beyond the end (", bytes_.size(),
                                                     " bytes)"));
    }
    offset_ = offset;
    return absl::OkStatus();
  }

  absl::Status Error(absl::string_view message) const {
    return absl::InvalidArgumentError(absl::StrCat(context_, ": ", message));
  }

 private:
  absl::Status Truncated(absl::string_view what, size_t need) const {
    return absl::InvalidArgumentError(absl::StrCat(context_, ": truncated while reading ", what,
                                                   " (need ", need, " bytes at offset ", offset_,
                                                   ", ", remaining(), " left)"));
  }

  std::span<const uint8_t> bytes_;
  std::string context_;
  size_t offset_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_BYTE_READER_H_
