#include "core/kv/token_retention.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <set>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

std::vector<float> RandomImportance(int n_heads, int n_tokens, uint64_t seed) {
  std::mt19937_64 random(seed);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  std::vector<float> importance(static_cast<size_t>(n_heads) * n_tokens);
  for (float& x : importance) x = uniform(random);
  return importance;
}

RetentionOptions Crush(int budget) {
  RetentionOptions o;
  o.budget = budget;
  o.kvcrush_ratio = 0.5;
  o.sink = 2;
  o.recent = 4;
  o.pool = 1;
  return o;
}

bool IsStrictlyAscending(const std::vector<int>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::greater_equal<int>()) == v.end();
}

TEST(RetentionOptionsTest, ValidateNamesTheField) {
  RetentionOptions o;
  EXPECT_TRUE(o.Validate().ok());
  o.fraction = 1.5;
  EXPECT_NE(o.Validate().message().find("fraction"), std::string::npos);
  o = {};
  o.kvcrush_ratio = -0.1;
  EXPECT_NE(o.Validate().message().find("ratio"), std::string::npos);
  o = {};
  o.kvcrush_weight = 1.5;
  EXPECT_NE(o.Validate().message().find("weight"), std::string::npos);
  o = {};
  o.kvcrush_weight_cap = 0.5;
  EXPECT_NE(o.Validate().message().find("cap"), std::string::npos);
  o = {};
  o.window = 0;
  EXPECT_NE(o.Validate().message().find("window"), std::string::npos);
  o = {};
  o.budget = -1;
  EXPECT_NE(o.Validate().message().find("budget"), std::string::npos);
  o = {};
  o.pool = 4;
  EXPECT_NE(o.Validate().message().find("pool"), std::string::npos);
}

TEST(RetentionOptionsTest, BudgetForTokensOrFraction) {
  RetentionOptions o;
  EXPECT_FALSE(o.enabled());
  EXPECT_EQ(o.BudgetFor(100), 100);
  o.fraction = 0.25;
  EXPECT_TRUE(o.enabled());
  EXPECT_EQ(o.BudgetFor(100), 25);
  EXPECT_EQ(o.BudgetFor(101), 26);  // rounded up
  o.budget = 40;                    // a token budget wins over the fraction
  EXPECT_EQ(o.BudgetFor(100), 40);
  EXPECT_EQ(o.BudgetFor(30), 30);
}

TEST(TokenRetentionTest, FullBudgetKeepsEveryToken) {
  const std::vector<float> importance = RandomImportance(4, 50, 1);
  for (RetentionPolicy policy :
       {RetentionPolicy::kRecent, RetentionPolicy::kImportance, RetentionPolicy::kKvCrush}) {
    RetentionOptions o = Crush(50);
    o.policy = policy;
    const std::vector<int> kept = SelectRetainedTokens(importance, 4, 50, 16, o);
    ASSERT_EQ(kept.size(), 50u);
    for (int t = 0; t < 50; ++t) EXPECT_EQ(kept[t], t);
  }
}

TEST(TokenRetentionTest, KeepsBudgetSinkAndRecentInOrder) {
  const int n = 200;
  const std::vector<float> importance = RandomImportance(4, n, 2);
  for (int budget : {6, 7, 20, 61, 199}) {
    const std::vector<int> kept = SelectRetainedTokens(importance, 4, n, 16, Crush(budget));
    ASSERT_EQ(static_cast<int>(kept.size()), budget);
    EXPECT_TRUE(IsStrictlyAscending(kept));
    EXPECT_EQ(kept.front(), 0);
    EXPECT_EQ(kept[1], 1);
    for (int t = n - 4; t < n; ++t) EXPECT_TRUE(std::binary_search(kept.begin(), kept.end(), t));
  }
}

TEST(TokenRetentionTest, ImportanceKeepsTheBestScoredTokens) {
  const int n = 64;
  std::vector<float> importance(2 * n, 0.0f);
  for (int t : {10, 20, 30}) importance[t] = 1.0f;  // head 0
  importance[n + 40] = 2.0f;                        // head 1
  RetentionOptions o = Crush(2 + 4 + 4);
  o.policy = RetentionPolicy::kImportance;
  const std::vector<int> kept = SelectRetainedTokens(importance, 2, n, 16, o);
  EXPECT_EQ(kept, (std::vector<int>{0, 1, 10, 20, 30, 40, 60, 61, 62, 63}));
}

// SnapKV's pooling: a token next to a spike outranks an isolated, slightly higher one.
TEST(TokenRetentionTest, PoolingKeepsTheNeighboursOfImportantTokens) {
  const int n = 64;
  std::vector<float> importance(n, 0.0f);
  importance[20] = 10.0f;
  importance[21] = 1.0f;
  importance[40] = 1.5f;
  RetentionOptions o = Crush(2 + 4 + 2);  // two tokens beyond sink and recent
  o.policy = RetentionPolicy::kImportance;
  EXPECT_EQ(SelectRetainedTokens(importance, 1, n, 16, o),
            (std::vector<int>{0, 1, 20, 40, 60, 61, 62, 63}));
  o.pool = 3;  // 19 and 22 now score (10 + 1) / 3 or so; 40 scores 1.5 / 3
  const std::vector<int> pooled = SelectRetainedTokens(importance, 1, n, 16, o);
  EXPECT_EQ(pooled, (std::vector<int>{0, 1, 20, 21, 60, 61, 62, 63}));
}

TEST(TokenRetentionTest, RecentKeepsSinkThenTheNewest) {
  RetentionOptions o = Crush(10);
  o.policy = RetentionPolicy::kRecent;
  const std::vector<int> kept = SelectRetainedTokens({}, 0, 100, 16, o);
  EXPECT_EQ(kept, (std::vector<int>{0, 1, 92, 93, 94, 95, 96, 97, 98, 99}));
}

TEST(TokenRetentionTest, DeterministicForASeed) {
  const std::vector<float> importance = RandomImportance(8, 300, 3);
  RetentionOptions o = Crush(60);
  o.seed = 7;
  const std::vector<int> a = SelectRetainedTokens(importance, 8, 300, 16, o);
  EXPECT_EQ(a, SelectRetainedTokens(importance, 8, 300, 16, o));
  // Another seed draws another anchor, and so (almost surely, for this input) other
  // representatives.
  o.seed = 8;
  EXPECT_NE(a, SelectRetainedTokens(importance, 8, 300, 16, o));
}

TEST(TokenRetentionTest, KvCrushAddsRepresentativesOfTheEvicted) {
  const int n = 300;
  const std::vector<float> importance = RandomImportance(8, n, 4);
  RetentionOptions snapkv = Crush(60);
  snapkv.policy = RetentionPolicy::kImportance;
  snapkv.budget = 60 - 27;  // what SnapKV keeps of KVCrush's 60 (27 = ⌊0.5 · 54⌋ representatives)
  const std::vector<int> important = SelectRetainedTokens(importance, 8, n, 16, snapkv);
  const std::vector<int> crushed = SelectRetainedTokens(importance, 8, n, 16, Crush(60));
  ASSERT_EQ(crushed.size(), 60u);
  // KVCrush = the same importance selection plus 27 tokens SnapKV evicts.
  EXPECT_TRUE(std::includes(crushed.begin(), crushed.end(), important.begin(), important.end()));
}

// Every prompt token is accounted for once: sink, recent and importance tokens stand for
// themselves, each representative for its group, so what the kept tokens stand for sums to the
// prompt (to the counts given, when an earlier selection gave some).
TEST(TokenRetentionTest, RepresentativesStandForTheirGroups) {
  const int n = 300;
  const std::vector<float> importance = RandomImportance(8, n, 6);
  for (RetentionGranularity granularity :
       {RetentionGranularity::kToken, RetentionGranularity::kPage}) {
    RetentionOptions o = Crush(16 * 6 + 12);
    o.granularity = granularity;
    std::vector<float> stands_for;
    const std::vector<int> kept = SelectRetainedTokens(importance, 8, n, 16, o, &stands_for);
    ASSERT_EQ(stands_for.size(), kept.size());
    EXPECT_DOUBLE_EQ(std::accumulate(stands_for.begin(), stands_for.end(), 0.0), n);
    EXPECT_TRUE(std::all_of(stands_for.begin(), stands_for.end(), [](float c) { return c >= 1; }));
    EXPECT_GT(*std::max_element(stands_for.begin(), stands_for.end()), 2.0f);
    // The first token (sink) and the last stand for themselves.
    EXPECT_EQ(stands_for.front(), 1.0f);
    EXPECT_EQ(stands_for.back(), 1.0f);
  }
  // Counts from an earlier selection add up the same way.
  std::vector<float> counts(n);
  for (int t = 0; t < n; ++t) counts[t] = 1.0f + static_cast<float>(t % 4);
  std::vector<float> stands_for;
  SelectRetainedTokens(importance, 8, n, 16, Crush(40), &stands_for, counts);
  EXPECT_DOUBLE_EQ(std::accumulate(stands_for.begin(), stands_for.end(), 0.0),
                   std::accumulate(counts.begin(), counts.end(), 0.0));
}

// Without weights (weight 0, or a policy without representatives) each kept token stands for its
// own count, and the selection is the same as with them.
TEST(TokenRetentionTest, WithoutWeightsEachTokenStandsForItself) {
  const int n = 200;
  const std::vector<float> importance = RandomImportance(4, n, 8);
  RetentionOptions plain = Crush(50);
  plain.kvcrush_weight = 0.0;
  RetentionOptions snapkv = Crush(50);
  snapkv.policy = RetentionPolicy::kImportance;
  for (const RetentionOptions& o : {plain, snapkv}) {
    std::vector<float> stands_for;
    const std::vector<int> kept = SelectRetainedTokens(importance, 4, n, 16, o, &stands_for);
    EXPECT_EQ(stands_for, std::vector<float>(kept.size(), 1.0f));
    EXPECT_EQ(RetentionScoreBias(o, 9.0f), 0.0f);
    EXPECT_EQ(RetentionCount(o, 0.0f), 1.0f);
  }
  EXPECT_EQ(SelectRetainedTokens(importance, 4, n, 16, plain),
            SelectRetainedTokens(importance, 4, n, 16, Crush(50)));
  const RetentionOptions weighted = Crush(50);
  EXPECT_NEAR(RetentionScoreBias(weighted, 6.0f), 0.5 * std::log(6.0), 1e-6);
  EXPECT_NEAR(RetentionCount(weighted, RetentionScoreBias(weighted, 6.0f)), 6.0f, 1e-5);
  EXPECT_EQ(RetentionScoreBias(weighted, 1.0f), 0.0f);
  // Counts beyond the cap (8) weigh as much as the cap.
  EXPECT_NEAR(RetentionScoreBias(weighted, 100.0f), 0.5 * std::log(8.0), 1e-6);
  EXPECT_NEAR(RetentionCount(weighted, RetentionScoreBias(weighted, 100.0f)), 8.0f, 1e-5);
}

TEST(TokenRetentionTest, PageGranularityKeepsWholePages) {
  const int n = 16 * 20 + 5, page = 16;  // 21 pages, the last partial
  const std::vector<float> importance = RandomImportance(4, n, 5);
  RetentionOptions o = Crush(16 * 6 + 3);  // 6 pages
  o.granularity = RetentionGranularity::kPage;
  const std::vector<int> kept = SelectRetainedTokens(importance, 4, n, page, o);
  std::set<int> pages;
  for (int t : kept) pages.insert(t / page);
  EXPECT_EQ(pages.size(), 6u);
  EXPECT_TRUE(pages.count(0));   // sink
  EXPECT_TRUE(pages.count(20));  // recent (partial page)
  int expected_tokens = 0;
  for (int p : pages) expected_tokens += p == 20 ? 5 : page;
  EXPECT_EQ(static_cast<int>(kept.size()), expected_tokens);
  EXPECT_TRUE(IsStrictlyAscending(kept));
}

TEST(TokenRetentionTest, RetainedTokenCountIsWhatSelectionKeeps) {
  for (RetentionGranularity granularity :
       {RetentionGranularity::kToken, RetentionGranularity::kPage}) {
    for (int n : {1, 7, 16, 17, 100, 333}) {
      for (double fraction : {0.01, 0.125, 0.25, 0.5, 0.99, 1.0}) {
        RetentionOptions o = Crush(0);
        o.fraction = fraction;
        o.granularity = granularity;
        const std::vector<float> importance = RandomImportance(3, n, n);
        EXPECT_EQ(RetainedTokenCount(o, n, 16),
                  static_cast<int>(SelectRetainedTokens(importance, 3, n, 16, o).size()))
            << "n " << n << " fraction " << fraction;
      }
    }
  }
}

// Distances to the alternate anchor 0101 of the units 0..7 below: 0 2 1 4 1 1 2 3, so the sorted
// order is 0, 2, 4, 5, 1, 6, 7, 3.
const std::vector<uint8_t> kBits = {
    0, 1, 0, 1,  // 0
    1, 1, 1, 1,  // 1
    0, 1, 0, 0,  // 2
    1, 0, 1, 0,  // 3
    0, 1, 1, 1,  // 4
    1, 1, 0, 1,  // 5
    0, 0, 0, 0,  // 6
    1, 0, 1, 1,  // 7
};

TEST(PickRepresentativesTest, HandBuiltPatternGivesTheKnownSelection) {
  const std::vector<int> all = {0, 1, 2, 3, 4, 5, 6, 7};
  EXPECT_EQ(PickRepresentatives(all, kBits, 4, 4, AnchorMode::kAlternate, 0),
            (std::vector<int>{0, 4, 1, 7}));  // every second of the sorted order
  EXPECT_EQ(PickRepresentatives(all, kBits, 4, 3, AnchorMode::kAlternate, 0),
            (std::vector<int>{0, 4, 6}));  // sorted positions 0, 2, 5
  // Anchor 1111: distances 2 0 3 2 1 1 4 1 → sorted 1, 4, 5, 7, 0, 3, 2, 6.
  EXPECT_EQ(PickRepresentatives(all, kBits, 4, 2, AnchorMode::kOnes, 0), (std::vector<int>{1, 0}));
}

TEST(PickRepresentativesTest, SubsetOfCandidatesAtMostTheirCount) {
  const std::vector<int> some = {1, 3, 6};
  const std::vector<int> picked = PickRepresentatives(some, kBits, 4, 10, AnchorMode::kZeros, 0);
  EXPECT_EQ(std::set<int>(picked.begin(), picked.end()), std::set<int>(some.begin(), some.end()));
  EXPECT_TRUE(PickRepresentatives(some, kBits, 4, 0, AnchorMode::kZeros, 0).empty());
  EXPECT_TRUE(PickRepresentatives({}, kBits, 4, 3, AnchorMode::kMean, 0).empty());
}

TEST(PickRepresentativesTest, UniformlySpacedAlongTheSortedOrder) {
  // Unit u has ⌊u/5⌋ bits set: its distance to the zero anchor is ⌊u/5⌋, so the sorted order is
  // 0..59 and 6 representatives are every tenth.
  const int heads = 12, m = 60;
  std::vector<uint8_t> bits(static_cast<size_t>(m) * heads, 0);
  std::vector<int> candidates(m);
  for (int u = 0; u < m; ++u) {
    candidates[u] = u;
    for (int h = 0; h < u / 5; ++h) bits[u * heads + h] = 1;  // distance u / 5: sorted = 0..59
  }
  const std::vector<int> picked =
      PickRepresentatives(candidates, bits, heads, 6, AnchorMode::kZeros, 0);
  EXPECT_EQ(picked, (std::vector<int>{0, 10, 20, 30, 40, 50}));
}

}  // namespace
}  // namespace pdserve
