#include "core/transport/fake_transport.h"

#include <cstring>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

class FakeTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    target_.resize(1 << 16);
    auto region = a_.Register(target_.data(), target_.size(), RemoteAccess::kReadWrite);
    ASSERT_TRUE(region.ok());
    region_ = *std::move(region);
    auto endpoint = b_.Connect(a_.address());
    ASSERT_TRUE(endpoint.ok()) << endpoint.status();
    endpoint_ = *std::move(endpoint);
  }
  std::shared_ptr<FakeNetwork> network_ = std::make_shared<FakeNetwork>();
  FakeTransport a_{network_};
  FakeTransport b_{network_};
  std::vector<uint8_t> target_;
  std::unique_ptr<MemoryRegion> region_;
  std::unique_ptr<Endpoint> endpoint_;
};

TEST_F(FakeTransportTest, PutThenGetRoundTripsAndCounts) {
  std::vector<uint8_t> source(1000), back(1000);
  std::iota(source.begin(), source.end(), 0);
  std::vector<TransferOp> puts = {{source.data(), 500, region_->address() + 100},
                                  {source.data() + 500, 500, region_->address() + 5000}};
  ASSERT_TRUE(endpoint_->PutBatch(region_->packed_rkey(), puts).ok());
  EXPECT_EQ(0, std::memcmp(target_.data() + 5000, source.data() + 500, 500));
  std::vector<TransferOp> gets = {{back.data(), 500, region_->address() + 100},
                                  {back.data() + 500, 500, region_->address() + 5000}};
  ASSERT_TRUE(endpoint_->GetBatch(region_->packed_rkey(), gets).ok());
  EXPECT_EQ(source, back);
  FakeTransportStats stats = b_.stats();
  EXPECT_EQ(stats.put_ops, 2u);
  EXPECT_EQ(stats.get_ops, 2u);
  EXPECT_EQ(stats.put_bytes, 1000u);
  EXPECT_EQ(stats.get_bytes, 1000u);
  EXPECT_EQ(stats.batches, 2u);
  EXPECT_EQ(endpoint_->transports_in_use(), std::vector<std::string>{"fake"});
}

TEST_F(FakeTransportTest, BoundsKeysAndAccessAreChecked) {
  uint8_t byte = 1;
  const uint64_t base = region_->address();
  EXPECT_EQ(endpoint_->Put(region_->packed_rkey(), &byte, 1, base + target_.size()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoint_->Get(region_->packed_rkey(), &byte, 2, base - 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoint_->Put("nonsense", &byte, 1, base).code(), absl::StatusCode::kInvalidArgument);
  // A batch with one bad op copies nothing.
  std::vector<uint8_t> source(8, 0xee);
  std::vector<TransferOp> ops = {{source.data(), 8, base}, {source.data(), 8, base - 8}};
  EXPECT_FALSE(endpoint_->PutBatch(region_->packed_rkey(), ops).ok());
  EXPECT_EQ(target_[0], 0);

  std::vector<uint8_t> readonly(64, 7);
  auto region = a_.Register(readonly.data(), readonly.size(), RemoteAccess::kRead);
  ASSERT_TRUE(region.ok());
  EXPECT_EQ(endpoint_->Put((*region)->packed_rkey(), &byte, 1, (*region)->address()).code(),
            absl::StatusCode::kPermissionDenied);
  ASSERT_TRUE(endpoint_->Get((*region)->packed_rkey(), &byte, 1, (*region)->address()).ok());
  EXPECT_EQ(byte, 7);
  std::string rkey = (*region)->packed_rkey();
  region->reset();  // deregistered: the key no longer works
  EXPECT_EQ(endpoint_->Get(rkey, &byte, 1, reinterpret_cast<uint64_t>(readonly.data())).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a_.Register(nullptr, 1, RemoteAccess::kRead).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(FakeTransportTest, FailNextThenRecovers) {
  uint8_t byte = 3;
  b_.FailNext(2, absl::UnavailableError("injected"));
  EXPECT_EQ(endpoint_->Put(region_->packed_rkey(), &byte, 1, region_->address()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(endpoint_->Get(region_->packed_rkey(), &byte, 1, region_->address()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(endpoint_->Put(region_->packed_rkey(), &byte, 1, region_->address()).ok());
  EXPECT_EQ(b_.stats().failed_batches, 2u);
}

TEST_F(FakeTransportTest, FailNextAfterLetsTheFirstBatchesPass) {
  uint8_t byte = 3;
  b_.FailNext(1, absl::UnavailableError("injected"), /*after=*/2);
  EXPECT_TRUE(endpoint_->Put(region_->packed_rkey(), &byte, 1, region_->address()).ok());
  EXPECT_TRUE(endpoint_->Get(region_->packed_rkey(), &byte, 1, region_->address()).ok());
  EXPECT_EQ(endpoint_->Get(region_->packed_rkey(), &byte, 1, region_->address()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_TRUE(endpoint_->Put(region_->packed_rkey(), &byte, 1, region_->address()).ok());
  EXPECT_EQ(b_.stats().failed_batches, 1u);
}

TEST_F(FakeTransportTest, PeerDownAndDestroyedPeerAreUnavailable) {
  uint8_t byte = 3;
  b_.SetPeerDown(a_.address());
  EXPECT_EQ(endpoint_->Put(region_->packed_rkey(), &byte, 1, region_->address()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(b_.Connect(a_.address()).status().code(), absl::StatusCode::kUnavailable);
  b_.SetPeerDown(a_.address(), false);
  EXPECT_TRUE(endpoint_->Put(region_->packed_rkey(), &byte, 1, region_->address()).ok());

  auto c = std::make_unique<FakeTransport>(network_);
  std::vector<uint8_t> memory(16);
  auto region = c->Register(memory.data(), memory.size(), RemoteAccess::kReadWrite);
  ASSERT_TRUE(region.ok());
  auto endpoint = b_.Connect(c->address());
  ASSERT_TRUE(endpoint.ok());
  std::string rkey = (*region)->packed_rkey();
  c.reset();  // the region outlives its transport without crashing
  EXPECT_EQ((*endpoint)->Put(rkey, &byte, 1, (*region)->address()).code(),
            absl::StatusCode::kUnavailable);
  EXPECT_EQ(b_.Connect("fake://nowhere").status().code(), absl::StatusCode::kUnavailable);
}

TEST_F(FakeTransportTest, CorruptNextGetsFlipsBytes) {
  std::vector<uint8_t> back(64);
  b_.CorruptNextGets(1);
  ASSERT_TRUE(
      endpoint_->Get(region_->packed_rkey(), back.data(), back.size(), region_->address()).ok());
  EXPECT_NE(back, std::vector<uint8_t>(64, 0));
  ASSERT_TRUE(
      endpoint_->Get(region_->packed_rkey(), back.data(), back.size(), region_->address()).ok());
  EXPECT_EQ(back, std::vector<uint8_t>(64, 0));
}

TEST_F(FakeTransportTest, CorruptNextGetsAfterLetsTheFirstGetsPass) {
  std::vector<uint8_t> back(64);
  b_.CorruptNextGets(1, /*after=*/1);
  for (const bool corrupted : {false, true, false}) {
    ASSERT_TRUE(
        endpoint_->Get(region_->packed_rkey(), back.data(), back.size(), region_->address()).ok());
    EXPECT_EQ(back != std::vector<uint8_t>(64, 0), corrupted);
  }
}

TEST_F(FakeTransportTest, RegisteredRegionDataIsTheCallersMemory) {
  EXPECT_EQ(region_->data(), target_.data());
  EXPECT_EQ(region_->address(), reinterpret_cast<uint64_t>(target_.data()));
}

TEST_F(FakeTransportTest, AllocatedRegionIsReachableAndOwned) {
  EXPECT_EQ(a_.Allocate(0, RemoteAccess::kReadWrite).status().code(),
            absl::StatusCode::kInvalidArgument);
  auto region = a_.Allocate(10000, RemoteAccess::kReadWrite);
  ASSERT_TRUE(region.ok()) << region.status();
  MemoryRegion& allocated = **region;
  ASSERT_NE(allocated.data(), nullptr);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(allocated.data()) % 4096, 0u);
  EXPECT_EQ(allocated.size(), 10000u);
  EXPECT_EQ(allocated.address(), reinterpret_cast<uint64_t>(allocated.data()));
  EXPECT_EQ(allocated.data()[9999], 0);  // zero-filled
  std::vector<uint8_t> source(100);
  std::iota(source.begin(), source.end(), 1);
  ASSERT_TRUE(
      endpoint_->Put(allocated.packed_rkey(), source.data(), 100, allocated.address() + 9900).ok());
  EXPECT_EQ(0, std::memcmp(allocated.data() + 9900, source.data(), 100));
  allocated.data()[0] = 0x77;
  uint8_t byte = 0;
  ASSERT_TRUE(endpoint_->Get(allocated.packed_rkey(), &byte, 1, allocated.address()).ok());
  EXPECT_EQ(byte, 0x77);
  EXPECT_EQ(endpoint_->Put(allocated.packed_rkey(), source.data(), 100, allocated.address() + 9901)
                .code(),
            absl::StatusCode::kInvalidArgument);
  auto readonly = a_.Allocate(64, RemoteAccess::kRead);
  ASSERT_TRUE(readonly.ok());
  EXPECT_EQ(endpoint_->Put((*readonly)->packed_rkey(), &byte, 1, (*readonly)->address()).code(),
            absl::StatusCode::kPermissionDenied);
  // Freed with the region: its key no longer reaches anything.
  const std::string rkey = allocated.packed_rkey();
  const uint64_t address = allocated.address();
  region->reset();
  EXPECT_EQ(endpoint_->Get(rkey, &byte, 1, address).code(), absl::StatusCode::kInvalidArgument);
}

TEST(FakeNetworkTest, SeparateNetworksDoNotSeeEachOther) {
  FakeTransport a(std::make_shared<FakeNetwork>());
  FakeTransport b(std::make_shared<FakeNetwork>());
  EXPECT_EQ(b.Connect(a.address()).status().code(), absl::StatusCode::kUnavailable);
  FakeTransport c;  // default network
  FakeTransport d;
  EXPECT_TRUE(d.Connect(c.address()).ok());
}

}  // namespace
}  // namespace pdserve
