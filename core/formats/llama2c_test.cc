#include <filesystem>

#include "core/formats/llama2c_checkpoint.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(Llama2cCheckpointTest, RoundTripsTiedAndUntiedModels) {
  for (bool tied : {true, false}) {
    ModelConfig c = *ShapeByName("stories260K");
    c.tied_embeddings = tied;
    ModelWeights w = MakeRandomModel(c, 4);
    const std::string path = ::testing::TempDir() + "/roundtrip.bin";
    ASSERT_TRUE(WriteLlama2cCheckpoint(path, w).ok());
    auto loaded = LoadLlama2cCheckpoint(path);
    ASSERT_TRUE(loaded.ok()) << loaded.status();
    EXPECT_EQ(loaded->config.tied_embeddings, tied);
    EXPECT_EQ(loaded->config.Describe(), c.Describe());
    EXPECT_EQ(0, std::memcmp(loaded->classifier.data, w.classifier.data, w.classifier.NumBytes()));
    EXPECT_EQ(
        0, std::memcmp(loaded->layers[4].w2.data, w.layers[4].w2.data, w.layers[4].w2.NumBytes()));
    std::filesystem::remove(path);
  }
}

TEST(Llama2cCheckpointTest, LoadsTheSharedModelZeroCopy) {
  auto w = LoadLlama2cCheckpoint(std::string(PDSERVE_SHARED_DIR) +
                                 "/models/stories260K/stories260K.bin");
  ASSERT_TRUE(w.ok()) << w.status();
  EXPECT_EQ(
      w->config.Describe(),
      "llama: dim 64, hidden 172, 5 layers, 8 heads (4 kv), vocab 512, ctx 512, rope adjacent");
  EXPECT_EQ(w->classifier.data, w->token_embedding.data);      // tied, shared bytes
  EXPECT_EQ(w->layers[0].wq.owner, w->token_embedding.owner);  // one mapping
}

}  // namespace
}  // namespace pdserve
