// PagePool: option validation; the allocate → seal → release state machine; all-or-nothing
// allocation; lease expiry through an injected clock (no sleeping), both by ExpireLeases and on
// the next touch; cancellation by request; tokens (wrong → PermissionDenied, freed → NotFound);
// Seal checks with real encoded pages (corrupted, another request's, mismatched refs, foreign
// slots) leaving the allocation unsealed. Every fixture test runs with the pool's own mapping and
// with caller-provided memory (as the KV store gives it memory from Transport::Allocate).
#include "services/kvstore/page_pool.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "core/kv/kv_page.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

constexpr int64_t kSlotBytes = 4096;

// A clock the test moves by hand.
struct FakeClock {
  absl::Time now = absl::FromUnixSeconds(1000);
};

PagePoolOptions Options(FakeClock* clock, int64_t num_slots = 8) {
  PagePoolOptions options;
  options.slot_bytes = kSlotBytes;
  options.num_slots = num_slots;
  options.default_lease = absl::Seconds(10);
  options.max_lease = absl::Seconds(60);
  options.clock = [clock] { return clock->now; };
  return options;
}

// A valid page of `request_id` written in epoch `epoch` (the allocation's id); its size does not
// depend on the epoch.
std::string EncodedPage(uint64_t request_id, int cache_layer, int page_index, int num_tokens,
                        uint64_t epoch = 0) {
  KvPageHeader header;
  header.epoch = epoch;
  header.request_id = request_id;
  header.cache_layer = cache_layer;
  header.page_index = page_index;
  header.num_tokens = num_tokens;
  header.layout.k = KvSectionLayout(4, {8, 8}, KvElement::kF32, KvScaleMode::kNone);
  header.layout.v = header.layout.k;
  std::vector<float> k(static_cast<size_t>(header.layout.k.bytes() / 4));
  std::vector<float> v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = 0.25f * static_cast<float>(i % 7);
    v[i] = -0.5f * static_cast<float>(i % 5);
  }
  absl::StatusOr<std::string> page =
      EncodeKvPage(header, {reinterpret_cast<const uint8_t*>(k.data()), k.size() * 4},
                   {reinterpret_cast<const uint8_t*>(v.data()), v.size() * 4});
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? *page : std::string();
}

struct FreeMemory {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Memory = std::unique_ptr<uint8_t, FreeMemory>;

Memory AlignedMemory(size_t bytes, uint8_t fill) {
  // aligned_alloc wants a size that is a multiple of the alignment.
  bytes = (bytes + 4095) / 4096 * 4096;
  Memory memory(static_cast<uint8_t*>(std::aligned_alloc(4096, bytes)));
  std::memset(memory.get(), fill, bytes);
  return memory;
}

// Param: the pool uses caller-provided memory (Create(options, base)) instead of its own mapping.
class PagePoolTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    absl::StatusOr<std::unique_ptr<PagePool>> pool;
    if (GetParam()) {
      external_ = AlignedMemory(8 * kSlotBytes, 0xEE);  // garbage the pool must scrub
      pool = PagePool::Create(Options(&clock_), external_.get());
    } else {
      pool = PagePool::Create(Options(&clock_));
    }
    ASSERT_TRUE(pool.ok()) << pool.status();
    pool_ = *std::move(pool);
  }
  void TearDown() override { pool_.reset(); }  // before external_

  // Writes `page` into `slot` as a remote put would; returns the ref that describes it.
  SealedPageRef Write(int64_t slot, const std::string& page, int layer, int index, int tokens) {
    std::memcpy(pool_->base() + slot * kSlotBytes, page.data(), page.size());
    return SealedPageRef{slot * kSlotBytes, static_cast<uint32_t>(page.size()), layer, index,
                         tokens};
  }

  // Allocates two pages for request 7 and writes valid pages (layer 0 and 1, index 0) into them.
  PageAllocation AllocateAndWrite(std::vector<SealedPageRef>* refs) {
    const std::string p0 = EncodedPage(7, 0, 0, 3);
    const std::string p1 = EncodedPage(7, 1, 0, 3);
    const std::vector<uint32_t> sizes = {static_cast<uint32_t>(p0.size()),
                                         static_cast<uint32_t>(p1.size())};
    absl::StatusOr<PageAllocation> allocation = pool_->Allocate(7, sizes, absl::ZeroDuration());
    EXPECT_TRUE(allocation.ok()) << allocation.status();
    const uint64_t epoch = allocation->allocation_id;
    refs->push_back(Write(allocation->slots[0], EncodedPage(7, 0, 0, 3, epoch), 0, 0, 3));
    refs->push_back(Write(allocation->slots[1], EncodedPage(7, 1, 0, 3, epoch), 1, 0, 3));
    return *allocation;
  }

  FakeClock clock_;
  Memory external_;
  std::unique_ptr<PagePool> pool_;
};

TEST(PagePoolOptionsTest, RejectsBadOptions) {
  FakeClock clock;
  PagePoolOptions options = Options(&clock);
  EXPECT_TRUE(options.Validate().ok());
  options.slot_bytes = 2048;
  EXPECT_TRUE(absl::IsInvalidArgument(options.Validate()));
  options.slot_bytes = 4096 + 32;
  EXPECT_TRUE(absl::IsInvalidArgument(options.Validate()));
  options = Options(&clock, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(PagePool::Create(options).status()));
  options = Options(&clock);
  options.default_lease = absl::ZeroDuration();
  EXPECT_TRUE(absl::IsInvalidArgument(options.Validate()));
  options = Options(&clock);
  options.max_lease = absl::Seconds(1);
  EXPECT_TRUE(absl::IsInvalidArgument(options.Validate()));
}

TEST_P(PagePoolTest, MemoryIsPageAlignedAndWritable) {
  EXPECT_EQ(reinterpret_cast<uintptr_t>(pool_->base()) % 4096, 0u);
  EXPECT_EQ(pool_->pool_bytes(), 8 * kSlotBytes);
  if (GetParam()) {
    EXPECT_EQ(pool_->base(), external_.get());
  }
  std::memset(pool_->base(), 0xAB, static_cast<size_t>(pool_->pool_bytes()));
}

TEST(PagePoolExternalMemoryTest, ScrubsSlotHeadersAndLeavesTheMemoryToItsOwner) {
  FakeClock clock;
  Memory memory = AlignedMemory(4 * kSlotBytes, 0xEE);
  absl::StatusOr<std::unique_ptr<PagePool>> pool =
      PagePool::Create(Options(&clock, 4), memory.get());
  ASSERT_TRUE(pool.ok()) << pool.status();
  for (int64_t slot = 0; slot < 4; ++slot) {
    const uint8_t* start = memory.get() + slot * kSlotBytes;
    EXPECT_EQ(start[0], 0) << slot;                  // no stale page header survives
    EXPECT_EQ(start[kSlotBytes - 1], 0xEE) << slot;  // the rest is left alone
  }
  pool->reset();
  memory.get()[0] = 1;  // still the owner's (the pool did not unmap it)
  EXPECT_EQ(memory.get()[0], 1);
}

TEST(PagePoolExternalMemoryTest, RejectsNullOrMisalignedMemoryAndBadOptions) {
  FakeClock clock;
  Memory memory = AlignedMemory(8 * kSlotBytes + 64, 0);
  EXPECT_TRUE(absl::IsInvalidArgument(PagePool::Create(Options(&clock), nullptr).status()));
  EXPECT_TRUE(
      absl::IsInvalidArgument(PagePool::Create(Options(&clock), memory.get() + 8).status()));
  EXPECT_TRUE(PagePool::Create(Options(&clock), memory.get() + 64).ok());
  PagePoolOptions bad = Options(&clock);
  bad.num_slots = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(PagePool::Create(bad, memory.get()).status()));
}

TEST_P(PagePoolTest, AllocateSealReleaseCycle) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);
  EXPECT_NE(allocation.lease_token, 0u);
  EXPECT_EQ(allocation.lease, absl::Seconds(10));
  ASSERT_EQ(allocation.slots.size(), 2u);
  EXPECT_NE(allocation.slots[0], allocation.slots[1]);

  PagePoolUsage usage = pool_->Usage();
  EXPECT_EQ(usage.total_slots, 8);
  EXPECT_EQ(usage.free_slots, 6);
  EXPECT_EQ(usage.allocated_slots, 2);
  EXPECT_EQ(usage.sealed_slots, 0);
  EXPECT_EQ(usage.allocations, 1);

  ASSERT_TRUE(pool_->Seal(allocation.allocation_id, allocation.lease_token, refs).ok());
  usage = pool_->Usage();
  EXPECT_EQ(usage.allocated_slots, 0);
  EXPECT_EQ(usage.sealed_slots, 2);
  EXPECT_TRUE(absl::IsFailedPrecondition(
      pool_->Seal(allocation.allocation_id, allocation.lease_token, refs)));

  absl::StatusOr<absl::Duration> renewed =
      pool_->Renew(allocation.allocation_id, allocation.lease_token, absl::Seconds(5));
  ASSERT_TRUE(renewed.ok()) << renewed.status();
  EXPECT_EQ(*renewed, absl::Seconds(5));

  ASSERT_TRUE(pool_->Release(allocation.allocation_id, allocation.lease_token).ok());
  usage = pool_->Usage();
  EXPECT_EQ(usage.free_slots, 8);
  EXPECT_EQ(usage.allocations, 0);
  EXPECT_EQ(usage.releases_total, 1);
  EXPECT_EQ(usage.lease_expiries_total, 0);

  // Freed: every later call is NotFound, and the slot no longer holds a decodable page.
  EXPECT_TRUE(absl::IsNotFound(pool_->Release(allocation.allocation_id, allocation.lease_token)));
  EXPECT_TRUE(absl::IsNotFound(
      pool_->Renew(allocation.allocation_id, allocation.lease_token, absl::ZeroDuration())
          .status()));
  EXPECT_FALSE(
      DecodeKvPage({pool_->base() + allocation.slots[0] * kSlotBytes, refs[0].encoded_bytes}).ok());
}

TEST_P(PagePoolTest, AllocationIsAllOrNothing) {
  const std::vector<uint32_t> six(6, 100);
  absl::StatusOr<PageAllocation> first = pool_->Allocate(1, six, absl::ZeroDuration());
  ASSERT_TRUE(first.ok());
  const std::vector<uint32_t> three(3, 100);
  absl::StatusOr<PageAllocation> second = pool_->Allocate(2, three, absl::ZeroDuration());
  ASSERT_TRUE(absl::IsResourceExhausted(second.status())) << second.status();
  EXPECT_NE(second.status().message().find("2 free slots, needs 3"), std::string::npos)
      << second.status();
  EXPECT_EQ(pool_->Usage().free_slots, 2);
  EXPECT_TRUE(pool_->Allocate(2, std::vector<uint32_t>(2, 100), absl::ZeroDuration()).ok());
  EXPECT_EQ(pool_->Usage().free_slots, 0);
}

TEST_P(PagePoolTest, RejectsBadAllocations) {
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->Allocate(1, std::vector<uint32_t>{}, absl::ZeroDuration()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->Allocate(1, std::vector<uint32_t>{100, kSlotBytes + 1}, absl::ZeroDuration())
          .status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->Allocate(1, std::vector<uint32_t>{0}, absl::ZeroDuration()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->Allocate(1, std::vector<uint32_t>(9, 100), absl::ZeroDuration()).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->Allocate(1, std::vector<uint32_t>{100}, absl::Seconds(-1)).status()));
  EXPECT_EQ(pool_->Usage().free_slots, 8);
  EXPECT_TRUE(pool_->Allocate(1, std::vector<uint32_t>{kSlotBytes}, absl::ZeroDuration()).ok());
}

TEST_P(PagePoolTest, LeaseIsCappedAndTokensAreDistinct) {
  absl::StatusOr<PageAllocation> a = pool_->Allocate(1, std::vector<uint32_t>{1}, absl::Hours(1));
  absl::StatusOr<PageAllocation> b = pool_->Allocate(1, std::vector<uint32_t>{1}, absl::Hours(1));
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->lease, absl::Seconds(60));
  EXPECT_NE(a->lease_token, b->lease_token);
  EXPECT_NE(a->allocation_id, b->allocation_id);
  absl::StatusOr<absl::Duration> renewed =
      pool_->Renew(a->allocation_id, a->lease_token, absl::Hours(2));
  ASSERT_TRUE(renewed.ok());
  EXPECT_EQ(*renewed, absl::Seconds(60));
}

TEST_P(PagePoolTest, WrongTokenIsPermissionDenied) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);
  const uint64_t wrong = allocation.lease_token ^ 1;
  EXPECT_TRUE(absl::IsPermissionDenied(pool_->Seal(allocation.allocation_id, wrong, refs)));
  EXPECT_TRUE(absl::IsPermissionDenied(
      pool_->Renew(allocation.allocation_id, wrong, absl::ZeroDuration()).status()));
  EXPECT_TRUE(absl::IsPermissionDenied(pool_->Release(allocation.allocation_id, wrong)));
  EXPECT_TRUE(absl::IsNotFound(pool_->Release(allocation.allocation_id + 100, wrong)));
  EXPECT_EQ(pool_->Usage().allocations, 1);
}

TEST_P(PagePoolTest, ExpireLeasesFreesOnlyExpired) {
  absl::StatusOr<PageAllocation> short_lease =
      pool_->Allocate(1, std::vector<uint32_t>{1, 1}, absl::Seconds(2));
  absl::StatusOr<PageAllocation> long_lease =
      pool_->Allocate(2, std::vector<uint32_t>{1}, absl::Seconds(20));
  ASSERT_TRUE(short_lease.ok() && long_lease.ok());
  EXPECT_EQ(pool_->ExpireLeases(clock_.now + absl::Seconds(1)), 0);
  clock_.now += absl::Seconds(1);
  // A renewal pushes the expiry out from now.
  ASSERT_TRUE(
      pool_->Renew(short_lease->allocation_id, short_lease->lease_token, absl::Seconds(2)).ok());
  EXPECT_EQ(pool_->ExpireLeases(clock_.now + absl::Seconds(1.5)), 0);
  EXPECT_EQ(pool_->ExpireLeases(clock_.now + absl::Seconds(2)), 1);
  PagePoolUsage usage = pool_->Usage();
  EXPECT_EQ(usage.free_slots, 7);
  EXPECT_EQ(usage.allocations, 1);
  EXPECT_EQ(usage.lease_expiries_total, 1);
  EXPECT_TRUE(
      absl::IsNotFound(pool_->Release(short_lease->allocation_id, short_lease->lease_token)));
  EXPECT_TRUE(pool_->Release(long_lease->allocation_id, long_lease->lease_token).ok());
}

TEST_P(PagePoolTest, ExpiredLeaseIsFreedOnNextTouch) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);
  clock_.now += absl::Seconds(10);  // exactly the lease: expired
  EXPECT_TRUE(
      absl::IsNotFound(pool_->Seal(allocation.allocation_id, allocation.lease_token, refs)));
  const PagePoolUsage usage = pool_->Usage();
  EXPECT_EQ(usage.free_slots, 8);
  EXPECT_EQ(usage.lease_expiries_total, 1);
  EXPECT_EQ(pool_->ExpireLeases(clock_.now), 0);
}

// The holder of sealed pages hands them on (prefill → router → decode) with a whole lease, however
// long the writing took: Seal restarts the lease at the length last granted.
TEST_P(PagePoolTest, SealRestartsTheLease) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);  // the default lease: 10 s
  clock_.now += absl::Seconds(9);
  ASSERT_TRUE(
      pool_->Renew(allocation.allocation_id, allocation.lease_token, absl::Seconds(2)).ok());
  clock_.now += absl::Seconds(1.5);
  ASSERT_TRUE(pool_->Seal(allocation.allocation_id, allocation.lease_token, refs).ok());
  EXPECT_EQ(pool_->ExpireLeases(clock_.now + absl::Seconds(1.9)), 0);  // 2 s from Seal
  EXPECT_EQ(pool_->ExpireLeases(clock_.now + absl::Seconds(2)), 1);
}

// A sealed allocation goes at once; an unsealed one keeps its slots (its writer may still be
// putting pages there, which must not land in the next owner's) until its writer releases it or
// its lease runs out, and refuses Seal and Renew meanwhile.
TEST_P(PagePoolTest, CancelRequestFreesSealedAllocationsAndStopsTheOthers) {
  std::vector<SealedPageRef> refs;
  const PageAllocation sealed = AllocateAndWrite(&refs);  // request 7, 2 slots
  ASSERT_TRUE(pool_->Seal(sealed.allocation_id, sealed.lease_token, refs).ok());
  absl::StatusOr<PageAllocation> writing =
      pool_->Allocate(7, std::vector<uint32_t>{1, 1}, absl::ZeroDuration());
  absl::StatusOr<PageAllocation> expiring =
      pool_->Allocate(7, std::vector<uint32_t>{1}, absl::ZeroDuration());
  absl::StatusOr<PageAllocation> other =
      pool_->Allocate(6, std::vector<uint32_t>{1}, absl::ZeroDuration());
  ASSERT_TRUE(writing.ok() && expiring.ok() && other.ok());
  EXPECT_EQ(pool_->CancelRequest(7), 3);
  EXPECT_EQ(pool_->CancelRequest(7), 0);  // the unsealed ones are cancelled already
  EXPECT_EQ(pool_->CancelRequest(12345), 0);
  PagePoolUsage usage = pool_->Usage();
  EXPECT_EQ(usage.free_slots, 8 - 2 - 1 - 1);  // the sealed allocation's 2 slots came back
  EXPECT_EQ(usage.allocations, 3);
  EXPECT_EQ(usage.cancellations_total, 3);
  EXPECT_TRUE(absl::IsCancelled(pool_->Seal(writing->allocation_id, writing->lease_token, {})));
  EXPECT_TRUE(absl::IsCancelled(
      pool_->Renew(writing->allocation_id, writing->lease_token, absl::ZeroDuration()).status()));
  EXPECT_TRUE(pool_->Release(writing->allocation_id, writing->lease_token).ok());
  clock_.now += absl::Seconds(11);
  EXPECT_EQ(pool_->ExpireLeases(clock_.now), 2);  // `expiring` and `other`
  EXPECT_EQ(pool_->Usage().free_slots, 8);
}

TEST_P(PagePoolTest, SealRejectsCorruptedPageAndStaysUnsealed) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);
  uint8_t* byte = pool_->base() + refs[1].slot_offset + refs[1].encoded_bytes / 2;
  *byte ^= 0x10;
  absl::Status sealed = pool_->Seal(allocation.allocation_id, allocation.lease_token, refs);
  ASSERT_TRUE(absl::IsInvalidArgument(sealed)) << sealed;
  EXPECT_NE(sealed.message().find("page 1"), std::string::npos) << sealed;
  EXPECT_EQ(pool_->Usage().allocated_slots, 2);
  // Rewritten correctly, the same allocation seals.
  *byte ^= 0x10;
  EXPECT_TRUE(pool_->Seal(allocation.allocation_id, allocation.lease_token, refs).ok());
}

TEST_P(PagePoolTest, SealRejectsAnotherRequestsPage) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);
  refs[0] = Write(allocation.slots[0], EncodedPage(8, 0, 0, 3, allocation.allocation_id), 0, 0, 3);
  absl::Status sealed = pool_->Seal(allocation.allocation_id, allocation.lease_token, refs);
  ASSERT_TRUE(absl::IsInvalidArgument(sealed)) << sealed;
  EXPECT_NE(sealed.message().find("belongs to request 8"), std::string::npos) << sealed;
  EXPECT_EQ(pool_->Usage().sealed_slots, 0);
}

// A page written under another epoch (another allocation of the same request, e.g. one whose
// lease ran out) is stale: Seal refuses it, and each allocation gets a new epoch.
TEST_P(PagePoolTest, SealRejectsAPageOfAnotherEpoch) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);
  refs[1] =
      Write(allocation.slots[1], EncodedPage(7, 1, 0, 3, allocation.allocation_id + 1), 1, 0, 3);
  absl::Status sealed = pool_->Seal(allocation.allocation_id, allocation.lease_token, refs);
  ASSERT_TRUE(absl::IsInvalidArgument(sealed)) << sealed;
  EXPECT_NE(sealed.message().find("epoch"), std::string::npos) << sealed;
  std::vector<SealedPageRef> again;
  const PageAllocation next = AllocateAndWrite(&again);
  EXPECT_NE(next.allocation_id, allocation.allocation_id);
  EXPECT_TRUE(pool_->Seal(next.allocation_id, next.lease_token, again).ok());
}

TEST_P(PagePoolTest, SealRejectsMismatchedRefs) {
  std::vector<SealedPageRef> refs;
  const PageAllocation allocation = AllocateAndWrite(&refs);
  const auto seal_with = [&](std::vector<SealedPageRef> pages) {
    return pool_->Seal(allocation.allocation_id, allocation.lease_token, pages);
  };
  std::vector<SealedPageRef> bad = refs;
  bad[0].page_index = 1;
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad[1].cache_layer = 0;
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad[0].num_tokens = 4;
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad[0].encoded_bytes -= 8;  // truncated
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad[1].slot_offset = refs[0].slot_offset;  // the same slot twice
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad[0].slot_offset = 7 * kSlotBytes;  // a slot of nobody
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad[0].slot_offset += 8;  // not a slot start
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad.pop_back();  // a page missing
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  bad = refs;
  bad[0].encoded_bytes = kSlotBytes + 1;
  EXPECT_TRUE(absl::IsInvalidArgument(seal_with(bad)));
  EXPECT_EQ(pool_->Usage().sealed_slots, 0);
  EXPECT_TRUE(seal_with(refs).ok());
}

// ---- Prefix cache ----

// A page name: `prompt` and `page` made into 16 bytes (the pool only compares names).
PrefixPageHash Name(int prompt, int page) {
  PrefixPageHash hash{};
  hash[0] = static_cast<uint8_t>(prompt);
  hash[1] = static_cast<uint8_t>(page);
  hash[15] = 0x5a;
  return hash;
}

std::vector<PrefixPageHash> Names(int prompt, int pages) {
  std::vector<PrefixPageHash> names;
  for (int p = 0; p < pages; ++p) names.push_back(Name(prompt, p));
  return names;
}

constexpr int kLayers = 2;

class PrefixCacheTest : public PagePoolTest {
 protected:
  // Allocates `pages` pages per cache layer for `request`, naming them `names`, and writes (and
  // seals, when `seal`) its own pages as a prefill would.
  absl::StatusOr<PageAllocation> Prefill(uint64_t request, int pages,
                                         const std::vector<PrefixPageHash>& names,
                                         bool seal = true) {
    const uint32_t bytes = static_cast<uint32_t>(EncodedPage(request, 0, 0, 4).size());
    const std::vector<uint32_t> sizes(static_cast<size_t>(kLayers * pages), bytes);
    absl::StatusOr<PageAllocation> allocation =
        pool_->Allocate(request, sizes, absl::ZeroDuration(), {names, kLayers});
    if (!allocation.ok()) return allocation;
    std::vector<SealedPageRef> refs;
    for (int c = 0; c < kLayers; ++c) {
      for (int p = allocation->reused_pages; p < pages; ++p) {
        refs.push_back(Write(allocation->slots[c * pages + p],
                             EncodedPage(request, c, p, 4, allocation->allocation_id), c, p, 4));
      }
    }
    if (seal) {
      absl::Status sealed = pool_->Seal(allocation->allocation_id, allocation->lease_token, refs);
      if (!sealed.ok()) return sealed;
    }
    return allocation;
  }
  absl::Status Release(const PageAllocation& allocation) {
    return pool_->Release(allocation.allocation_id, allocation.lease_token);
  }
  // Every slot is free, allocated, sealed or cached.
  void ExpectSlotsAddUp() {
    const PagePoolUsage usage = pool_->Usage();
    EXPECT_EQ(usage.free_slots + usage.allocated_slots + usage.sealed_slots + usage.cached_slots,
              usage.total_slots);
  }
};

TEST_P(PrefixCacheTest, ReusesTheLongestCachedRunAndPublishesTheRest) {
  absl::StatusOr<PageAllocation> a = Prefill(1, 3, Names(1, 3));
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ(a->reused_pages, 0);
  PagePoolUsage usage = pool_->Usage();
  EXPECT_EQ(usage.cached_pages, 3);
  EXPECT_EQ(usage.cached_slots, 6);
  EXPECT_EQ(usage.pinned_pages, 3);  // by the allocation that published them
  EXPECT_EQ(usage.sealed_slots, 0);  // all of them are the cache's now
  ASSERT_TRUE(Release(*a).ok());
  EXPECT_EQ(pool_->Usage().pinned_pages, 0);
  EXPECT_EQ(pool_->Usage().cached_pages, 3);  // kept after the request ended
  ExpectSlotsAddUp();

  // Same first two pages, then another page: two reused, the rest fresh.
  std::vector<PrefixPageHash> names = Names(1, 2);
  names.push_back(Name(2, 2));
  absl::StatusOr<PageAllocation> b = Prefill(2, 3, names, /*seal=*/false);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->reused_pages, 2);
  EXPECT_EQ(b->written_by, (std::vector<uint64_t>{1, 1}));
  for (int c = 0; c < kLayers; ++c) {
    for (int p = 0; p < 2; ++p) EXPECT_EQ(b->slots[c * 3 + p], a->slots[c * 3 + p]);
    EXPECT_NE(b->slots[c * 3 + 2], a->slots[c * 3 + 2]);
  }
  usage = pool_->Usage();
  EXPECT_EQ(usage.prefix_hit_pages, 2);
  EXPECT_EQ(usage.prefix_miss_pages, 3 + 1);  // a's three, b's last
  EXPECT_EQ(usage.pinned_pages, 2);
  EXPECT_EQ(usage.allocated_slots, 2);  // only its own page's, one per cache layer
  ExpectSlotsAddUp();
}

TEST_P(PrefixCacheTest, UnpinnedPagesMakeRoomLeastRecentlyUsedFirst) {
  // 8 slots: three one-page prompts fill six.
  for (int prompt = 1; prompt <= 3; ++prompt) {
    absl::StatusOr<PageAllocation> a = Prefill(prompt, 1, Names(prompt, 1));
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(Release(*a).ok());
  }
  // Prompt 1 used again (its second page unnamed, so not cached): prompt 2 is now the least
  // recently used.
  absl::StatusOr<PageAllocation> again = Prefill(4, 2, {Name(1, 0)});
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->reused_pages, 1);
  ASSERT_TRUE(Release(*again).ok());
  // 2 free slots; a request for 4 drops one cached page: prompt 2's.
  absl::StatusOr<PageAllocation> big = Prefill(5, 2, {});
  ASSERT_TRUE(big.ok()) << big.status();
  EXPECT_EQ(pool_->Usage().prefix_evictions, 1);
  ASSERT_TRUE(Release(*big).ok());
  absl::StatusOr<PageAllocation> probe = Prefill(6, 1, {Name(2, 0)}, /*seal=*/false);
  ASSERT_TRUE(probe.ok()) << probe.status();
  EXPECT_EQ(probe->reused_pages, 0);
  ASSERT_TRUE(Release(*probe).ok());
  absl::StatusOr<PageAllocation> kept = Prefill(7, 1, {Name(3, 0)}, /*seal=*/false);
  ASSERT_TRUE(kept.ok()) << kept.status();
  EXPECT_EQ(kept->reused_pages, 1);
  ExpectSlotsAddUp();
}

TEST_P(PrefixCacheTest, APromptsCachedRunShortensFromItsEnd) {
  absl::StatusOr<PageAllocation> a = Prefill(1, 3, Names(1, 3));  // 6 of 8 slots
  ASSERT_TRUE(a.ok()) << a.status();
  ASSERT_TRUE(Release(*a).ok());
  ASSERT_TRUE(Release(*Prefill(2, 2, {})).ok());  // needs 4: drops one page, the deepest
  EXPECT_EQ(pool_->Usage().prefix_evictions, 1);
  absl::StatusOr<PageAllocation> b = Prefill(3, 3, Names(1, 3), /*seal=*/false);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->reused_pages, 2);
}

TEST_P(PrefixCacheTest, PinnedPagesAreNeverDropped) {
  absl::StatusOr<PageAllocation> a = Prefill(1, 3, Names(1, 3));  // 6 slots, pinned by a
  ASSERT_TRUE(a.ok()) << a.status();
  const absl::StatusOr<PageAllocation> b = Prefill(2, 2, {});  // needs 4 of 2 free
  EXPECT_TRUE(absl::IsResourceExhausted(b.status())) << b.status();
  EXPECT_EQ(pool_->Usage().cached_pages, 3);
  // A reader's pins hold them too once the writer is gone.
  absl::StatusOr<PageAllocation> reader = Prefill(3, 3, Names(1, 3), /*seal=*/false);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(reader->reused_pages, 3);
  ASSERT_TRUE(Release(*a).ok());
  EXPECT_TRUE(absl::IsResourceExhausted(Prefill(4, 2, {}).status()));
  EXPECT_EQ(pool_->Usage().cached_pages, 3);
  // A failed allocation gave back the pins it took: once the reader ends, the pages can go.
  ASSERT_TRUE(Release(*reader).ok());
  EXPECT_EQ(pool_->Usage().pinned_pages, 0);
  EXPECT_TRUE(Prefill(5, 2, {}).ok());
  ExpectSlotsAddUp();
}

TEST_P(PrefixCacheTest, ExpiryAndCancellationUnpin) {
  absl::StatusOr<PageAllocation> a = Prefill(1, 1, Names(1, 1));
  ASSERT_TRUE(a.ok()) << a.status();
  absl::StatusOr<PageAllocation> b = Prefill(2, 1, Names(1, 1), /*seal=*/false);
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(pool_->CancelRequest(2), 1);  // b, unsealed: cancelled, its pins kept until it goes
  EXPECT_EQ(pool_->Usage().pinned_pages, 1);
  clock_.now += absl::Seconds(11);
  EXPECT_EQ(pool_->ExpireLeases(clock_.now), 2);
  EXPECT_EQ(pool_->Usage().pinned_pages, 0);
  EXPECT_EQ(pool_->Usage().cached_pages, 1);
  ExpectSlotsAddUp();
}

TEST_P(PrefixCacheTest, TheFirstPublisherOfANameWins) {
  absl::StatusOr<PageAllocation> a = Prefill(1, 2, Names(1, 2), /*seal=*/false);
  absl::StatusOr<PageAllocation> b = Prefill(2, 2, Names(1, 2), /*seal=*/false);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<SealedPageRef> refs;
  for (int c = 0; c < kLayers; ++c) {
    for (int p = 0; p < 2; ++p) {
      refs.push_back(
          Write(b->slots[c * 2 + p], EncodedPage(2, c, p, 4, b->allocation_id), c, p, 4));
    }
  }
  ASSERT_TRUE(pool_->Seal(b->allocation_id, b->lease_token, refs).ok());
  std::vector<SealedPageRef> a_refs;
  for (int c = 0; c < kLayers; ++c) {
    for (int p = 0; p < 2; ++p) {
      a_refs.push_back(
          Write(a->slots[c * 2 + p], EncodedPage(1, c, p, 4, a->allocation_id), c, p, 4));
    }
  }
  ASSERT_TRUE(pool_->Seal(a->allocation_id, a->lease_token, a_refs).ok());
  EXPECT_EQ(pool_->Usage().cached_pages, 2);
  EXPECT_EQ(pool_->Usage().sealed_slots, 4);  // a's: not published, freed with a
  ASSERT_TRUE(Release(*a).ok());
  EXPECT_EQ(pool_->Usage().free_slots, 4);
  absl::StatusOr<PageAllocation> c = Prefill(3, 3, Names(1, 3), /*seal=*/false);
  ASSERT_TRUE(c.ok()) << c.status();
  EXPECT_EQ(c->written_by, (std::vector<uint64_t>{2, 2}));
  ExpectSlotsAddUp();
}

TEST_P(PrefixCacheTest, PagesOfAnotherSizeAreNotReused) {
  ASSERT_TRUE(Prefill(1, 1, Names(1, 1)).ok());
  const std::vector<uint32_t> other(kLayers, 1000);
  const std::vector<PrefixPageHash> names = Names(1, 1);
  absl::StatusOr<PageAllocation> b =
      pool_->Allocate(2, other, absl::ZeroDuration(), {names, kLayers});
  ASSERT_TRUE(b.ok()) << b.status();
  EXPECT_EQ(b->reused_pages, 0);
  EXPECT_EQ(pool_->Usage().prefix_mismatches, 1);
}

TEST_P(PrefixCacheTest, NamesThatDoNotFitThePagesAreRefused) {
  const std::vector<PrefixPageHash> names = Names(1, 3);
  const std::vector<uint32_t> four(4, 1000), three(3, 1000);
  EXPECT_TRUE(
      absl::IsInvalidArgument(pool_->Allocate(1, four, absl::ZeroDuration(), {names, kLayers})
                                  .status()));  // 3 names, 2 pages
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->Allocate(1, three, absl::ZeroDuration(), {names, kLayers}).status()));  // 3 % 2
  EXPECT_TRUE(
      absl::IsInvalidArgument(pool_->Allocate(1, four, absl::ZeroDuration(), {names, 0}).status()));
  const std::vector<uint32_t> mixed = {1000, 1000, 1000, 900};
  EXPECT_TRUE(absl::IsInvalidArgument(
      pool_->Allocate(1, mixed, absl::ZeroDuration(), {Names(1, 1), kLayers}).status()));
  ExpectSlotsAddUp();
}

// Threads allocate, read and release prompts sharing prefixes in a pool too small for all of
// them, so that eviction runs while other allocations pin and read cached pages: every reused slot
// must still hold the page its writer sealed there.
TEST_P(PrefixCacheTest, EvictionNeverTakesAPageFromAReader) {
  constexpr int kThreads = 4, kRounds = 300;
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < kRounds; ++round) {
        const uint64_t request = static_cast<uint64_t>(t * kRounds + round + 1);
        const int prompt = (t + round) % 3;  // three prompts of up to 2 pages
        const int pages = 1 + round % 2;
        absl::StatusOr<PageAllocation> a = Prefill(request, pages, Names(prompt, pages));
        if (!a.ok()) {
          if (!absl::IsResourceExhausted(a.status())) ++failures;
          continue;
        }
        for (int c = 0; c < kLayers; ++c) {
          for (int p = 0; p < a->reused_pages; ++p) {
            const uint8_t* bytes = pool_->base() + a->slots[c * pages + p] * kSlotBytes;
            absl::StatusOr<KvPageView> page = DecodeKvPage({bytes, EncodedPage(1, 0, 0, 4).size()});
            if (!page.ok() || page->header.request_id != a->written_by[p] ||
                page->header.epoch != a->written_epoch[p] || page->header.cache_layer != c ||
                page->header.page_index != p) {
              ++failures;
            }
          }
        }
        if (!Release(*a).ok()) ++failures;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_GT(pool_->Usage().prefix_hit_pages, 0);
  EXPECT_EQ(pool_->Usage().pinned_pages, 0);
  ExpectSlotsAddUp();
}

INSTANTIATE_TEST_SUITE_P(Memory, PrefixCacheTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "CallerMemory" : "OwnMapping");
                         });

INSTANTIATE_TEST_SUITE_P(Memory, PagePoolTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "CallerMemory" : "OwnMapping");
                         });

}  // namespace
}  // namespace pdserve
