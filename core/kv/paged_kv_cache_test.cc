// PagedKvCache and BlockTable: config validation, allocation until exhausted, free and reuse,
// Reserve's page arithmetic and rollback on failure, and sections whose pages are disjoint, cover
// the storage and follow their layouts' sizes.
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

// Three layers' K and V sections: f32 [2 heads, 4 slots, 8], and an FP8 V section with ragged
// widths in the last layer.
KvCacheConfig SmallConfig(int num_pages = 6) {
  KvCacheConfig config;
  config.page_size = 4;
  config.num_pages = num_pages;
  for (int layer = 0; layer < 3; ++layer) {
    config.sections.emplace_back(4, std::vector<int>{8, 8}, KvElement::kF32, KvScaleMode::kNone);
    config.sections.emplace_back(4, std::vector<int>{8, 8}, KvElement::kF32, KvScaleMode::kNone);
  }
  config.sections.back() =
      KvSectionLayout(4, std::vector<int>{5, 3}, KvElement::kE4M3, KvScaleMode::kPerTokenHead);
  return config;
}

std::unique_ptr<PagedKvCache> MakeCache(const KvCacheConfig& config) {
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(config);
  EXPECT_TRUE(cache.ok()) << cache.status();
  return cache.ok() ? std::move(*cache) : nullptr;
}

TEST(PagedKvCacheTest, RejectsNonPositiveSizes) {
  for (int field = 0; field < 2; ++field) {
    for (int bad : {0, -1}) {
      KvCacheConfig config = SmallConfig();
      int* fields[] = {&config.page_size, &config.num_pages};
      *fields[field] = bad;
      absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(config);
      ASSERT_FALSE(cache.ok()) << "field " << field << " = " << bad;
      EXPECT_EQ(cache.status().code(), absl::StatusCode::kInvalidArgument);
      EXPECT_THAT(std::string(cache.status().message()), HasSubstr("positive"));
    }
  }
  KvCacheConfig none = SmallConfig();
  none.sections.clear();
  EXPECT_EQ(PagedKvCache::Create(none).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(PagedKvCacheTest, RejectsSectionOfAnotherPageSize) {
  KvCacheConfig config = SmallConfig();
  config.sections[1] = KvSectionLayout(8, {8, 8}, KvElement::kF32, KvScaleMode::kNone);
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(config);
  ASSERT_FALSE(cache.ok());
  EXPECT_THAT(std::string(cache.status().message()), HasSubstr("section 1"));
}

TEST(PagedKvCacheTest, RejectsAbsurdSize) {
  KvCacheConfig config;
  config.page_size = 16;
  config.num_pages = 1000000;
  for (int s = 0; s < 200; ++s) {
    config.sections.emplace_back(16, std::vector<int>(32, 128), KvElement::kF32,
                                 KvScaleMode::kNone);
  }
  absl::StatusOr<std::unique_ptr<PagedKvCache>> cache = PagedKvCache::Create(config);
  ASSERT_FALSE(cache.ok());
  EXPECT_EQ(cache.status().code(), absl::StatusCode::kResourceExhausted);
}

TEST(PagedKvCacheTest, Geometry) {
  std::unique_ptr<PagedKvCache> cache = MakeCache(SmallConfig());
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->num_sections(), 6);
  EXPECT_EQ(cache->section_stride(0), 2 * 4 * 8 * 4);  // 256 bytes, already 64-aligned
  // 2 heads · 4 slots of scales (32 bytes) + 4·5 + 4·3 codes = 64 bytes.
  EXPECT_EQ(cache->layout(5).bytes(), 64);
  EXPECT_EQ(cache->section_stride(5), 64);
  EXPECT_EQ(cache->total_bytes(), 6 * (5 * 256 + 64));
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

TEST(PagedKvCacheTest, PagesAreDisjointAndCoverTheStorage) {
  const KvCacheConfig config = SmallConfig(5);
  std::unique_ptr<PagedKvCache> cache = MakeCache(config);
  ASSERT_NE(cache, nullptr);
  const uint8_t* base = cache->Page(0, 0);
  std::set<int64_t> offsets;
  uint8_t marker = 1;
  for (int s = 0; s < cache->num_sections(); ++s) {
    EXPECT_EQ(reinterpret_cast<uintptr_t>(cache->section_pool(s)) % 64, 0u);
    for (int32_t page = 0; page < config.num_pages; ++page) {
      uint8_t* bytes = cache->Page(s, page);
      for (int64_t i = 0; i < cache->section_stride(s); ++i) {
        ASSERT_TRUE(offsets.insert(bytes + i - base).second) << "overlapping pages";
        bytes[i] = marker++;
      }
    }
  }
  ASSERT_EQ(static_cast<int64_t>(offsets.size()), cache->total_bytes());
  EXPECT_EQ(*offsets.begin(), 0);
  EXPECT_EQ(*offsets.rbegin(), cache->total_bytes() - 1);
  marker = 1;
  for (int s = 0; s < cache->num_sections(); ++s) {
    for (int32_t page = 0; page < config.num_pages; ++page) {
      const uint8_t* bytes = cache->Page(s, page);
      for (int64_t i = 0; i < cache->section_stride(s); ++i) ASSERT_EQ(bytes[i], marker++);
    }
  }
}

}  // namespace
}  // namespace pdserve
