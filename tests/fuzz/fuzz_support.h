// Helpers shared by the libFuzzer targets of tests/fuzz (built and run by fuzz.sh): invariant
// checks that abort (libFuzzer reports the abort as a crash and keeps the input), fuzz inputs
// written to files for loaders that take a path, and the check that a tensor a loader returns lies
// inside the file it was loaded from. A fuzzer runs one input at a time: not thread-safe.
#ifndef PDSERVE_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define PDSERVE_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "core/tensor/tensor.h"

namespace pdserve::fuzz {

// Aborts naming `what` unless `condition` holds.
inline void Check(bool condition, const char* what) {
  if (condition) return;
  std::fprintf(stderr, "fuzz invariant violated: %s\n", what);
  std::abort();
}

// A loader's refusal of a malformed file: InvalidArgument, naming the file when `path` is given.
inline void CheckRefusal(const absl::Status& status, const std::string& path = "") {
  if (status.code() != absl::StatusCode::kInvalidArgument) {
    std::fprintf(stderr, "refused with %s\n", status.ToString().c_str());
    Check(false, "a malformed file gives InvalidArgument");
  }
  if (!path.empty() && !absl::StrContains(status.message(), path)) {
    std::fprintf(stderr, "refused with %s\n", status.ToString().c_str());
    Check(false, "the error names the file");
  }
}

// A private directory for this process's input files, under /dev/shm when it exists (else
// $TMPDIR or /tmp); removed at exit.
class ScratchDir {
 public:
  static ScratchDir& Get() {
    static ScratchDir dir;
    return dir;
  }
  // Writes `bytes` to the file `name` in the directory, replacing it; returns the file's path.
  std::string Write(const std::string& name, std::string_view bytes) {
    const std::string path = path_ + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    Check(out.good(), "the input file is written");
    return path;
  }
  // Removes the file `name` when present.
  void Remove(const std::string& name) { std::filesystem::remove(path_ + "/" + name); }

 private:
  ScratchDir() {
    const char* tmp = std::getenv("TMPDIR");
    const std::string root = std::filesystem::is_directory("/dev/shm") ? "/dev/shm"
                             : tmp != nullptr                          ? tmp
                                                                       : "/tmp";
    path_ = root + "/pdserve_fuzz_" + std::to_string(getpid());
    std::filesystem::create_directories(path_);
  }
  ~ScratchDir() {
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }
  std::string path_;
};

// Aborts unless the bytes of `tensor` lie inside [begin, begin + size).
inline void CheckInside(const Tensor& tensor, const uint8_t* begin, size_t size) {
  const auto data = reinterpret_cast<uintptr_t>(tensor.data);
  const auto start = reinterpret_cast<uintptr_t>(begin);
  Check(tensor.data != nullptr, "a loaded tensor has data");
  Check(data >= start && data - start <= size && tensor.NumBytes() <= size - (data - start),
        "a loaded tensor lies inside its file");
}

}  // namespace pdserve::fuzz

#endif  // PDSERVE_TESTS_FUZZ_FUZZ_SUPPORT_H_
