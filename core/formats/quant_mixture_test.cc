// Quantization mixtures: the model llama-quantize turned into tests/data/tiny-q4_k_m.gguf (a
// `pdserve make-model` model, see scripts/make_quant_vectors.sh), made again here and quantized
// by QuantizeWeights, gives the same file's tensors byte for byte: the same type for every
// matrix, the same blocks. The type choices of all mixtures on a deeper model, fallbacks for
// rows that are not whole blocks, and refusals.
#include "core/formats/quant_mixture.h"

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/formats/gguf_file.h"
#include "core/formats/gguf_model.h"
#include "core/model/random_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

// The model scripts/make_quant_vectors.sh hands llama-quantize for tiny-q4_k_m.gguf.
ModelConfig TinyConfig() {
  ModelConfig c;
  c.dim = 256;
  c.hidden_dim = 256;
  c.n_layers = 1;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 320;
  c.max_seq_len = 2048;
  c.tied_embeddings = true;
  return c;
}

TEST(QuantMixtureTest, Q4_K_MEqualsLlamaQuantizeByteForByte) {
  const ModelWeights weights = MakeRandomModel(TinyConfig(), 0);
  absl::StatusOr<QuantizedWeights> quantized =
      QuantizeWeights(weights, QuantMixture::kQ4_K_M, nullptr);
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  const std::string path = absl::StrCat(testing::TempDir(), "/tiny-q4_k_m-pdserve.gguf");
  ASSERT_TRUE(WriteTypedGgufModel(path, quantized->weights,
                                  SyntheticVocabulary(TinyConfig().vocab_size),
                                  QuantMixtureFileType(QuantMixture::kQ4_K_M))
                  .ok());
  absl::StatusOr<GgufFile> mine = GgufFile::Open(path);
  absl::StatusOr<GgufFile> theirs =
      GgufFile::Open(absl::StrCat(PDSERVE_SOURCE_DIR, "/tests/data/tiny-q4_k_m.gguf"));
  ASSERT_TRUE(mine.ok()) << mine.status();
  ASSERT_TRUE(theirs.ok()) << theirs.status();
  ASSERT_EQ(mine->tensors().size(), theirs->tensors().size());
  int quantized_matrices = 0;
  for (const GgufTensor& want : theirs->tensors()) {
    const GgufTensor* got = mine->FindTensor(want.name);
    ASSERT_NE(got, nullptr) << want.name;
    EXPECT_EQ(DTypeName(got->tensor.dtype), DTypeName(want.tensor.dtype)) << want.name;
    ASSERT_EQ(got->tensor.shape, want.tensor.shape) << want.name;
    ASSERT_EQ(got->tensor.NumBytes(), want.tensor.NumBytes()) << want.name;
    const size_t block = IsQuantized(want.tensor.dtype) ? BlockBytes(want.tensor.dtype) : 4;
    int differing = 0;
    for (size_t b = 0; b < want.tensor.NumBytes() / block; ++b) {
      differing += std::memcmp(got->tensor.as<uint8_t>() + b * block,
                               want.tensor.as<uint8_t>() + b * block, block) != 0;
    }
    EXPECT_EQ(differing, 0) << want.name << ": blocks differing from llama-quantize's, of "
                            << want.tensor.NumBytes() / block;
    quantized_matrices += IsQuantized(want.tensor.dtype);
  }
  EXPECT_EQ(quantized_matrices, 8);  // the tied embedding and 7 layer matrices
  EXPECT_EQ(*mine->GetInt("general.file_type"), 15);
  EXPECT_EQ(*mine->GetInt("general.quantization_version"), 2);
}

TEST(QuantMixtureTest, TypesFollowLlamaQuantizesChoices) {
  // 16 layers: use_more_bits holds for layers 0, 1, 4, 7, 10, 13, 14, 15.
  std::vector<int> more_bits;
  for (int l = 0; l < 16; ++l) {
    if (MixtureTypeFor(QuantMixture::kQ4_K_M, MatrixRole::kFfnDown, l, 16, 2048) == DType::kQ6_K) {
      more_bits.push_back(l);
    }
    EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_K_M, MatrixRole::kAttnV, l, 16, 2048),
              MixtureTypeFor(QuantMixture::kQ4_K_M, MatrixRole::kFfnDown, l, 16, 2048));
    EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_K_M, MatrixRole::kAttnQ, l, 16, 2048), DType::kQ4_K);
    EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_0, MatrixRole::kFfnDown, l, 16, 2048), DType::kQ4_0);
  }
  EXPECT_EQ(more_bits, (std::vector<int>{0, 1, 4, 7, 10, 13, 14, 15}));
  EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_0, MatrixRole::kClassifier, 0, 16, 2048),
            DType::kQ6_K);
  EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ8_0, MatrixRole::kClassifier, 0, 16, 2048),
            DType::kQ8_0);
  EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_0, MatrixRole::kTokenEmbedding, 0, 16, 2048),
            DType::kQ4_0);
  // Rows that are not whole blocks: stories260K's dim 64 and FFN 172.
  EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_K_M, MatrixRole::kAttnQ, 3, 5, 64), DType::kQ5_0);
  EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_K_M, MatrixRole::kClassifier, 0, 5, 64), DType::kQ8_0);
  EXPECT_EQ(MixtureTypeFor(QuantMixture::kQ4_0, MatrixRole::kClassifier, 0, 5, 64), DType::kQ8_0);
  for (QuantMixture m : {QuantMixture::kQ8_0, QuantMixture::kQ4_0, QuantMixture::kQ4_K_M}) {
    EXPECT_EQ(MixtureTypeFor(m, MatrixRole::kFfnDown, 2, 5, 172), DType::kF16)
        << QuantMixtureName(m);
  }
}

TEST(QuantMixtureTest, ParsesNamesAndRefusesOthers) {
  for (QuantMixture m : {QuantMixture::kQ8_0, QuantMixture::kQ4_0, QuantMixture::kQ4_K_M}) {
    absl::StatusOr<QuantMixture> parsed = ParseQuantMixture(QuantMixtureName(m));
    ASSERT_TRUE(parsed.ok());
    EXPECT_EQ(*parsed, m);
  }
  EXPECT_EQ(*ParseQuantMixture("Q4_K_M"), QuantMixture::kQ4_K_M);
  absl::StatusOr<QuantMixture> bad = ParseQuantMixture("q2_k");
  ASSERT_FALSE(bad.ok());
  EXPECT_THAT(bad.status().message(), HasSubstr("q8_0, q4_0 or q4_k_m"));
}

TEST(QuantMixtureTest, NonFiniteWeightsAreRefusedByName) {
  ModelWeights weights = MakeRandomModel(TinyConfig(), 1);
  std::vector<float> values(weights.layers[0].w3.NumElements(), 0.5f);
  values[300] = std::nanf("");
  weights.layers[0].w3 = MakeF32Tensor(values, weights.layers[0].w3.shape);
  absl::StatusOr<QuantizedWeights> quantized =
      QuantizeWeights(weights, QuantMixture::kQ8_0, nullptr);
  ASSERT_FALSE(quantized.ok());
  EXPECT_THAT(quantized.status().message(), HasSubstr("blk.0.ffn_up.weight"));
  EXPECT_THAT(quantized.status().message(), HasSubstr("row 1, column 44"));
}

TEST(QuantMixtureTest, QuantizedModelLoadsBackCloseToTheOriginal) {
  ModelConfig config = TinyConfig();
  config.hidden_dim = 172;  // ffn_down's rows are not whole blocks: F16
  const ModelWeights weights = MakeRandomModel(config, 2);
  absl::StatusOr<QuantizedWeights> quantized =
      QuantizeWeights(weights, QuantMixture::kQ8_0, nullptr);
  ASSERT_TRUE(quantized.ok()) << quantized.status();
  EXPECT_EQ(quantized->fallbacks, 1);
  EXPECT_EQ(quantized->type_counts.at(DType::kF16), 1);
  EXPECT_EQ(quantized->type_counts.at(DType::kQ8_0), 7);
  const std::string path = absl::StrCat(testing::TempDir(), "/q8_0-roundtrip.gguf");
  ASSERT_TRUE(WriteTypedGgufModel(path, quantized->weights, SyntheticVocabulary(config.vocab_size),
                                  QuantMixtureFileType(QuantMixture::kQ8_0))
                  .ok());
  absl::StatusOr<GgufModel> loaded = LoadGgufModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const ModelWeights original = WithRopePairing(weights, RopePairing::kAdjacent);
  for (int which = 0; which < 2; ++which) {
    const Tensor& a = which == 0 ? original.layers[0].wq : original.layers[0].w2;
    const Tensor& b = which == 0 ? loaded->weights.layers[0].wq : loaded->weights.layers[0].w2;
    EXPECT_EQ(b.dtype, which == 0 ? DType::kQ8_0 : DType::kF16);
    const Tensor fa = ToF32(a);
    const Tensor fb = ToF32(b);
    for (int64_t i = 0; i < fa.NumElements(); ++i) {
      ASSERT_NEAR(fa.as<float>()[i], fb.as<float>()[i],
                  0.01f * std::fabs(fa.as<float>()[i]) + 1e-3f)
          << i;
    }
  }
}

}  // namespace
}  // namespace pdserve
