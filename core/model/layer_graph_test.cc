// The layer graph of each family: Llama's steps, with the family's extras in their places (the
// engines' agreement with the reference and PyTorch is tested in model_family_test and
// family_golden_test).
#include "core/model/layer_graph.h"

#include <algorithm>
#include <set>
#include <string>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

using S = LayerStep;

TEST(LayerGraphTest, LlamaIsAttentionThenSwiGluWithPreNorms) {
  const std::vector<LayerStep> llama = {
      S::kAttentionNorm, S::kQkvProjection,    S::kKeyRopeAndStore, S::kQueryRope,
      S::kAttention,     S::kOutputProjection, S::kResidualFfnNorm, S::kGateUpProjection,
      S::kSwiGlu,        S::kDownProjection,   S::kResidual};
  EXPECT_EQ(LayerGraph(Traits(ModelFamily::kLlama)), llama);
  EXPECT_EQ(LayerGraph(Traits(ModelFamily::kMistral)), llama);
}

TEST(LayerGraphTest, FamilyExtrasSitBetweenTheProjectionAndRope) {
  auto position = [](const std::vector<LayerStep>& graph, LayerStep step) {
    return std::find(graph.begin(), graph.end(), step) - graph.begin();
  };
  const std::vector<LayerStep> qwen2 = LayerGraph(Traits(ModelFamily::kQwen2));
  EXPECT_EQ(position(qwen2, S::kQkvBias), position(qwen2, S::kQkvProjection) + 1);
  EXPECT_EQ(position(qwen2, S::kQkHeadNorm), static_cast<int64_t>(qwen2.size()));  // absent
  const std::vector<LayerStep> qwen3 = LayerGraph(Traits(ModelFamily::kQwen3));
  EXPECT_EQ(position(qwen3, S::kQkHeadNorm), position(qwen3, S::kKeyRopeAndStore) - 1);
  EXPECT_EQ(position(qwen3, S::kQkvBias), static_cast<int64_t>(qwen3.size()));  // absent
  for (const FamilyTraits& family : AllFamilies()) {
    EXPECT_EQ(LayerGraph(family).size(), 11u + family.qkv_bias + family.qk_norm) << family.name;
  }
}

TEST(LayerGraphTest, StepsHaveDistinctNames) {
  std::set<std::string> names;
  for (int s = 0; s <= static_cast<int>(S::kResidual); ++s) {
    names.insert(StepName(static_cast<LayerStep>(s)));
  }
  EXPECT_EQ(names.size(), static_cast<size_t>(S::kResidual) + 1);
  EXPECT_EQ(names.count("?"), 0u);
}

}  // namespace
}  // namespace pdserve
