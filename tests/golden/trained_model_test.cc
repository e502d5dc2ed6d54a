// The committed trained model (models/pd10m, train/) against the independent PyTorch forward pass
// (tests/golden/torch_forward.py, float64) and SentencePiece's own library: trained_model.json
// holds a test-split excerpt, its token ids, PyTorch's log-probability of every next token, its
// last-position logits and a greedy continuation. The model runs from its GGUF file and from a
// Hugging Face directory written from it, beside the real tokenizer.model. Regenerate the file
// with tests/golden/make_trained_golden.sh after retraining.
#include <cmath>
#include <filesystem>
#include <fstream>

#include "core/engine/llama_engine.h"
#include "core/engine/logits_testing.h"
#include "core/formats/hf_model.h"
#include "core/formats/model_loader.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"

namespace pdserve {
namespace {

const std::string kModelDir = std::string(PDSERVE_SOURCE_DIR) + "/models/pd10m";
const std::string kGoldenFile =
    std::string(PDSERVE_SOURCE_DIR) + "/tests/golden/trained_model.json";

nlohmann::json ReadGolden() {
  std::ifstream in(kGoldenFile);
  return nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
}

std::unique_ptr<Engine> MakeEngine(const ModelWeights& weights) {
  EngineOptions options;
  options.num_threads = 2;
  options.max_sequences = 1;
  auto engine = LlamaEngine::Create(weights, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// log p(ids[i+1] | ids[..i]) for every position, and the last position's logits, from one prefill.
struct Scores {
  std::vector<double> next_token_log_probs;
  std::vector<float> last_logits;
};

Scores Score(Engine& engine, const std::vector<int32_t>& ids, int vocab) {
  Scores scores;
  const int seq = *engine.AddSequence();
  ForwardChunk chunk{seq, ids, /*all_logits=*/true};
  auto logits = engine.Forward({&chunk, 1});
  EXPECT_TRUE(logits.ok()) << logits.status();
  if (!logits.ok()) return scores;
  for (size_t p = 0; p + 1 < ids.size(); ++p) {
    const float* row = logits->data() + p * vocab;
    double top = row[0], z = 0;
    for (int i = 0; i < vocab; ++i) top = std::max(top, double(row[i]));
    for (int i = 0; i < vocab; ++i) z += std::exp(row[i] - top);
    scores.next_token_log_probs.push_back(row[ids[p + 1]] - top - std::log(z));
  }
  scores.last_logits.assign(logits->end() - vocab, logits->end());
  EXPECT_TRUE(engine.RemoveSequence(seq).ok());
  return scores;
}

std::vector<int32_t> Greedy(Engine& engine, const std::vector<int32_t>& prompt, int count,
                            int vocab) {
  std::vector<int32_t> out;
  const int seq = *engine.AddSequence();
  std::vector<int32_t> next = prompt;
  for (int i = 0; i < count; ++i) {
    ForwardChunk chunk{seq, next, false};
    auto logits = engine.Forward({&chunk, 1});
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) break;
    const auto last = logits->end() - vocab;
    out.push_back(static_cast<int32_t>(std::max_element(last, logits->end()) - last));
    next = {out.back()};
  }
  EXPECT_TRUE(engine.RemoveSequence(seq).ok());
  return out;
}

// Everything the golden file pins, for a model loaded any way.
void ExpectMatchesPyTorch(const LoadedModel& model, const nlohmann::json& golden,
                          const std::string& how) {
  const auto ids = golden.at("ids").get<std::vector<int32_t>>();
  const std::vector<int> encoded =
      model.tokenizer->Encode(golden.at("text").get<std::string>(), /*add_bos=*/true);
  EXPECT_EQ(std::vector<int32_t>(encoded.begin(), encoded.end()), ids)
      << how << ": tokens differ from SentencePiece's";

  const int vocab = model.weights.config.vocab_size;
  auto engine = MakeEngine(model.weights);
  ASSERT_NE(engine, nullptr);
  const Scores scores = Score(*engine, ids, vocab);
  const auto torch_log_probs = golden.at("next_token_log_probs").get<std::vector<double>>();
  ASSERT_EQ(scores.next_token_log_probs.size(), torch_log_probs.size());
  double sum = 0, worst = 0;
  for (size_t i = 0; i < torch_log_probs.size(); ++i) {
    sum += scores.next_token_log_probs[i];
    worst = std::max(worst, std::abs(scores.next_token_log_probs[i] - torch_log_probs[i]));
  }
  const double perplexity = std::exp(-sum / torch_log_probs.size());
  EXPECT_NEAR(perplexity / golden.at("perplexity").get<double>(), 1.0, 1e-3)
      << how << ": perplexity " << perplexity << " against PyTorch's " << golden.at("perplexity");
  EXPECT_LT(worst, 2e-3) << how << ": the largest log-probability difference";

  const auto torch_last = golden.at("last_logits").get<std::vector<float>>();
  EXPECT_LT(MaxRelativeError(scores.last_logits, torch_last), 1e-4)
      << how << ": last-position logits";

  const auto prompt = golden.at("greedy_prompt").get<std::vector<int32_t>>();
  const auto expected = golden.at("greedy_ids").get<std::vector<int32_t>>();
  EXPECT_EQ(Greedy(*engine, prompt, expected.size(), vocab), expected)
      << how << ": greedy continuation";
}

TEST(TrainedModelTest, GgufMatchesPyTorchAndSentencePiece) {
  const nlohmann::json golden = ReadGolden();
  ASSERT_TRUE(golden.is_object()) << kGoldenFile << " is missing or not JSON";
  auto model = LoadModel(kModelDir + "/model.gguf");
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->weights.config.n_layers, 8);
  EXPECT_EQ(model->weights.config.head_dim(), 64);
  EXPECT_EQ(model->weights.config.n_heads, 2 * model->weights.config.n_kv_heads);
  ExpectMatchesPyTorch(*model, golden, "gguf");
}

TEST(TrainedModelTest, HuggingFaceCopyWithTheRealTokenizerMatchesPyTorch) {
  const nlohmann::json golden = ReadGolden();
  ASSERT_TRUE(golden.is_object()) << kGoldenFile << " is missing or not JSON";
  auto gguf = LoadModel(kModelDir + "/model.gguf");
  ASSERT_TRUE(gguf.ok()) << gguf.status();
  const std::string dir = ::testing::TempDir() + "/pd10m-hf";
  std::filesystem::remove_all(dir);
  ASSERT_TRUE(
      WriteHfModel(dir, gguf->weights, gguf->tokenizer->ExportVocabulary(), HfWriteOptions{}).ok());
  // The directory's tokenizer is the SentencePiece model the corpus was tokenized with.
  std::filesystem::copy_file(kModelDir + "/tokenizer.model", dir + "/tokenizer.model",
                             std::filesystem::copy_options::overwrite_existing);
  auto hf = LoadModel(dir);
  ASSERT_TRUE(hf.ok()) << hf.status();
  EXPECT_EQ(hf->format, ModelFormat::kHuggingFace);
  ExpectMatchesPyTorch(*hf, golden, "hf");
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pdserve
