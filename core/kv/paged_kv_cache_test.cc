// PagedKvCache and BlockTable: config validation, allocation until exhausted, free and reuse,
// Reserve's page arithmetic and rollback on failure, and a row layout in which every (layer, K/V,
// page, slot, head) row is disjoint and matches the attention kernel's addressing.
#include "core/kv/paged_kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

KvCacheConfig SmallConfig(int num_pages = 6) {
  KvCacheConfig config;
  config.n_layers = 3;
  config.n_kv_heads = 2;
  config.head_dim = 8;
  config.page_size = 4;
  config.num_pages = num_pages;
  return config;
}

std::unique_ptr<PagedKvCache> MakeCache(const KvCacheConfig& config) {
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(config);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

TEST(PagedKvCacheTest, RejectsNonPositiveSizes) {
  for (int field = 0; field < 5; ++field) {
    for (int bad : {0, -1}) {
      KvCacheConfig config = SmallConfig();
      int* fields[] = {&config.n_layers, &config.n_kv_heads, &config.head_dim, &config.page_size,
                       &config.num_pages};
      *fields[field] = bad;
      absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(config);
      ASSERT_FALSE(cache.ok()) << "field " << field << " = " << bad;
      EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(cache.status().message()), HasSubstr("positive"));
    }
  }
}

TEST(PagedKvCacheTest, RejectsAbsurdSize) {
  KvCacheConfig config;
  config.n_layers = 100;
  config.n_kv_heads = 32;
  config.head_dim = 128;
  config.page_size = 16;
  config.num_pages = 1000000;
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(config);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PagedKvCacheTest, Geometry) {
  std::unique_ptr<PagedKvCache> cache = MakeCache(SmallConfig());
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->page_stride(), 2 * 4 * 8);
  EXPECT_EQ(cache->free_pages(), 6);
  EXPECT_EQ(cache->config().page_size, 4);
}

TEST(PagedKvCacheTest, AllocatesUntilExhausted) {
  std::unique_ptr<PagedKvCache> cache = MakeCache(SmallConfig(6));
  ASSERT_NE(cache, nullptr);
  std::set<int32_t> pages;
  for (int i = 0; i < 6; ++i) {
    absl::StatusOr<int32_t> page = cache->AllocatePage();
    ASSERT_TRUE(page.ok()) << page.status();
    EXPECT_GE(*page, 0);
    EXPECT_LT(*page, 6);
    EXPECT_TRUE(pages.insert(*page).second) << "page " << *page << " handed out twice";
    EXPECT_EQ(cache->free_pages(), 5 - i);
  }
  absl::StatusOr<int32_t> none = cache->AllocatePage();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_THAT(std::string(none.status().message()), HasSubstr("6"));
  EXPECT_EQ(cache->free_pages(), 0);
}

TEST(PagedKvCacheTest, FreedPagesAreReused) {
  std::unique_ptr<PagedKvCache> cache = MakeCache(SmallConfig(4));
  ASSERT_NE(cache, nullptr);
  std::vector<int32_t> pages;
  for (int i = 0; i < 4; ++i) pages.push_back(*cache->AllocatePage());
  cache->FreePage(pages[2]);
  EXPECT_EQ(cache->free_pages(), 1);
  absl::StatusOr<int32_t> again = cache->AllocatePage();
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(*again, pages[2]);
  EXPECT_FALSE(cache->AllocatePage().ok());
  // Free everything; all pages come back, each exactly once.
  for (int32_t p : {pages[0], pages[1], *again, pages[3]}) cache->FreePage(p);
  EXPECT_EQ(cache->free_pages(), 4);
  std::set<int32_t> second_round;
  for (int i = 0; i < 4; ++i) second_round.insert(*cache->AllocatePage());
  EXPECT_EQ(second_round, (std::set<int32_t>{0, 1, 2, 3}));
}

TEST(BlockTableTest, ReserveAllocatesWholePages) {
  std::unique_ptr<PagedKvCache> cache = MakeCache(SmallConfig(10));  // page_size 4
  ASSERT_NE(cache, nullptr);
  BlockTable table;
  EXPECT_TRUE(table.Reserve(*cache, 0).ok());
  EXPECT_TRUE(table.pages().empty());
  ASSERT_TRUE(table.Reserve(*cache, 1).ok());
  EXPECT_EQ(table.pages().size(), 1u);
  ASSERT_TRUE(table.Reserve(*cache, 4).ok());
  EXPECT_EQ(table.pages().size(), 1u);
  ASSERT_TRUE(table.Reserve(*cache, 5).ok());
  EXPECT_EQ(table.pages().size(), 2u);
  const std::vector<int32_t> before = table.pages();
  ASSERT_TRUE(table.Reserve(*cache, 17).ok());
  ASSERT_EQ(table.pages().size(), 5u);
  EXPECT_TRUE(std::equal(before.begin(), before.end(), table.pages().begin()))
      << "existing pages keep their place";
  ASSERT_TRUE(table.Reserve(*cache, 3).ok());  // never shrinks
  EXPECT_EQ(table.pages().size(), 5u);
  EXPECT_EQ(cache->free_pages(), 5);
  std::set<int32_t> distinct(table.pages().begin(), table.pages().end());
  EXPECT_EQ(distinct.size(), 5u);

  table.set_num_tokens(17);
  EXPECT_EQ(table.num_tokens(), 17);
  table.Release(*cache);
  EXPECT_TRUE(table.pages().empty());
  EXPECT_EQ(table.num_tokens(), 0);
  EXPECT_EQ(cache->free_pages(), 10);
}

TEST(BlockTableTest, ReserveRollsBackOnFailure) {
  std::unique_ptr<PagedKvCache> cache = MakeCache(SmallConfig(5));  // page_size 4
  ASSERT_NE(cache, nullptr);
  BlockTable a, b;
  ASSERT_TRUE(a.Reserve(*cache, 12).ok());  // 3 pages
  ASSERT_TRUE(b.Reserve(*cache, 2).ok());   // 1 page
  const std::vector<int32_t> b_pages = b.pages();
  EXPECT_EQ(cache->free_pages(), 1);

  absl::Status status = b.Reserve(*cache, 16);  // needs 3 more, only 1 free
  EXPECT_EQ(status.code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(b.pages(), b_pages) << "a failed Reserve keeps what the table had";
  EXPECT_EQ(cache->free_pages(), 1) << "pages taken during the failed Reserve are returned";

  // The page that was briefly taken is still usable.
  ASSERT_TRUE(b.Reserve(*cache, 8).ok());
  EXPECT_EQ(b.pages().size(), 2u);
  EXPECT_EQ(cache->free_pages(), 0);
  a.Release(*cache);
  ASSERT_TRUE(b.Reserve(*cache, 16).ok());
  EXPECT_EQ(b.pages().size(), 4u);
}

TEST(PagedKvCacheTest, RowsAreDisjointAndCoverThePools) {
  const KvCacheConfig config = SmallConfig(5);
  std::unique_ptr<PagedKvCache> cache = MakeCache(config);
  ASSERT_NE(cache, nullptr);
  const int d = config.head_dim;
  const float* base = cache->k_pool(0);
  std::set<int64_t> offsets;
  // Write a distinct marker into every element of every row.
  float marker = 1.0f;
  for (int layer = 0; layer < config.n_layers; ++layer) {
    for (int32_t page = 0; page < config.num_pages; ++page) {
      for (int slot = 0; slot < config.page_size; ++slot) {
        for (int head = 0; head < config.n_kv_heads; ++head) {
          for (float* row :
               {cache->KRow(layer, page, slot, head), cache->VRow(layer, page, slot, head)}) {
            for (int c = 0; c < d; ++c) {
              ASSERT_TRUE(offsets.insert(row + c - base).second) << "overlapping rows";
              row[c] = marker++;
            }
          }
        }
      }
    }
  }
  // Every float of the 2·layers pools is covered exactly once, starting at k_pool(0).
  const int64_t total = 2LL * config.n_layers * config.num_pages * cache->page_stride();
  ASSERT_EQ(static_cast<int64_t>(offsets.size()), total);
  EXPECT_EQ(*offsets.begin(), 0);
  EXPECT_EQ(*offsets.rbegin(), total - 1);
  // Nothing was overwritten by a later row.
  marker = 1.0f;
  for (int layer = 0; layer < config.n_layers; ++layer) {
    for (int32_t page = 0; page < config.num_pages; ++page) {
      for (int slot = 0; slot < config.page_size; ++slot) {
        for (int head = 0; head < config.n_kv_heads; ++head) {
          for (float* row :
               {cache->KRow(layer, page, slot, head), cache->VRow(layer, page, slot, head)}) {
            for (int c = 0; c < d; ++c) ASSERT_EQ(row[c], marker++);
          }
        }
      }
    }
  }
}

// The layout the attention kernel assumes (kernels/attention.h): page p of a layer's keys holds
// [n_kv_heads, page_size, head_dim] floats from k_pool + p · page_stride.
TEST(PagedKvCacheTest, LayoutMatchesAttentionAddressing) {
  const KvCacheConfig config = SmallConfig(5);
  std::unique_ptr<PagedKvCache> cache = MakeCache(config);
  ASSERT_NE(cache, nullptr);
  for (int layer = 0; layer < config.n_layers; ++layer) {
    EXPECT_EQ(cache->v_pool(layer) - cache->k_pool(layer),
              int64_t{config.num_pages} * cache->page_stride());
    for (int32_t page = 0; page < config.num_pages; ++page) {
      for (int slot = 0; slot < config.page_size; ++slot) {
        for (int head = 0; head < config.n_kv_heads; ++head) {
          const int64_t want = page * cache->page_stride() +
                               (int64_t{head} * config.page_size + slot) * config.head_dim;
          EXPECT_EQ(cache->KRow(layer, page, slot, head) - cache->k_pool(layer), want);
          EXPECT_EQ(cache->VRow(layer, page, slot, head) - cache->v_pool(layer), want);
        }
      }
    }
  }
}

}  // namespace
}  // namespace pdserve
