// Quantized GGUF tensors: pdserve's dequantization of every block format equals ggml's, and its
// quantization llama-quantize's, bit for bit on tests/data/quant_vectors.gguf (made by
// scripts/make_quant_vectors.sh with the llama.cpp of ../shared/peers), and the loader refuses
// quantized tensors whose rows are not whole blocks.
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/formats/gguf_file.h"
#include "core/formats/gguf_model.h"
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

TEST(QuantizedGgufTest, QuantizationEqualsLlamaQuantizeBitForBit) {
  absl::StatusOr<GgufFile> file =
      GgufFile::Open(absl::StrCat(PDSERVE_SOURCE_DIR, "/tests/data/quant_vectors.gguf"));
  ASSERT_TRUE(file.ok()) << file.status();
  const GgufTensor* source = file->FindTensor("source.f32");
  ASSERT_NE(source, nullptr);
  for (const char* label : {"q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "q4_k", "q5_k", "q6_k"}) {
    const GgufTensor* blocks = file->FindTensor(absl::StrCat(label, ".blocks"));
    ASSERT_NE(blocks, nullptr) << label;
    const Tensor& want = blocks->tensor;
    ASSERT_EQ(want.cols(), source->tensor.cols());
    ASSERT_LE(want.rows(), source->tensor.rows());
    Tensor rows = source->tensor;
    rows.shape = want.shape;  // the leading rows, as many as llama-quantize's vectors hold
    const Tensor mine = ConvertTensor(rows, want.dtype);
    ASSERT_EQ(mine.NumBytes(), want.NumBytes());
    const size_t block_bytes = BlockBytes(want.dtype);
    for (size_t b = 0; b < want.NumBytes() / block_bytes; ++b) {
      ASSERT_EQ(std::memcmp(mine.as<uint8_t>() + b * block_bytes,
                            want.as<uint8_t>() + b * block_bytes, block_bytes),
                0)
          << label << " block " << b << " differs from llama-quantize's";
    }
  }
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

// The loader fuzzing of gguf_test (CorruptedBytesNeverCrash) on a quantized file: random bytes in
// the header region (counts, lengths, dims, ggml types, offsets) give a clear error naming the
// file or a model whose every tensor lies inside the file — never a crash (ASan runs this too).
TEST(QuantizedGgufTest, CorruptedQuantizedFileNeverCrashes) {
  const std::string source = absl::StrCat(PDSERVE_SOURCE_DIR, "/tests/data/tiny-q4_k_m.gguf");
  std::ifstream in(source, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  absl::StatusOr<GgufFile> file = GgufFile::Open(source);
  ASSERT_TRUE(file.ok()) << file.status();
  std::mt19937 rng(7);
  std::uniform_int_distribution<size_t> where(0, file->data_offset() - 1);
  std::uniform_int_distribution<int> value(0, 255);
  const std::string path = absl::StrCat(testing::TempDir(), "/mutated_q4_k_m.gguf");
  int failures = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string corrupted = bytes;
    for (int i = 0; i < 4; ++i) corrupted[where(rng)] = static_cast<char>(value(rng));
    std::ofstream(path, std::ios::binary | std::ios::trunc) << corrupted;
    absl::StatusOr<GgufModel> model = LoadGgufModel(path);
    if (!model.ok()) {
      ++failures;
      EXPECT_THAT(std::string(model.status().message()), ::testing::HasSubstr(path));
      continue;
    }
    for (const LayerWeights& l : model->weights.layers) {  // dequantize all: every byte readable
      for (const Tensor* t : {&l.wq, &l.wk, &l.wv, &l.wo, &l.w1, &l.w2, &l.w3}) {
        ASSERT_EQ(ToF32(*t).NumElements(), t->NumElements());
      }
    }
  }
  EXPECT_GT(failures, 0);
}

}  // namespace
}  // namespace pdserve
