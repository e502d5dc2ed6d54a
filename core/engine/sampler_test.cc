#include "core/engine/sampler.h"

#include <cmath>
#include <map>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

std::vector<float> Logits() { return {0.5f, 2.0f, -1.0f, 2.0f, 1.0f, 0.0f}; }

TEST(SamplerTest, GreedyTakesTheFirstMaximum) {
  Sampler sampler({});
  EXPECT_EQ(sampler.Sample(Logits()), 1);
}

TEST(SamplerTest, TopKOneAndTinyTopPAreGreedy) {
  SamplingParams k1{1.0f, 1.0f, 1, 42};
  SamplingParams p_tiny{1.0f, 1e-6f, 0, 42};
  Sampler a(k1), b(p_tiny);
  for (int i = 0; i < 50; ++i) {
    EXPECT_EQ(a.Sample(Logits()), 1);
    EXPECT_EQ(b.Sample(Logits()), 1);
  }
}

TEST(SamplerTest, EqualSeedsGiveEqualSequencesAndOtherSeedsDiffer) {
  SamplingParams p{1.0f, 1.0f, 0, 7};
  Sampler a(p), b(p);
  p.seed = 8;
  Sampler c(p);
  std::vector<int> sa, sb, sc;
  for (int i = 0; i < 100; ++i) {
    sa.push_back(a.Sample(Logits()));
    sb.push_back(b.Sample(Logits()));
    sc.push_back(c.Sample(Logits()));
  }
  EXPECT_EQ(sa, sb);
  EXPECT_NE(sa, sc);
}

TEST(SamplerTest, FrequenciesFollowTheSoftmax) {
  Sampler sampler({1.0f, 1.0f, 0, 123});
  std::vector<float> logits = Logits();
  std::map<int, int> counts;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) ++counts[sampler.Sample(logits)];
  double sum = 0;
  for (float l : logits) sum += std::exp(l);
  for (size_t i = 0; i < logits.size(); ++i) {
    double expected = std::exp(logits[i]) / sum;
    EXPECT_NEAR(counts[static_cast<int>(i)] / double{draws}, expected, 0.01) << i;
  }
}

TEST(SamplerTest, TopKAndTopPRestrictTheSupport) {
  Sampler top2({1.0f, 1.0f, 2, 5});
  Sampler nucleus({1.0f, 0.6f, 0, 5});  // ids 1 and 3 hold ~0.62 of the mass together
  for (int i = 0; i < 500; ++i) {
    int a = top2.Sample(Logits()), b = nucleus.Sample(Logits());
    EXPECT_TRUE(a == 1 || a == 3) << a;
    EXPECT_TRUE(b == 1 || b == 3) << b;
  }
}

// Regression: NaN logits, or one token with top_p < 1, emptied the candidate list and crashed.
TEST(SamplerTest, NonFiniteLogitsAndTinyVocabulariesNeverCrash) {
  for (SamplingParams p : {SamplingParams{1.0f, 1.0f, 0, 1}, SamplingParams{1.0f, 0.9f, 0, 1},
                           SamplingParams{0.7f, 0.9f, 3, 1}}) {
    Sampler sampler(p);
    for (std::vector<float> logits :
         {std::vector<float>{NAN, NAN, 2.0f}, std::vector<float>{1.0f, NAN, 2.0f},
          std::vector<float>{1.0f}, std::vector<float>{INFINITY, 0.0f, -INFINITY},
          std::vector<float>{-INFINITY, 0.0f}}) {
      int id = sampler.Sample(logits);
      EXPECT_GE(id, 0);
      EXPECT_LT(id, static_cast<int>(logits.size()));
    }
  }
}

TEST(SamplerTest, TopPIsRenormalizedOverTheTopK) {
  // Top 2 of {2, 2, 1, ...}: ids 1 and 3 hold equal mass; top_p 0.5 within them keeps one: id 1.
  Sampler sampler({1.0f, 0.5f, 2, 9});
  for (int i = 0; i < 200; ++i) EXPECT_EQ(sampler.Sample(Logits()), 1);
}

TEST(SamplerTest, ValidateNamesTheBadField) {
  EXPECT_TRUE(SamplingParams{}.Validate().ok());
  for (SamplingParams p : {SamplingParams{-1.0f, 1.0f, 0, 0}, SamplingParams{NAN, 1.0f, 0, 0},
                           SamplingParams{1.0f, 0.0f, 0, 0}, SamplingParams{1.0f, 1.5f, 0, 0},
                           SamplingParams{1.0f, 1.0f, -2, 0}}) {
    absl::Status s = p.Validate();
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  }
  const SamplingParams bad_top_p{1.0f, 2.0f, 0, 0};
  EXPECT_NE(std::string(bad_top_p.Validate().message()).find("top_p"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
