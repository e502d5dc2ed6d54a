#include "services/router/prefix_index.h"

#include <cstdint>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

constexpr int kPage = 4;

// `n` tokens: variant 0's up to token `from`, then different for each `variant`.
std::vector<int32_t> Tokens(int n, int variant = 0, int from = 0) {
  std::vector<int32_t> tokens;
  for (int i = 0; i < n; ++i) tokens.push_back((i < from ? 1000 : 1000 * (variant + 1)) + i);
  return tokens;
}

// What `store` is expected to hold of `prompt` (0 when the index has not heard of it).
int64_t Cached(const PrefixIndex& index, const std::string& store,
               const std::vector<int32_t>& prompt) {
  const absl::flat_hash_map<std::string, int64_t> cached = index.CachedTokens(prompt);
  const auto found = cached.find(store);
  return found == cached.end() ? 0 : found->second;
}

TEST(PrefixIndexTest, PredictsTheRecordedWholePagesBeforeTheLastToken) {
  PrefixIndex index(100);
  const std::vector<int32_t> prompt = Tokens(14, 0);
  EXPECT_EQ(Cached(index, "s", prompt), 0);  // an unknown store holds nothing
  index.Record("s", 7, kPage, prompt, 12);   // 3 named pages
  EXPECT_EQ(index.Pages("s"), 3);
  EXPECT_EQ(Cached(index, "s", prompt), 12);
  EXPECT_EQ(Cached(index, "other", prompt), 0);
  EXPECT_FALSE(index.CachedTokens(prompt).contains("other"));  // unknown stores are left out
  // A prompt that ends within the third page: the page holding its last token is computed.
  EXPECT_EQ(Cached(index, "s", std::vector<int32_t>(prompt.begin(), prompt.begin() + 12)), 8);
  // One that extends the recorded prompt, and one that shares its first page only.
  EXPECT_EQ(Cached(index, "s", Tokens(40, 0)), 12);
  EXPECT_EQ(Cached(index, "s", Tokens(14, 1, /*from=*/5)), 4);
  // Pages are chained: a later page equal to a recorded one after a different start is no hit.
  std::vector<int32_t> shifted = Tokens(14, 2);
  std::copy(prompt.begin() + 4, prompt.begin() + 8, shifted.begin() + 4);
  EXPECT_EQ(Cached(index, "s", shifted), 0);
  EXPECT_EQ(Cached(index, "s", {}), 0);
}

TEST(PrefixIndexTest, NothingPublishedRecordsNothing) {
  PrefixIndex index(100);
  index.Record("s", 7, kPage, Tokens(14), 0);  // the prefix cache is off
  index.Record("s", 7, 0, Tokens(14), 12);     // a worker that does not say its page size
  index.Record("s", 7, kPage, Tokens(14), 3);  // less than a page
  EXPECT_EQ(index.Pages("s"), 0);
  EXPECT_EQ(Cached(index, "s", Tokens(14)), 0);
}

TEST(PrefixIndexTest, ANewInstanceOfTheStoreForgetsItsPages) {
  PrefixIndex index(100);
  index.Record("s", 7, kPage, Tokens(14, 0), 12);
  index.Record("t", 7, kPage, Tokens(14, 0), 12);
  index.Record("s", 8, kPage, Tokens(14, 1), 8);  // "s" restarted: its cache is empty
  EXPECT_EQ(Cached(index, "s", Tokens(14, 0)), 0);
  EXPECT_EQ(Cached(index, "s", Tokens(14, 1)), 8);
  EXPECT_EQ(index.Pages("s"), 2);
  EXPECT_EQ(Cached(index, "t", Tokens(14, 0)), 12);  // another store keeps its own
}

TEST(PrefixIndexTest, KeepsTheMostRecentPagesAndAPromptsFirstPagesLongest) {
  PrefixIndex index(4);
  index.Record("s", 1, kPage, Tokens(14, 0), 12);  // pages a0 a1 a2
  index.Record("s", 1, kPage, Tokens(14, 1), 12);  // b0 b1 b2: a2 and a1 go, a0 stays
  EXPECT_EQ(index.Pages("s"), 4);
  EXPECT_EQ(Cached(index, "s", Tokens(14, 1)), 12);
  EXPECT_EQ(Cached(index, "s", Tokens(14, 0)), 4);
  // Recording a prompt again makes its pages the most recent: b2 and b1 go, b0 stays.
  index.Record("s", 1, kPage, Tokens(14, 0), 12);
  EXPECT_EQ(Cached(index, "s", Tokens(14, 0)), 12);
  EXPECT_EQ(Cached(index, "s", Tokens(14, 1)), 4);
  EXPECT_EQ(index.Pages("s"), 4);
}

}  // namespace
}  // namespace pdserve
