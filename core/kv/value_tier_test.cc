// InProcessValueTier (core/kv/value_tier.h): FetchHead counts exactly the rows and scales of the
// head it is asked for (ragged, zero-width, f32, per-token and per-page FP8 heads), from one
// thread and from two at once; WritablePage, FetchHead and section_pool/section_stride address
// the same bytes; pages and sections are disjoint; KCacheAttention fetching through the tier
// counts only the (page, head) pairs it reads.
#include "core/kv/value_tier.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <set>
#include <thread>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "core/base/thread_pool.h"
#include "core/kv/kv_layout.h"
#include "core/kv/kv_row_codec.h"
#include "gtest/gtest.h"
#include "kernels/attention.h"
#include "kernels/kcache_attention.h"

namespace pdserve {
namespace {

constexpr int kPageSize = 4;
constexpr int kPages = 6;

KvSectionLayout Layout(std::vector<int> dims, KvElement element, KvScaleMode scales,
                       int page_size = kPageSize) {
  EXPECT_TRUE(KvSectionLayout::Validate(page_size, dims, element, scales).ok());
  return KvSectionLayout(page_size, std::move(dims), element, scales);
}

// Per-token FP8 with ragged and zero widths, f32, per-page FP8.
std::vector<KvSectionLayout> Sections() {
  return {Layout({8, 3, 0, 5}, KvElement::kE4M3, KvScaleMode::kPerTokenHead),
          Layout({16, 2}, KvElement::kF32, KvScaleMode::kNone),
          Layout({7, 9}, KvElement::kE4M3, KvScaleMode::kPerPageHead)};
}

std::unique_ptr<InProcessValueTier> MakeTier(int num_pages = kPages) {
  absl::StatusOr<std::unique_ptr<InProcessValueTier>> tier =
      InProcessValueTier::Create(kPageSize, num_pages, Sections());
  EXPECT_TRUE(tier.ok()) << tier.status();
  return tier.ok() ? std::move(*tier) : nullptr;
}

TEST(ValueTierTest, FetchHeadCountsTheHeadsRowsAndScales) {
  std::unique_ptr<InProcessValueTier> tier = MakeTier();
  ASSERT_NE(tier, nullptr);
  EXPECT_EQ(tier->bytes_fetched(), 0);
  // By hand: rows page_size · dim · element bytes, plus scales_per_head floats.
  struct Case {
    int section, head;
    int64_t bytes;
  };
  const Case cases[] = {
      {0, 0, 4 * 8 + 4 * 4},  // e4m3 per token: 32 code bytes, 4 scales
      {0, 1, 4 * 3 + 4 * 4},  //
      {0, 2, 0 + 4 * 4},      // width 0: its scales only
      {0, 3, 4 * 5 + 4 * 4},  //
      {1, 0, 4 * 16 * 4},     // f32: no scales
      {1, 1, 4 * 2 * 4},      //
      {2, 0, 4 * 7 + 4},      // e4m3 per page: one scale
      {2, 1, 4 * 9 + 4},      //
  };
  int64_t total = 0;
  for (const Case& c : cases) {
    for (int32_t page : {0, 3, kPages - 1}) {
      const int64_t before = tier->bytes_fetched();
      tier->FetchHead(c.section, page, c.head);
      EXPECT_EQ(tier->bytes_fetched() - before, c.bytes)
          << "section " << c.section << " head " << c.head << " page " << page;
      total += c.bytes;
    }
  }
  EXPECT_EQ(tier->bytes_fetched(), total);
  // Writing and the uncounted accessors do not count.
  tier->WritablePage(0, 1);
  tier->section_pool(2);
  EXPECT_EQ(tier->bytes_fetched(), total);
}

TEST(ValueTierTest, ConcurrentFetchesSumExactly) {
  std::unique_ptr<InProcessValueTier> tier = MakeTier();
  ASSERT_NE(tier, nullptr);
  constexpr int kFetches = 20000;
  // Thread t fetches (section, head) pairs in its own order; the byte figures are known per pair.
  auto head_bytes = [&](int section, int head) {
    const KvSectionLayout& l = tier->layout(section);
    return int64_t{l.page_size()} * l.dim(head) * l.element_bytes() +
           int64_t{l.scales_per_head()} * 4;
  };
  int64_t expected[2] = {0, 0};
  auto work = [&](int t) {
    int64_t sum = 0;
    for (int i = 0; i < kFetches; ++i) {
      const int section = (i + t) % 3;
      const int head = (i / 3 + t) % tier->layout(section).n_heads();
      const uint8_t* bytes = tier->FetchHead(section, (i * (t + 1)) % kPages, head);
      if (bytes == nullptr) sum = -1'000'000'000;
      sum += head_bytes(section, head);
    }
    expected[t] = sum;
  };
  std::thread other(work, 1);
  work(0);
  other.join();
  EXPECT_GT(expected[0], 0);
  EXPECT_GT(expected[1], 0);
  EXPECT_EQ(tier->bytes_fetched(), expected[0] + expected[1]);
}

TEST(ValueTierTest, WritablePageAndFetchHeadAddressTheSameBytes) {
  std::unique_ptr<InProcessValueTier> tier = MakeTier();
  ASSERT_NE(tier, nullptr);
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  // Distinct rows into every slot of every head of every page of every section.
  std::vector<std::vector<float>> rows;
  for (int s = 0; s < 3; ++s) {
    const KvSectionLayout& l = tier->layout(s);
    EXPECT_GE(tier->section_stride(s), l.bytes());
    for (int32_t p = 0; p < kPages; ++p) {
      uint8_t* page = tier->WritablePage(s, p);
      ASSERT_EQ(page, tier->section_pool(s) + p * tier->section_stride(s));
      for (int slot = 0; slot < kPageSize; ++slot) {
        for (int g = 0; g < l.n_heads(); ++g) {
          std::vector<float> row(l.dim(g));
          for (float& x : row) x = normal(rng) * static_cast<float>(1 + p + 10 * s);
          WriteKvRow(l, page, g, slot, row.data());
          rows.push_back(std::move(row));
        }
      }
    }
  }
  // Read everything back through FetchHead: same pointer, same values as just written, so no
  // page or section overlaps another.
  size_t next = 0;
  for (int s = 0; s < 3; ++s) {
    const KvSectionLayout& l = tier->layout(s);
    for (int32_t p = 0; p < kPages; ++p) {
      for (int slot = 0; slot < kPageSize; ++slot) {
        for (int g = 0; g < l.n_heads(); ++g) {
          const uint8_t* fetched = tier->FetchHead(s, p, g);
          ASSERT_EQ(fetched, tier->WritablePage(s, p));
          std::vector<float> got(l.dim(g));
          ReadKvRow(l, fetched, g, slot, got.data());
          const std::vector<float>& want = rows[next++];
          for (int i = 0; i < l.dim(g); ++i) {
            const double tolerance =
                l.element() == KvElement::kF32
                    ? 0.0
                    : std::ldexp(std::fabs(want[i]), -4) + 1e-3 * (1 + p + 10 * s);
            ASSERT_LE(std::fabs(double{got[i]} - want[i]), tolerance)
                << "section " << s << " page " << p << " slot " << slot << " head " << g;
          }
        }
      }
    }
  }
  // Pages of a section are section_stride apart and sections do not overlap.
  std::set<std::pair<const uint8_t*, const uint8_t*>> ranges;
  for (int s = 0; s < 3; ++s) {
    for (int32_t p = 0; p < kPages; ++p) {
      const uint8_t* begin = tier->WritablePage(s, p);
      ranges.insert({begin, begin + tier->layout(s).bytes()});
    }
  }
  const uint8_t* end = nullptr;
  for (const auto& [begin, stop] : ranges) {
    EXPECT_GE(begin, end) << "overlapping pages";
    end = stop;
  }
}

TEST(ValueTierTest, CreateRejectsSectionsOfAnotherPageSize) {
  std::vector<KvSectionLayout> sections = Sections();
  sections.push_back(Layout({4}, KvElement::kF32, KvScaleMode::kNone, /*page_size=*/8));
  absl::StatusOr<std::unique_ptr<InProcessValueTier>> tier =
      InProcessValueTier::Create(kPageSize, kPages, sections);
  ASSERT_FALSE(tier.ok());
  EXPECT_EQ(tier.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(InProcessValueTier::Create(kPageSize, 0, Sections()).ok());
}

// KCacheAttention reading V through the tier: the tier counts exactly the heads' bytes of the
// (page, KV head) pairs holding a selected token, far less than the whole context's.
TEST(ValueTierTest, KCacheFetchesCountOnlySelectedPages) {
  const int page_size = 4, context = 40, head_dim = 8;
  const KvSectionLayout k = Layout({8, 5}, KvElement::kF32, KvScaleMode::kNone, page_size);
  const KvSectionLayout v = Layout({6, 8}, KvElement::kE4M3, KvScaleMode::kPerTokenHead, page_size);
  absl::StatusOr<std::unique_ptr<InProcessValueTier>> made =
      InProcessValueTier::Create(page_size, context / page_size, {v});
  ASSERT_TRUE(made.ok()) << made.status();
  InProcessValueTier& tier = **made;
  std::vector<uint8_t> k_pool(static_cast<size_t>(k.bytes()) * (context / page_size));
  std::vector<int32_t> pages(context / page_size);
  for (int32_t p = 0; p < static_cast<int32_t>(pages.size()); ++p) {
    pages[p] = static_cast<int32_t>(pages.size()) - 1 - p;  // reversed
  }
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (int t = 0; t < context; ++t) {
    for (int g = 0; g < 2; ++g) {
      std::vector<float> kr(k.dim(g)), vr(v.dim(g));
      for (float& x : kr) x = normal(rng);
      for (float& x : vr) x = normal(rng);
      WriteKvRow(k, k_pool.data() + pages[t / page_size] * k.bytes(), g, t % page_size, kr.data());
      WriteKvRow(v, tier.WritablePage(0, pages[t / page_size]), g, t % page_size, vr.data());
    }
  }
  std::vector<float> q(8 + 8 + 5 + 5);
  for (float& x : q) x = normal(rng);
  const int q_offsets[] = {0, 8, 16, 21}, out_offsets[] = {0, 6, 12, 20};
  kernels::AttentionShape shape{4, 2, head_dim};
  shape.q_offsets = q_offsets;
  shape.out_offsets = out_offsets;
  std::vector<float> out(28);
  kernels::AttentionSequence seq;
  seq.q = q.data();
  seq.out = out.data();
  seq.n_queries = 1;
  seq.start_pos = context - 1;
  seq.kv.k = {.pool = k_pool.data(),
              .page_stride = k.bytes(),
              .dims = k.dims().data(),
              .head_offsets = k.head_offsets().data()};
  seq.kv.v = {.pool = nullptr,
              .page_stride = tier.section_stride(0),
              .dims = v.dims().data(),
              .head_offsets = v.head_offsets().data(),
              .e4m3 = true,
              .scales_per_head = v.scales_per_head()};
  seq.kv.pages = pages.data();
  seq.kv.page_size = page_size;
  std::set<std::tuple<int, int>> fetched;  // (page index, head); one thread, no lock needed
  const kernels::FetchValuePage fetch = [&](int sequence, int page_index, int head) {
    EXPECT_EQ(sequence, 0);
    EXPECT_TRUE(fetched.insert({page_index, head}).second) << "fetched twice";
    return tier.FetchHead(0, pages[page_index], head);
  };
  ThreadPool pool(1);
  std::vector<float> workspace(kernels::KCacheWorkspaceFloats(shape, 1, context));
  std::vector<int> selected(2);
  kernels::KCacheAttention(pool, shape, {&seq, 1}, {.top_n = 3, .sink = 1, .recent = 2}, fetch,
                           workspace, selected);
  EXPECT_EQ(selected, (std::vector<int>{6, 6}));
  for (float x : out) EXPECT_TRUE(std::isfinite(x));
  int64_t expected = 0;
  for (const auto& [page_index, head] : fetched) {
    expected += int64_t{page_size} * v.dim(head) + int64_t{page_size} * 4;
  }
  EXPECT_EQ(tier.bytes_fetched(), expected);
  // At most 6 tokens per head: at most 6 of the 10 pages each (sink, recent on the last page).
  EXPECT_LE(fetched.size(), 12u);
  EXPECT_GE(fetched.size(), 4u);
  EXPECT_LT(tier.bytes_fetched(), int64_t{context / page_size} * v.bytes());
}

}  // namespace
}  // namespace pdserve
