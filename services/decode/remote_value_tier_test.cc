#include "services/decode/remote_value_tier.h"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <numeric>
#include <vector>

#include "core/kv/kv_page.h"
#include "core/transport/fake_transport.h"

namespace pdserve {
namespace {

// Two f32 heads of widths 3 and 2, pages of 4 tokens.
KvSectionLayout Layout() { return KvSectionLayout(4, {3, 2}, KvElement::kF32, KvScaleMode::kNone); }

class RemoteValueTierTest : public ::testing::Test {
 protected:
  void SetUp() override {
    network_ = std::make_shared<FakeNetwork>();
    store_ = std::make_unique<FakeTransport>(network_);
    decoder_ = std::make_unique<FakeTransport>(network_);
    // The "KV store" holds one V section at byte 64 of its region.
    remote_bytes_.assign(64 + Layout().bytes(), 0);
    std::iota(remote_bytes_.begin() + 64, remote_bytes_.end(), uint8_t{1});
    region_ = *store_->Register(remote_bytes_.data(), remote_bytes_.size(), RemoteAccess::kRead);
    std::shared_ptr<Endpoint> endpoint = *decoder_->Connect(store_->address());
    source_ = std::make_shared<RemotePageSource>(endpoint, region_->packed_rkey());
    tier_ = *RemoteValueTier::Create(4, 3, {Layout()});
  }

  // What the page's header records for each head of the remote section as it is now.
  std::vector<uint64_t> Checksums() const {
    return {KvHeadChecksum(Layout(), 0, remote_bytes_.data() + 64),
            KvHeadChecksum(Layout(), 1, remote_bytes_.data() + 64)};
  }
  void Map(int32_t page) {
    tier_->MapRemote(0, page, source_, region_->address() + 64, Checksums());
  }

  std::shared_ptr<FakeNetwork> network_;
  std::unique_ptr<FakeTransport> store_, decoder_;
  std::vector<uint8_t> remote_bytes_;
  std::unique_ptr<MemoryRegion> region_;
  std::shared_ptr<RemotePageSource> source_;
  std::unique_ptr<RemoteValueTier> tier_;
};

TEST_F(RemoteValueTierTest, FetchesOnlyTheRequestedHeadOfARemotePage) {
  Map(1);
  const KvSectionLayout layout = Layout();
  const uint8_t* page = tier_->FetchHead(0, 1, 1);
  const int64_t head_bytes = 4 * 2 * 4;
  EXPECT_EQ(0, std::memcmp(page + layout.head_offset(1),
                           remote_bytes_.data() + 64 + layout.head_offset(1), head_bytes));
  // Head 0 was not fetched: the mirror still holds zeros there.
  std::vector<uint8_t> zeros(4 * 3 * 4, 0);
  EXPECT_EQ(0, std::memcmp(page + layout.head_offset(0), zeros.data(), zeros.size()));
  EXPECT_EQ(tier_->remote_bytes_fetched(), head_bytes);
  EXPECT_EQ(tier_->bytes_fetched(), head_bytes);
  EXPECT_FALSE(source_->failed());
}

TEST_F(RemoteValueTierTest, WritingAPageMakesItLocal) {
  Map(2);
  uint8_t* local = tier_->WritablePage(0, 2);
  std::memset(local, 0xAB, Layout().bytes());
  const uint8_t* page = tier_->FetchHead(0, 2, 0);
  EXPECT_EQ(page, local);
  EXPECT_EQ(page[Layout().head_offset(0)], 0xAB);
  EXPECT_EQ(tier_->remote_bytes_fetched(), 0);
  EXPECT_EQ(tier_->bytes_fetched(), 4 * 3 * 4);
}

TEST_F(RemoteValueTierTest, AFailedFetchReadsZerosAndMarksTheSource) {
  Map(0);
  decoder_->FailNext(1, absl::UnavailableError("peer gone"));
  const uint8_t* page = tier_->FetchHead(0, 0, 0);
  std::vector<uint8_t> zeros(4 * 3 * 4, 0);
  EXPECT_EQ(0, std::memcmp(page + Layout().head_offset(0), zeros.data(), zeros.size()));
  EXPECT_TRUE(source_->failed());
  EXPECT_TRUE(absl::IsUnavailable(source_->failure()));
  // Later fetches from a failed source do not touch the transport again.
  (void)tier_->FetchHead(0, 0, 1);
  EXPECT_EQ(tier_->remote_bytes_fetched(), 0);
}

// The store's bytes changed after the page was pulled (a torn write, a tampered page, or the slot's
// next owner after the lease ran out): the head no longer matches its checksum, so it reads as
// zeros, never as the new bytes, and the source records DataLoss. An unchanged head verifies.
TEST_F(RemoteValueTierTest, AHeadThatNoLongerMatchesItsChecksumIsRefused) {
  Map(1);
  const KvSectionLayout layout = Layout();
  const uint8_t* page = tier_->FetchHead(0, 1, 0);
  EXPECT_EQ(0, std::memcmp(page + layout.head_offset(0),
                           remote_bytes_.data() + 64 + layout.head_offset(0), 4 * 3 * 4));
  EXPECT_FALSE(source_->failed());
  remote_bytes_[64 + layout.row_offset(1, 3) + 2] ^= 0x40;
  page = tier_->FetchHead(0, 1, 1);
  std::vector<uint8_t> zeros(4 * 2 * 4, 0);
  EXPECT_EQ(0, std::memcmp(page + layout.head_offset(1), zeros.data(), zeros.size()));
  EXPECT_TRUE(source_->failed());
  EXPECT_TRUE(absl::IsDataLoss(source_->failure())) << source_->failure();
  EXPECT_NE(source_->failure().message().find("V head 1"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
