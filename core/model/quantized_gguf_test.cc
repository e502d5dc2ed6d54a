// Quantized GGUF tensors: pdserve's dequantization of every block format equals ggml's bit for bit
// on blocks llama-quantize wrote (tests/data/quant_vectors.gguf, made by
// scripts/make_quant_vectors.sh with the llama.cpp of ../shared/peers), and the loader refuses
// quantized tensors whose rows are not whole blocks.
#include <cstring>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/model/gguf_file.h"
#include "core/tensor/tensor.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(QuantizedGgufTest, DequantizationEqualsGgmlBitForBit) {
  absl::StatusOr<GgufFile> file =
      GgufFile::Open(absl::StrCat(PDSERVE_SOURCE_DIR, "/tests/data/quant_vectors.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  int checked = 0;
  for (const char* label : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"}) {
    const GgufTensor* blocks = file->FindTensor(absl::StrCat(label, ".blocks"));
    const GgufTensor* ggml = file->FindTensor(absl::StrCat(label, ".ggml"));
    ASSERT_NE(blocks, nullptr) << label;
    ASSERT_NE(ggml, nullptr) << label;
    EXPECT_EQ(DTypeName(blocks->tensor.dtype), std::string(label));
    ASSERT_EQ(ggml->tensor.dtype, DType::kF32);
    ASSERT_EQ(blocks->tensor.shape, ggml->tensor.shape);
    const Tensor mine = ToF32(blocks->tensor);
    const float* want = ggml->tensor.as<float>();
    const float* got = mine.as<float>();
    int nonzero = 0;
    for (int64_t i = 0; i < mine.NumElements(); ++i) {
      ASSERT_EQ(std::memcmp(&got[i], &want[i], sizeof(float)), 0)
          << label << " element " << i << ": " << got[i] << " vs ggml " << want[i];
      nonzero += want[i] != 0.0f;
    }
    EXPECT_GT(nonzero, mine.NumElements() / 2) << label << ": the vectors must not be trivial";
    ++checked;
  }
  EXPECT_EQ(checked, 8);
}

// The vectors file with the row length of q4_k.blocks patched to `cols`, written to a temp file.
std::string PatchedVectors(uint64_t cols) {
  const std::string source = absl::StrCat(PDSERVE_SOURCE_DIR, "/tests/data/quant_vectors.gguf");
  std::ifstream in(source, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t name = bytes.find("q4_k.blocks");
  EXPECT_NE(name, std::string::npos);
  std::memcpy(bytes.data() + name + std::strlen("q4_k.blocks") + 4, &cols, sizeof(cols));
  const std::string path = absl::StrCat(testing::TempDir(), "/patched_vectors.gguf");
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

TEST(QuantizedGgufTest, RowsThatAreNotWholeBlocksAreRefusedWithTheTensorsName) {
  absl::StatusOr<GgufFile> file = GgufFile::Open(PatchedVectors(250));
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), ::testing::HasSubstr("tensor q4_k.blocks is Q4_K"));
  EXPECT_THAT(file.status().message(), ::testing::HasSubstr("not a whole number of 256-element"));
}

TEST(QuantizedGgufTest, DataBeyondTheFileIsRefused) {
  // Twice the rows' bytes: the data would run past the end of the file.
  absl::StatusOr<GgufFile> file = GgufFile::Open(PatchedVectors(256 * 4096));
  ASSERT_FALSE(file.ok());
  EXPECT_THAT(file.status().message(), ::testing::HasSubstr("q4_k.blocks"));
  EXPECT_THAT(file.status().message(), ::testing::HasSubstr("lies outside the file"));
}

}  // namespace
}  // namespace pdserve
