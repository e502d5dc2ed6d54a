// Every model family against an independent PyTorch forward pass written from the published
// architectures (tests/golden/torch_forward.py): family_logits.json holds, per family, a small
// random model's config (made by `pdserve make-model`, seed 7; one with heads wider than dim /
// heads, as Qwen3-0.6B's) and the float64 logits PyTorch
// computed for a fixed token sequence. The same weights are rebuilt here with MakeRandomModel and
// run through the engine as one prefill and as decode steps. Regenerate the file with
// tests/golden/make_family_logits.sh.
#include <cmath>
#include <fstream>

#include "core/engine/llama_engine.h"
#include "core/model/model_family.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

const std::string kLogitsFile =
    std::string(PDSERVE_SOURCE_DIR) + "/tests/golden/family_logits.json";

struct FamilyCase {
  ModelConfig config;
  std::vector<int32_t> ids;
  std::vector<std::vector<double>> logits;  // per position
};

nlohmann::json ReadLogitsFile() {
  std::ifstream in(kLogitsFile);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

// The config make-model builds from the same flags (tools/make_model_command.cc). The family
// must be known.
FamilyCase ParseCase(const nlohmann::json& file, const nlohmann::json& j) {
  FamilyCase c;
  c.config.family = FamilyByName(j.at("family").get<std::string>())->family;
  c.config.dim = j.at("dim");
  c.config.hidden_dim = j.at("hidden_dim");
  c.config.n_layers = j.at("layers");
  c.config.n_heads = j.at("heads");
  c.config.n_kv_heads = j.at("kv_heads");
  c.config.SetHeadDim(j.at("head_dim"));
  c.config.vocab_size = j.at("vocab");
  c.config.max_seq_len = j.at("seq_len");
  c.config.rope_theta = j.at("rope_theta");
  c.config.tied_embeddings = j.at("tied");
  c.ids = file.at("ids").get<std::vector<int32_t>>();
  c.logits = j.at("logits").get<std::vector<std::vector<double>>>();
  return c;
}

// max |engine − torch| over all logits of a position, relative to the largest |torch logit|.
double RelativeError(std::span<const float> engine, const std::vector<double>& torch) {
  double diff = 0, scale = 1e-30;
  for (size_t i = 0; i < torch.size(); ++i) {
    diff = std::max(diff, std::abs(engine[i] - torch[i]));
    scale = std::max(scale, std::abs(torch[i]));
  }
  return diff / scale;
}

class FamilyGoldenTest : public ::testing::TestWithParam<std::string> {};

TEST_P(FamilyGoldenTest, EngineMatchesPyTorch) {
  const nlohmann::json file = ReadLogitsFile();
  ASSERT_TRUE(file.is_object()) << kLogitsFile << " is missing or not JSON";
  const nlohmann::json* found = nullptr;
  for (const auto& j : file.at("cases")) {
    if (j.at("name") == GetParam()) found = &j;
  }
  ASSERT_NE(found, nullptr) << "no case for " << GetParam() << " in " << kLogitsFile;
  ASSERT_NE(FamilyByName(found->at("family").get<std::string>()), nullptr) << found->at("family");
  const FamilyCase c = ParseCase(file, *found);
  ASSERT_TRUE(c.config.Validate().ok()) << c.config.Validate();
  ASSERT_EQ(c.logits.size(), c.ids.size());
  const ModelWeights w = MakeRandomModel(c.config, file.at("seed"));

  EngineOptions options;
  options.num_threads = 2;
  options.max_sequences = 2;
  auto engine = LlamaEngine::Create(w, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const std::span<const int32_t> ids(c.ids);
  const int vocab = c.config.vocab_size;
  // One prefill of all tokens, then the same tokens as decode steps of a second sequence.
  for (bool decode : {false, true}) {
    const int seq = *(*engine)->AddSequence();
    for (size_t begin = 0; begin < ids.size();) {
      const size_t n = decode ? 1 : ids.size();
      ForwardChunk chunk{seq, ids.subspan(begin, n), true};
      auto logits = (*engine)->Forward({&chunk, 1});
      ASSERT_TRUE(logits.ok()) << logits.status();
      for (size_t p = 0; p < n; ++p) {
        const auto row = std::span<const float>(*logits).subspan(p * vocab, vocab);
        EXPECT_LT(RelativeError(row, c.logits[begin + p]), 2e-5)
            << GetParam() << (decode ? " decode" : " prefill") << " position " << begin + p;
      }
      begin += n;
    }
    ASSERT_TRUE((*engine)->RemoveSequence(seq).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, FamilyGoldenTest,
                         ::testing::Values("llama", "mistral", "qwen2", "qwen3",
                                           "qwen3_wide_heads"));

}  // namespace
}  // namespace pdserve
