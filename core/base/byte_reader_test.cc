// ByteReader: little-endian reads, views and strings; truncation and Seek errors name the context,
// the field, the offset and the sizes, and leave the cursor where it was.
#include "core/base/byte_reader.h"

#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

std::vector<uint8_t> Bytes(std::initializer_list<int> values) {
  std::vector<uint8_t> out;
  for (int v : values) out.push_back(static_cast<uint8_t>(v));
  return out;
}

TEST(ByteReaderTest, ReadsLittleEndianValues) {
  std::vector<uint8_t> data = Bytes({0x78, 0x56, 0x34, 0x12,                          // u32
                                     0x00, 0x00, 0x80, 0x3f,                          // 1.0f
                                     0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff,  // -1
                                     0x2a});                                          // u8
  ByteReader reader(data, "test.bin");
  EXPECT_EQ(reader.remaining(), 17u);
  absl::StatusOr<uint32_t> u32 = reader.Read<uint32_t>("magic");
  ASSERT_TRUE(u32.ok()) << u32.status();
  EXPECT_EQ(*u32, 0x12345678u);
  EXPECT_EQ(reader.offset(), 4u);
  absl::StatusOr<float> f = reader.Read<float>("scale");
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(*f, 1.0f);
  absl::StatusOr<int64_t> i64 = reader.Read<int64_t>("count");
  ASSERT_TRUE(i64.ok());
  EXPECT_EQ(*i64, -1);
  absl::StatusOr<uint8_t> u8 = reader.Read<uint8_t>("flag");
  ASSERT_TRUE(u8.ok());
  EXPECT_EQ(*u8, 0x2a);
  EXPECT_EQ(reader.offset(), 17u);
  EXPECT_EQ(reader.remaining(), 0u);
  EXPECT_EQ(reader.context(), "test.bin");
}

TEST(ByteReaderTest, ReadBytesReturnsViewIntoBuffer) {
  std::vector<uint8_t> data = Bytes({1, 2, 3, 4, 5, 6});
  ByteReader reader(data, "ctx");
  ASSERT_TRUE(reader.Read<uint8_t>("skip").ok());
  absl::StatusOr<std::span<const uint8_t>> view = reader.ReadBytes(3, "payload");
  ASSERT_TRUE(view.ok());
  EXPECT_EQ(view->data(), data.data() + 1);
  EXPECT_EQ(view->size(), 3u);
  EXPECT_EQ((*view)[2], 4);
  EXPECT_EQ(reader.offset(), 4u);
  absl::StatusOr<std::span<const uint8_t>> empty = reader.ReadBytes(0, "nothing");
  ASSERT_TRUE(empty.ok());
  EXPECT_TRUE(empty->empty());
  EXPECT_EQ(reader.offset(), 4u);
}

TEST(ByteReaderTest, ReadString) {
  const std::string text = "hello world";
  std::vector<uint8_t> data(text.begin(), text.end());
  ByteReader reader(data, "ctx");
  absl::StatusOr<std::string> s = reader.ReadString(5, "greeting");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, "hello");
  s = reader.ReadString(reader.remaining(), "rest");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, " world");
  EXPECT_EQ(reader.remaining(), 0u);
}

TEST(ByteReaderTest, ReadStringKeepsEmbeddedNul) {
  std::vector<uint8_t> data = Bytes({'a', 0, 'b'});
  ByteReader reader(data, "ctx");
  absl::StatusOr<std::string> s = reader.ReadString(3, "s");
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(*s, std::string("a\0b", 3));
}

TEST(ByteReaderTest, TruncatedReadNamesFieldAndOffset) {
  std::vector<uint8_t> data = Bytes({1, 2, 3, 4, 5});
  ByteReader reader(data, "model.bin");
  ASSERT_TRUE(reader.Read<uint16_t>("version").ok());
  absl::StatusOr<uint64_t> value = reader.Read<uint64_t>("tensor size");
  ASSERT_FALSE(value.ok());
  EXPECT_EQ(value.status().code(), absl::StatusCode::kInvalidArgument);
  const std::string message(value.status().message());
  EXPECT_THAT(message, HasSubstr("model.bin"));
  EXPECT_THAT(message, HasSubstr("truncated"));
  EXPECT_THAT(message, HasSubstr("tensor size"));
  EXPECT_THAT(message, HasSubstr("need 8 bytes"));
  EXPECT_THAT(message, HasSubstr("offset 2"));
  EXPECT_THAT(message, HasSubstr("3 left"));
  EXPECT_EQ(reader.offset(), 2u) << "a failed read must not move the cursor";
  // The bytes that are there can still be read.
  absl::StatusOr<std::span<const uint8_t>> rest = reader.ReadBytes(3, "rest");
  ASSERT_TRUE(rest.ok());
  EXPECT_EQ((*rest)[0], 3);
}

TEST(ByteReaderTest, TruncatedReadBytesAndString) {
  std::vector<uint8_t> data = Bytes({1, 2, 3});
  ByteReader reader(data, "ctx");
  absl::StatusOr<std::span<const uint8_t>> bytes = reader.ReadBytes(4, "blob");
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(bytes.status().message()), HasSubstr("blob"));
  EXPECT_THAT(std::string(bytes.status().message()), HasSubstr("need 4 bytes"));
  absl::StatusOr<std::string> s = reader.ReadString(10, "name");
  ASSERT_FALSE(s.ok());
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(s.status().message()), HasSubstr("name"));
  EXPECT_EQ(reader.offset(), 0u);
}

TEST(ByteReaderTest, HugeLengthDoesNotOverflow) {
  std::vector<uint8_t> data = Bytes({1, 2, 3, 4});
  ByteReader reader(data, "ctx");
  ASSERT_TRUE(reader.Read<uint8_t>("first").ok());
  EXPECT_FALSE(reader.ReadBytes(std::numeric_limits<size_t>::max(), "huge").ok());
  EXPECT_FALSE(reader.ReadString(std::numeric_limits<size_t>::max() - 1, "huge").ok());
  EXPECT_EQ(reader.offset(), 1u);
}

TEST(ByteReaderTest, EmptyInput) {
  ByteReader reader(std::span<const uint8_t>(), "empty");
  EXPECT_EQ(reader.remaining(), 0u);
  absl::StatusOr<uint8_t> b = reader.Read<uint8_t>("byte");
  ASSERT_FALSE(b.ok());
  EXPECT_THAT(std::string(b.status().message()), HasSubstr("empty"));
  EXPECT_TRUE(reader.Seek(0, "start").ok());
}

TEST(ByteReaderTest, Seek) {
  std::vector<uint8_t> data = Bytes({10, 11, 12, 13});
  ByteReader reader(data, "file.gguf");
  ASSERT_TRUE(reader.Seek(2, "tensor data").ok());
  EXPECT_EQ(reader.offset(), 2u);
  absl::StatusOr<uint8_t> b = reader.Read<uint8_t>("b");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(*b, 12);
  ASSERT_TRUE(reader.Seek(0, "start").ok());
  EXPECT_EQ(*reader.Read<uint8_t>("b"), 10);
  // Seeking to the very end is fine; nothing is left to read.
  ASSERT_TRUE(reader.Seek(4, "end").ok());
  EXPECT_EQ(reader.remaining(), 0u);
  EXPECT_FALSE(reader.Read<uint8_t>("past end").ok());
}

TEST(ByteReaderTest, SeekBeyondEndFails) {
  std::vector<uint8_t> data = Bytes({10, 11, 12, 13});
  ByteReader reader(data, "file.gguf");
  ASSERT_TRUE(reader.Seek(1, "x").ok());
  absl::Status status = reader.Seek(5, "tensor data");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  const std::string message(status.message());
  EXPECT_THAT(message, HasSubstr("file.gguf"));
  EXPECT_THAT(message, HasSubstr("tensor data"));
  EXPECT_THAT(message, HasSubstr("offset 5"));
  EXPECT_THAT(message, HasSubstr("4 bytes"));
  EXPECT_EQ(reader.offset(), 1u) << "a failed seek must not move the cursor";
  EXPECT_FALSE(reader.Seek(std::numeric_limits<size_t>::max(), "far").ok());
}

TEST(ByteReaderTest, ErrorPrefixesContext) {
  std::vector<uint8_t> data = Bytes({0});
  ByteReader reader(data, "tokenizer.bin");
  absl::Status status = reader.Error("bad magic");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "tokenizer.bin: bad magic");
}

TEST(ByteReaderTest, CopiesHaveIndependentCursors) {
  std::vector<uint8_t> data = Bytes({1, 2, 3, 4});
  ByteReader a(data, "ctx");
  ASSERT_TRUE(a.Read<uint8_t>("x").ok());
  ByteReader b = a;
  ASSERT_TRUE(b.Read<uint16_t>("y").ok());
  EXPECT_EQ(a.offset(), 1u);
  EXPECT_EQ(b.offset(), 3u);
}

}  // namespace
}  // namespace pdserve
