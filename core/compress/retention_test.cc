// Token retention (KVCrush) inside LlamaEngine: a budget covering the prompt reproduces the engine
// without retention bit for bit, with every technique; a retaining prompt keeps the budget and
// its tokens' positions, and decodes exactly as an engine given the same rows at the same
// positions by hand (and not as one given them at shifted positions); every policy and
// granularity composes with SwiftKV/AcrossKV, ZACK, FP8 and KCache; positions, not cached rows,
// meet the context limit; decode-time eviction keeps long generations within max_tokens; bad
// options are refused.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/compress/profile.h"
#include "core/compress/techniques_testing.h"
#include "core/engine/generator.h"
#include "core/engine/kv_transfer.h"
#include "core/engine/llama_engine.h"
#include "core/kv/kv_row_codec.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using techniques_testing::Config;
using techniques_testing::Engine;
using techniques_testing::Everything;
using techniques_testing::RunPrompt;
using techniques_testing::TestCalibration;
using techniques_testing::Tokens;

RetentionOptions Budget(int tokens, RetentionPolicy policy = RetentionPolicy::kKvCrush) {
  RetentionOptions o;
  o.budget = tokens;
  o.policy = policy;
  o.window = 8;
  o.sink = 2;
  o.recent = 4;
  return o;
}

TEST(RetentionTest, FullBudgetReproducesTheEngineWithoutRetention) {
  const Calibration& calibration = TestCalibration(2, 2);
  for (const CompressionProfile& base : {CompressionProfile{}, Everything()}) {
    const std::vector<float> without = RunPrompt(*Engine(base, &calibration), Tokens(40), 8);
    RetentionOptions roomy_decode = Budget(0);
    roomy_decode.max_tokens = 48 - 8;  // reaches max_tokens + a page only beyond 48 tokens
    for (RetentionOptions retention : {Budget(40), Budget(1000), roomy_decode}) {
      CompressionProfile profile = base;
      profile.retention = retention;
      EXPECT_EQ(RunPrompt(*Engine(profile, &calibration), Tokens(40), 8), without)
          << profile.Describe();
    }
    CompressionProfile whole = base;
    whole.retention.fraction = 1.0;
    EXPECT_EQ(RunPrompt(*Engine(whole, &calibration), Tokens(40), 8), without);
  }
}

// Logits of `steps` teacher-forced decode steps of `sequence`.
std::vector<float> Decode(LlamaEngine& engine, int sequence, int steps) {
  const std::vector<int32_t> next = Tokens(steps, 99);
  std::vector<float> out;
  for (int i = 0; i < steps; ++i) {
    ForwardChunk step{sequence, std::span(next).subspan(i, 1)};
    absl::StatusOr<std::span<const float>> logits = engine.Forward({&step, 1});
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (logits.ok()) out.insert(out.end(), logits->begin(), logits->end());
  }
  return out;
}

// Copies, cache layer by cache layer, token kept[i]'s K/V rows of `from` (every head) into row i
// of `to`, through the engines' pages (f32 rows: exact).
void CopyRows(LlamaEngine& from_engine, int from, LlamaEngine& to_engine, int to,
              const std::vector<int>& kept) {
  const int page_size = from_engine.options().kv_page_size;
  std::vector<float> row(Config().head_dim());
  for (size_t c = 0; c < from_engine.plan().caches.size(); ++c) {
    const KvLayerLayout& layout = from_engine.plan().caches[c].layout;
    for (size_t i = 0; i < kept.size(); ++i) {
      KvPageSlots source = *from_engine.SequencePage(from, c, kept[i] / page_size);
      KvPageSlots target = *to_engine.SequencePage(to, c, static_cast<int>(i) / page_size);
      for (int g = 0; g < Config().n_kv_heads; ++g) {
        ReadKvRow(layout.k, source.k, g, kept[i] % page_size, row.data());
        WriteKvRow(layout.k, target.k, g, static_cast<int>(i) % page_size, row.data());
        ReadKvRow(layout.v, source.v, g, kept[i] % page_size, row.data());
        WriteKvRow(layout.v, target.v, g, static_cast<int>(i) % page_size, row.data());
      }
    }
  }
}

TEST(RetentionTest, DecodesOverTheKeptRowsAtTheirPositions) {
  // Recent policy, sink 2 and budget 20 of 50: tokens 0, 1 and 32 .. 49 stay.
  CompressionProfile retaining;
  retaining.retention = Budget(20, RetentionPolicy::kRecent);
  std::unique_ptr<LlamaEngine> engine = Engine(retaining);
  const std::vector<int32_t> prompt = Tokens(50);
  const int sequence = *engine->AddSequence();
  ForwardChunk chunk{sequence, prompt};
  chunk.retain = true;
  ASSERT_TRUE(engine->Forward({&chunk, 1}).ok());
  EXPECT_EQ(engine->SequenceLength(sequence), 20);
  EXPECT_EQ(engine->SequencePosition(sequence), 50);
  std::vector<int> kept = {0, 1};
  for (int t = 32; t < 50; ++t) kept.push_back(t);
  EXPECT_EQ(*engine->RowPositions(sequence, 1), std::vector<int32_t>(kept.begin(), kept.end()));
  const std::vector<float> retained = Decode(*engine, sequence, 6);
  EXPECT_EQ(engine->SequencePosition(sequence), 56);
  std::vector<int32_t> decoded(kept.begin(), kept.end());
  for (int p = 50; p < 56; ++p) decoded.push_back(p);
  EXPECT_EQ(*engine->RowPositions(sequence, 3), decoded);

  std::unique_ptr<LlamaEngine> full = Engine({});
  const int whole = *full->AddSequence();
  ForwardChunk plain{whole, prompt};
  ASSERT_TRUE(full->Forward({&plain, 1}).ok());
  std::unique_ptr<LlamaEngine> by_hand = Engine({});
  const int copied = *by_hand->AddSequenceWithTokens(20);
  CopyRows(*full, whole, *by_hand, copied, kept);
  ASSERT_TRUE(by_hand->SetSequencePosition(copied, 50).ok());
  EXPECT_EQ(by_hand->RowPositions(copied, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);  // they came with the pages
  EXPECT_EQ(Decode(*by_hand, copied, 6), retained);

  // The same rows at positions 20 .. decode otherwise (the positions matter), and so does the whole
  // prompt (the retention really dropped something).
  const int shifted = *by_hand->AddSequenceWithTokens(20);
  CopyRows(*full, whole, *by_hand, shifted, kept);
  EXPECT_NE(Decode(*by_hand, shifted, 6), retained);
  EXPECT_NE(Decode(*full, whole, 6), retained);
}

TEST(RetentionTest, EveryPolicyKeepsItsBudgetWithEveryTechnique) {
  const Calibration& calibration = TestCalibration(2, 2);
  const int vocab = Config().vocab_size;
  for (RetentionPolicy policy :
       {RetentionPolicy::kRecent, RetentionPolicy::kImportance, RetentionPolicy::kKvCrush}) {
    for (RetentionGranularity granularity :
         {RetentionGranularity::kToken, RetentionGranularity::kPage}) {
      CompressionProfile profile = Everything();
      profile.retention = Budget(0, policy);
      profile.retention.fraction = 0.25;
      profile.retention.granularity = granularity;
      if (granularity == RetentionGranularity::kPage) profile.fp8 = KvScaleMode::kPerPageHead;
      std::unique_ptr<LlamaEngine> engine = Engine(profile, &calibration);
      const int sequence = *engine->AddSequence();
      const std::vector<int32_t> prompt = Tokens(77);
      ForwardChunk chunk{sequence, prompt};
      chunk.retain = true;
      ASSERT_TRUE(engine->Forward({&chunk, 1}).ok()) << profile.Describe();
      // 20 tokens, or 2 whole pages of 8 with the partial last page of 5.
      const int kept = granularity == RetentionGranularity::kToken ? 20 : 8 + 5;
      EXPECT_EQ(engine->SequenceLength(sequence), kept) << profile.Describe();
      EXPECT_EQ(engine->SequencePosition(sequence), 77);
      for (int c = 0; c < static_cast<int>(engine->plan().caches.size()); ++c) {
        const std::vector<int32_t> positions = *engine->RowPositions(sequence, c);
        ASSERT_EQ(static_cast<int>(positions.size()), kept);
        EXPECT_EQ(positions.front(), 0);  // sink
        EXPECT_EQ(positions.back(), 76);  // the prompt's last token
        EXPECT_TRUE(std::is_sorted(positions.begin(), positions.end()) &&
                    std::adjacent_find(positions.begin(), positions.end()) == positions.end());
      }
      const std::vector<float> logits = Decode(*engine, sequence, 4);
      ASSERT_EQ(logits.size(), 4u * vocab);
      for (float x : logits) ASSERT_TRUE(std::isfinite(x)) << profile.Describe();
    }
  }
}

// The disaggregated path: a retaining engine's pages, encoded, decoded and imported into another
// engine given the prompt's position, carry each cache layer's kept positions and score biases
// (KVCrush representatives' weights, some nonzero), and the importer decodes exactly as the
// exporter does.
TEST(RetentionTest, PositionsSurviveThePageRoundTrip) {
  const Calibration& calibration = TestCalibration(2, 2);
  CompressionProfile profile = Everything();
  profile.retention = Budget(30);
  std::unique_ptr<LlamaEngine> exporter = Engine(profile, &calibration);
  std::unique_ptr<LlamaEngine> importer = Engine(profile, &calibration);
  const int sequence = *exporter->AddSequence();
  const std::vector<int32_t> prompt = Tokens(70);
  ForwardChunk chunk{sequence, prompt};
  chunk.retain = true;
  ASSERT_TRUE(exporter->Forward({&chunk, 1}).ok());
  const int kept = exporter->SequenceLength(sequence), page_size = 8;
  ASSERT_EQ(kept, 30);
  std::vector<std::string> pages;
  const int caches = static_cast<int>(exporter->plan().caches.size());
  for (int c = 0; c < caches; ++c) {
    for (int p = 0; p * page_size < kept; ++p) {
      absl::StatusOr<std::string> page = EncodeSequencePage(*exporter, sequence, c, p, 9, 0);
      ASSERT_TRUE(page.ok()) << page.status();
      pages.push_back(*std::move(page));
    }
  }
  const int target = *importer->AddSequenceWithTokens(kept);
  auto view = [&](const std::string& bytes) {
    return *DecodeKvPage({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
  };
  // Before it is told the prompt's length, the importer refuses the last page (position 69).
  EXPECT_EQ(ImportKvPage(*importer, target, view(pages[3]), true).code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(importer->SetSequencePosition(target, 70).ok());
  bool weighted = false;
  for (int c = 0, i = 0; c < caches; ++c) {
    const std::vector<int32_t> positions = *exporter->RowPositions(sequence, c);
    const std::vector<float> biases = *exporter->RowScoreBiases(sequence, c);
    weighted |= std::any_of(biases.begin(), biases.end(), [](float b) { return b > 0.0f; });
    for (int p = 0; p * page_size < kept; ++p, ++i) {
      const KvPageView page = view(pages[i]);
      EXPECT_EQ(page.header.positions,
                std::vector<int32_t>(positions.begin() + p * page_size,
                                     positions.begin() + std::min(kept, (p + 1) * page_size)));
      EXPECT_EQ(page.header.score_biases,
                std::vector<float>(biases.begin() + p * page_size,
                                   biases.begin() + std::min(kept, (p + 1) * page_size)));
      ASSERT_TRUE(ImportKvPage(*importer, target, page, true).ok());
    }
    EXPECT_EQ(*importer->RowScoreBiases(target, c), biases);
  }
  EXPECT_TRUE(weighted);
  EXPECT_EQ(Decode(*importer, target, 5), Decode(*exporter, sequence, 5));
}

// Decode-time eviction (H2O): a long generation stays within max_tokens + a page, keeps
// max_tokens after each eviction, and its positions and logits go on as they should, with every
// technique on.
TEST(RetentionTest, DecodeEvictionKeepsLongGenerationsWithinMaxTokens) {
  const Calibration& calibration = TestCalibration(2, 2);
  std::vector<std::vector<int32_t>> kept;  // per policy
  for (RetentionPolicy policy : {RetentionPolicy::kKvCrush, RetentionPolicy::kRecent}) {
    CompressionProfile profile = Everything();
    profile.retention = Budget(0, policy);
    profile.retention.max_tokens = 24;
    std::unique_ptr<LlamaEngine> engine = Engine(profile, &calibration);
    const int sequence = *engine->AddSequence();
    const std::vector<int32_t> prompt = Tokens(20);
    ForwardChunk chunk{sequence, prompt};
    chunk.retain = true;
    ASSERT_TRUE(engine->Forward({&chunk, 1}).ok());
    const std::vector<int32_t> next = Tokens(60, 5);
    int evictions = 0, longest = 0;
    for (int i = 0; i < 60; ++i) {
      const int before = engine->SequenceLength(sequence);
      ForwardChunk step{sequence, std::span(next).subspan(i, 1)};
      absl::StatusOr<std::span<const float>> logits = engine->Forward({&step, 1});
      ASSERT_TRUE(logits.ok()) << logits.status();
      for (float x : *logits) ASSERT_TRUE(std::isfinite(x));
      const int after = engine->SequenceLength(sequence);
      if (after < before) {
        ++evictions;
        EXPECT_EQ(after, 24);
      }
      longest = std::max(longest, after);
    }
    EXPECT_EQ(longest, 24 + 8 - 1);
    EXPECT_GE(evictions, 5);
    EXPECT_EQ(engine->SequencePosition(sequence), 80);
    const std::vector<int32_t> positions = *engine->RowPositions(sequence, 0);
    EXPECT_EQ(positions.back(), 79);
    EXPECT_EQ(positions.front(), 0);  // sink
    EXPECT_TRUE(std::adjacent_find(positions.begin(), positions.end(),
                                   std::greater_equal<int32_t>()) == positions.end());
    kept.push_back(positions);
  }
  // The running scores chose (KVCrush keeps older tokens the newest-only policy drops).
  EXPECT_NE(kept[0], kept[1]);
}

// The prompt's last chunk holds the observation window, whatever max_batch_tokens cuts (32 here).
TEST(RetentionTest, PromptChunksEndWithTheObservationWindow) {
  CompressionProfile profile;
  profile.retention = Budget(10);  // window 8
  std::unique_ptr<LlamaEngine> engine = Engine(profile, nullptr, 32);
  EXPECT_EQ(PromptChunkSizes(*engine, 5), (std::vector<int>{5}));
  EXPECT_EQ(PromptChunkSizes(*engine, 32), (std::vector<int>{32}));
  EXPECT_EQ(PromptChunkSizes(*engine, 33), (std::vector<int>{25, 8}));
  EXPECT_EQ(PromptChunkSizes(*engine, 69), (std::vector<int>{32, 29, 8}));
  EXPECT_EQ(PromptChunkSizes(*engine, 90), (std::vector<int>{32, 32, 26}));
  EXPECT_EQ(PromptChunkSizes(*Engine({}, nullptr, 32), 33), (std::vector<int>{32, 1}));
}

// A one-token last prompt chunk is the prompt's end, not a decode step: decode-time eviction
// waits for the decode steps (regression: it evicted the prompt by one query's scores).
TEST(RetentionTest, DecodeEvictionLeavesPromptsAlone) {
  CompressionProfile profile;
  profile.retention = Budget(0);
  profile.retention.max_tokens = 24;
  std::unique_ptr<LlamaEngine> engine = Engine(profile, nullptr, 32);
  EXPECT_EQ(PromptChunkSizes(*engine, 33), (std::vector<int>{32, 1}));
  const int sequence = *engine->AddSequence();
  const std::vector<int32_t> prompt = Tokens(33);
  ASSERT_TRUE(Prefill(*engine, sequence, prompt).ok());
  EXPECT_EQ(engine->SequenceLength(sequence), 33);
  EXPECT_EQ(Decode(*engine, sequence, 1).size(), static_cast<size_t>(Config().vocab_size));
  EXPECT_EQ(engine->SequenceLength(sequence), 24);  // the first decode step evicted
}

TEST(RetentionTest, ChunksWithoutRetainKeepEveryToken) {
  CompressionProfile profile;
  profile.retention = Budget(10);
  std::unique_ptr<LlamaEngine> engine = Engine(profile);
  const int sequence = *engine->AddSequence();
  const std::vector<int32_t> prompt = Tokens(40);
  ForwardChunk chunk{sequence, prompt};
  ASSERT_TRUE(engine->Forward({&chunk, 1}).ok());
  EXPECT_EQ(engine->SequenceLength(sequence), 40);
}

TEST(RetentionTest, PositionsMeetTheContextLimit) {
  CompressionProfile profile;
  profile.retention = Budget(10, RetentionPolicy::kRecent);
  std::unique_ptr<LlamaEngine> engine = Engine(profile);
  const int context = engine->max_context();
  const int sequence = *engine->AddSequence();
  const std::vector<int32_t> prompt = Tokens(context - 2);
  ForwardChunk chunk{sequence, prompt};
  chunk.retain = true;
  ASSERT_TRUE(engine->Forward({&chunk, 1}).ok());
  EXPECT_EQ(engine->SequenceLength(sequence), 10);
  EXPECT_EQ(Decode(*engine, sequence, 2).size(), 2u * Config().vocab_size);
  const int32_t token = 5;
  ForwardChunk beyond{sequence, {&token, 1}};
  const absl::StatusOr<std::span<const float>> refused = engine->Forward({&beyond, 1});
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->SetSequencePosition(sequence, context + 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->SetSequencePosition(sequence, 5).code(), absl::StatusCode::kInvalidArgument);
}

TEST(RetentionTest, RefusesBadOptions) {
  KvCompression compression;
  compression.retention = Budget(10);
  EXPECT_TRUE(compression.Validate().ok());
  compression.retention.recent = 0;
  EXPECT_EQ(compression.Validate().code(), absl::StatusCode::kInvalidArgument);
  compression.retention.recent = 4;
  compression.retention.kvcrush_ratio = 2.0;
  EXPECT_NE(compression.Validate().message().find("ratio"), std::string::npos);
  compression.retention.kvcrush_ratio = 0.25;
  compression.retention.max_tokens = -1;
  EXPECT_NE(compression.Validate().message().find("max tokens"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
