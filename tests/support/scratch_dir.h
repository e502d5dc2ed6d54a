// ScratchDir: a test's own fresh directory, removed with everything in it when the object goes.
//
// Names built from the process id collide: pids are reused within one CI run (the release and the
// sanitizer suites start thousands of processes), and a test that is killed leaves its files
// behind, so a later test with the same pid found "its" directory already there. mkdtemp's names
// cannot collide.
#pragma once

#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <system_error>

#include "gtest/gtest.h"

namespace pdserve {

class ScratchDir {
 public:
  // Creates `<test temp dir>/<prefix>.XXXXXX`; aborts the test binary (naming the path) when it
  // cannot, since nothing after it could run meaningfully.
  explicit ScratchDir(std::string_view prefix) {
    std::string pattern =
        (std::filesystem::path(::testing::TempDir()) / (std::string(prefix) + ".XXXXXX")).string();
    if (mkdtemp(pattern.data()) == nullptr) {
      std::perror(("ScratchDir: mkdtemp " + pattern).c_str());
      std::abort();
    }
    path_ = pattern;
  }
  ~ScratchDir() {
    std::error_code ignored;  // a test that already removed something must not fail here
    std::filesystem::remove_all(path_, ignored);
  }
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  // The path of `name` inside the directory (nothing is created).
  std::string operator/(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace pdserve
