// MappedFile: error codes for missing, directory and empty paths (messages name the path), the
// mapped contents, and the mapping outliving the file's directory entry.
#include "core/base/mapped_file.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

// A fresh directory under the test temp dir, removed with its files at the end of the test.
class MappedFileTest : public testing::Test {
 protected:
  std::string WriteFile(const std::string& name, const std::string& contents) {
    std::string path = dir_ + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out.write(contents.data(), static_cast<std::streamsize>(contents.size()));
    return path;
  }

  const ScratchDir scratch_{"mapped_file_test"};
  const std::string dir_ = scratch_.path().string();
};

TEST_F(MappedFileTest, MissingFileIsNotFound) {
  const std::string path = dir_ + "/does_not_exist.bin";
  absl::StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
}

TEST_F(MappedFileTest, DirectoryIsInvalidArgument) {
  const std::string path = dir_ + "/subdir";
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  absl::StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("directory"));
}

TEST_F(MappedFileTest, EmptyFileIsInvalidArgument) {
  const std::string path = WriteFile("empty.bin", "");
  absl::StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(path);
  ASSERT_FALSE(file.ok());
  EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(file.status().message()), HasSubstr("empty"));
}

TEST_F(MappedFileTest, MapsContents) {
  std::string contents;
  for (int i = 0; i < 10000; ++i) contents.push_back(static_cast<char>(i * 7 + 3));
  contents[5] = '\0';
  const std::string path = WriteFile("data.bin", contents);
  absl::StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const MappedFile& mapped = **file;
  EXPECT_EQ(mapped.path(), path);
  ASSERT_EQ(mapped.size(), contents.size());
  EXPECT_EQ(mapped.bytes().size(), contents.size());
  EXPECT_EQ(mapped.bytes().data(), mapped.data());
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(mapped.data()), mapped.size()), contents);
}

TEST_F(MappedFileTest, SingleByteFile) {
  const std::string path = WriteFile("one.bin", "x");
  absl::StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ((*file)->size(), 1u);
  EXPECT_EQ((*file)->data()[0], 'x');
}

TEST_F(MappedFileTest, MappingOutlivesUnlinkAndOtherOwners) {
  const std::string path = WriteFile("gone.bin", "persistent bytes");
  absl::StatusOr<std::shared_ptr<const MappedFile>> file = MappedFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::shared_ptr<const MappedFile> keep = *file;
  file = absl::NotFoundError("dropped");  // the StatusOr no longer owns the mapping
  ASSERT_EQ(::unlink(path.c_str()), 0);
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(keep->data()), keep->size()),
            "persistent bytes");
}

TEST_F(MappedFileTest, TwoMappingsOfOneFile) {
  const std::string path = WriteFile("twice.bin", "abcdef");
  auto a = MappedFile::Open(path);
  auto b = MappedFile::Open(path);
  ASSERT_TRUE(a.ok());
  ASSERT_TRUE(b.ok());
  EXPECT_NE((*a)->data(), (*b)->data());
  a->reset();
  EXPECT_EQ(std::string(reinterpret_cast<const char*>((*b)->data()), (*b)->size()), "abcdef");
}

}  // namespace
}  // namespace pdserve
