// PagePool: option validation; the allocate → seal → release state machine; all-or-nothing
// allocation; lease expiry through an injected clock (no sleeping), both by ExpireLeases and on
// the next touch; cancellation by request; tokens (wrong → PermissionDenied, freed → NotFound);
// Seal checks with real encoded pages (corrupted, another request's, mismatched refs, foreign
// slots) leaving the allocation unsealed. Every fixture test runs with the pool's own mapping and
// with caller-provided memory (as the KV store gives it memory from Transport::Allocate).
#include "services/kvstore/page_pool.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
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

std::string EncodedPage(uint64_t request_id, int cache_layer, int page_index, int num_tokens) {
  KvPageHeader header;
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
    refs->push_back(Write(allocation->slots[0], p0, 0, 0, 3));
    refs->push_back(Write(allocation->slots[1], p1, 1, 0, 3));
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

TEST_P(PagePoolTest, CancelRequestFreesAllItsAllocations) {
  ASSERT_TRUE(pool_->Allocate(5, std::vector<uint32_t>{1, 1}, absl::ZeroDuration()).ok());
  ASSERT_TRUE(pool_->Allocate(5, std::vector<uint32_t>{1}, absl::ZeroDuration()).ok());
  absl::StatusOr<PageAllocation> other =
      pool_->Allocate(6, std::vector<uint32_t>{1}, absl::ZeroDuration());
  ASSERT_TRUE(other.ok());
  EXPECT_EQ(pool_->CancelRequest(5), 2);
  EXPECT_EQ(pool_->CancelRequest(5), 0);
  EXPECT_EQ(pool_->CancelRequest(12345), 0);
  PagePoolUsage usage = pool_->Usage();
  EXPECT_EQ(usage.free_slots, 7);
  EXPECT_EQ(usage.allocations, 1);
  EXPECT_EQ(usage.cancellations_total, 2);
  EXPECT_TRUE(pool_->Release(other->allocation_id, other->lease_token).ok());
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
  refs[0] = Write(allocation.slots[0], EncodedPage(8, 0, 0, 3), 0, 0, 3);
  absl::Status sealed = pool_->Seal(allocation.allocation_id, allocation.lease_token, refs);
  ASSERT_TRUE(absl::IsInvalidArgument(sealed)) << sealed;
  EXPECT_NE(sealed.message().find("belongs to request 8"), std::string::npos) << sealed;
  EXPECT_EQ(pool_->Usage().sealed_slots, 0);
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

INSTANTIATE_TEST_SUITE_P(Memory, PagePoolTest, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "CallerMemory" : "OwnMapping");
                         });

}  // namespace
}  // namespace pdserve
