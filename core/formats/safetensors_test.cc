#include "core/formats/safetensors.h"

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

// A fresh directory per test under the gtest temp dir.
std::string TestDir() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string dir = std::string(::testing::TempDir()) + "safetensors_test/" +
                    info->test_suite_name() + "." + info->name();
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

Tensor Ramp(DType dtype, std::vector<int64_t> shape, float start) {
  std::vector<float> values;
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  for (int64_t i = 0; i < n; ++i) values.push_back(start + 0.25f * static_cast<float>(i));
  return ConvertTensor(MakeF32Tensor(std::move(values), std::move(shape)), dtype);
}

bool SameBytes(const Tensor& a, const Tensor& b) {
  if (a.dtype != b.dtype || a.shape != b.shape) return false;
  return a.NumBytes() == 0 || std::memcmp(a.data, b.data, a.NumBytes()) == 0;
}

void WriteBytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

// A file with the given header text and `data_bytes` zero bytes of data.
std::string RawFile(const std::string& header, size_t data_bytes) {
  uint64_t n = header.size();
  std::string out(reinterpret_cast<const char*>(&n), sizeof(n));
  return out + header + std::string(data_bytes, '\0');
}

TEST(SafetensorsTest, RoundTripsAllDTypes) {
  const std::string path = TestDir() + "/all.safetensors";
  std::vector<NamedTensor> tensors = {{"a.f32", Ramp(DType::kF32, {2, 3}, 1.0f)},
                                      {"b.f16", Ramp(DType::kF16, {4}, -2.0f)},
                                      {"c.bf16", Ramp(DType::kBF16, {3, 2}, 0.5f)},
                                      {"d.empty", Ramp(DType::kF32, {0, 4}, 0.0f)},
                                      {"e.scalar", Ramp(DType::kF32, {}, 7.0f)}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  ASSERT_EQ(file->tensors.size(), tensors.size());
  for (const NamedTensor& t : tensors) {
    ASSERT_EQ(file->tensors.count(t.name), 1u) << t.name;
    const Tensor& read = file->tensors.at(t.name);
    EXPECT_TRUE(SameBytes(read, t.tensor)) << t.name;
    EXPECT_EQ(read.owner, std::static_pointer_cast<const void>(file->file)) << "not zero-copy";
  }
  EXPECT_EQ(file->metadata, (std::map<std::string, std::string>{{"format", "pt"}}));
}

TEST(SafetensorsTest, PadsHeaderToEightBytes) {
  const std::string path = TestDir() + "/pad.safetensors";
  ASSERT_TRUE(WriteSafetensors(path, {{"x", Ramp(DType::kF16, {3}, 1.0f)}}, {}).ok());
  const std::string bytes = ReadBytes(path);
  uint64_t n = 0;
  std::memcpy(&n, bytes.data(), sizeof(n));
  EXPECT_EQ((8 + n) % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 6);
  EXPECT_THAT(bytes.substr(8, n), ::testing::Not(HasSubstr("__metadata__")));
}

TEST(SafetensorsTest, CopiesMisalignedTensors) {
  // A 3-element f16 tensor puts the following f32 tensor at a data offset of 6 bytes.
  const std::string path = TestDir() + "/misaligned.safetensors";
  std::vector<NamedTensor> tensors = {{"h", Ramp(DType::kF16, {3}, 1.0f)},
                                      {"f", Ramp(DType::kF32, {5}, 2.0f)}};
  ASSERT_TRUE(WriteSafetensors(path, tensors).ok());
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  ASSERT_TRUE(file.ok()) << file.status();
  const Tensor& f = file->tensors.at("f");
  EXPECT_EQ(reinterpret_cast<uintptr_t>(f.data) % 4, 0u);
  EXPECT_TRUE(SameBytes(f, tensors[1].tensor));
}

TEST(SafetensorsTest, WriterRejectsBadNames) {
  const std::string dir = TestDir();
  Tensor t = Ramp(DType::kF32, {2}, 0.0f);
  EXPECT_FALSE(WriteSafetensors(dir + "/x", {{"a", t}, {"a", t}}).ok());
  EXPECT_FALSE(WriteSafetensors(dir + "/x", {{"", t}}).ok());
  EXPECT_FALSE(WriteSafetensors(dir + "/x", {{"__metadata__", t}}).ok());
}

struct MalformedCase {
  const char* label;
  std::string bytes;
  const char* message;  // expected substring
};

TEST(SafetensorsTest, RejectsMalformedFiles) {
  const std::string dir = TestDir();
  const std::string ok_entry = R"("dtype":"F32","shape":[2],"data_offsets":[0,8])";
  std::string absurd(8, '\0');
  absurd[7] = 0x10;  // 2^60
  const std::vector<MalformedCase> cases = {
      {"too_short", "abc", "truncated"},
      {"absurd_length", absurd + "{}", "header length"},
      {"length_past_end", RawFile("{}", 0).substr(0, 8) + "{", "header length"},
      {"not_json", RawFile("{not json", 0), "not valid JSON"},
      {"not_object", RawFile("[1,2]", 0), "not a JSON object"},
      {"entry_not_object", RawFile(R"({"t":5})", 0), "'t' is not a JSON object"},
      {"no_dtype", RawFile(R"({"t":{"shape":[2],"data_offsets":[0,8]}})", 8), "dtype"},
      {"no_shape", RawFile(R"({"t":{"dtype":"F32","data_offsets":[0,8]}})", 8), "shape"},
      {"no_offsets", RawFile(R"({"t":{"dtype":"F32","shape":[2]}})", 8), "data_offsets"},
      {"i8", RawFile(R"({"t":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}})", 2),
       "tensor 't': unsupported dtype 'I8'"},
      {"negative_dim", RawFile(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8),
       "non-negative"},
      {"float_dim", RawFile(R"({"t":{"dtype":"F32","shape":[2.5],"data_offsets":[0,8]}})", 8),
       "non-negative"},
      {"overflow",
       RawFile(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8),
       "overflows"},
      {"out_of_range", RawFile(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})", 4),
       "inside the data section"},
      {"reversed", RawFile(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8),
       "inside the data section"},
      {"size_mismatch", RawFile(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8),
       "needs 3 x 4"},
      {"overlap", RawFile("{\"a\":{" + ok_entry + "},\"b\":{" + ok_entry + "}}", 8), "overlap"},
      {"metadata_not_strings", RawFile(R"({"__metadata__":{"format":1}})", 0), "not a string"},
      {"too_deep", RawFile(std::string(1000, '[') + std::string(1000, ']'), 0), "nested"},
  };
  for (const MalformedCase& c : cases) {
    const std::string path = dir + "/" + c.label;
    WriteBytes(path, c.bytes);
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
    ASSERT_FALSE(file.ok()) << c.label;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << c.label;
    EXPECT_THAT(file.status().message(), HasSubstr(c.message)) << c.label;
    EXPECT_THAT(file.status().message(), HasSubstr(path)) << c.label;
  }
}

TEST(SafetensorsTest, MissingFileIsNotFound) {
  absl::StatusOr<SafetensorsFile> file = ReadSafetensors(TestDir() + "/absent.safetensors");
  EXPECT_EQ(file.status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, RejectsEveryTruncation) {
  const std::string dir = TestDir();
  const std::string good = dir + "/good.safetensors";
  ASSERT_TRUE(WriteSafetensors(good, {{"a", Ramp(DType::kF32, {3, 2}, 1.0f)},
                                      {"b", Ramp(DType::kBF16, {5}, 1.0f)}})
                  .ok());
  const std::string bytes = ReadBytes(good);
  const std::string cut = dir + "/cut.safetensors";
  for (size_t size = 0; size < bytes.size(); ++size) {
    WriteBytes(cut, bytes.substr(0, size));
    EXPECT_FALSE(ReadSafetensors(cut).ok()) << "truncated to " << size << " bytes";
  }
}

TEST(SafetensorsTest, SurvivesCorruptedHeaders) {
  const std::string dir = TestDir();
  const std::string good = dir + "/good.safetensors";
  ASSERT_TRUE(WriteSafetensors(good, {{"a", Ramp(DType::kF32, {3, 2}, 1.0f)},
                                      {"b", Ramp(DType::kF16, {4}, 1.0f)}})
                  .ok());
  const std::string bytes = ReadBytes(good);
  const std::string bad = dir + "/bad.safetensors";
  std::mt19937 rng(1234);
  const char kAlphabet[] = "{}[]\",:0123456789-eE. FBI";
  for (int trial = 0; trial < 500; ++trial) {
    std::string corrupted = bytes;
    const int flips = 1 + static_cast<int>(rng() % 4);
    for (int f = 0; f < flips; ++f) {
      const size_t at = rng() % std::min<size_t>(corrupted.size(), 160);
      corrupted[at] = kAlphabet[rng() % (sizeof(kAlphabet) - 1)];
    }
    WriteBytes(bad, corrupted);
    absl::StatusOr<SafetensorsFile> file = ReadSafetensors(bad);  // must not crash
    if (file.ok()) {
      for (const auto& [name, t] : file->tensors) {
        ASSERT_LE(t.NumBytes(), corrupted.size()) << name;
      }
    }
  }
}

}  // namespace
}  // namespace pdserve
