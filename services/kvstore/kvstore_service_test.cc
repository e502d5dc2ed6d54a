// KvStoreServer end to end, in process: the real gRPC service on 127.0.0.1:0 over FakeTransport,
// driven through a generated stub. Allocate → Put pages into the returned slot addresses with
// GetInfo's rkey → Seal → Get back → Renew → Release → usage back to baseline; a short lease is
// reaped (polled with a deadline, no fixed sleep); bad inputs get the documented codes; bad
// options are refused by Create. One round trip runs over the real UcxTransport (tcp, and shm).
#include "services/kvstore/kvstore_service.h"

#include <grpcpp/grpcpp.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "absl/time/clock.h"
#include "core/kv/kv_page.h"
#include "core/transport/fake_transport.h"
#include "core/transport/ucx_transport.h"
#include "gtest/gtest.h"
#include "pdserve/v1/kvstore.grpc.pb.h"
#include "services/common/kvstore_connection.h"

namespace pdserve {
namespace {

namespace v1 = ::pdserve::v1;

constexpr int64_t kSlotBytes = 4096;
constexpr int kSlots = 16;

// A valid page of `request_id` written in epoch `epoch` (its allocation's id; the size does not
// depend on it).
std::string EncodedPage(uint64_t request_id, int cache_layer, int page_index, int num_tokens,
                        uint64_t epoch = 0) {
  KvPageHeader header;
  header.request_id = request_id;
  header.epoch = epoch;
  header.cache_layer = cache_layer;
  header.page_index = page_index;
  header.num_tokens = num_tokens;
  header.layout.k = KvSectionLayout(4, {8}, KvElement::kF32, KvScaleMode::kNone);
  header.layout.v = header.layout.k;
  std::vector<float> values(static_cast<size_t>(header.layout.k.bytes() / 4));
  for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 9) - 4.0f;
  const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(values.data()),
                                       values.size() * 4);
  absl::StatusOr<std::string> page = EncodeKvPage(header, bytes, bytes);
  EXPECT_TRUE(page.ok()) << page.status();
  return page.ok() ? *page : std::string();
}

class KvStoreServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KvStoreOptions options;
    options.pool_bytes = kSlots * kSlotBytes;
    options.slot_bytes = kSlotBytes;
    options.default_lease_seconds = 10;
    options.max_lease_seconds = 30;
    absl::StatusOr<std::unique_ptr<KvStoreServer>> server =
        KvStoreServer::Create(options, server_transport_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    stub_ = v1::KvStore::NewStub(MakeInternalChannel(server_->address(), ComponentRole::kKvStore));
    grpc::ClientContext context;
    ASSERT_TRUE(stub_->GetInfo(&context, v1::GetInfoRequest(), &info_).ok());
  }

  v1::PoolUsage Usage() {
    grpc::ClientContext context;
    v1::PoolUsage usage;
    EXPECT_TRUE(stub_->GetPoolUsage(&context, v1::PoolUsageRequest(), &usage).ok());
    return usage;
  }

  grpc::Status Allocate(uint64_t request_id, const std::vector<uint32_t>& page_bytes,
                        double lease_seconds, v1::AllocateReply* reply) {
    v1::AllocateRequest request;
    request.set_request_id(request_id);
    for (uint32_t bytes : page_bytes) request.add_page_bytes(bytes);
    request.set_lease_seconds(lease_seconds);
    grpc::ClientContext context;
    return stub_->Allocate(&context, request, reply);
  }

  grpc::Status Seal(const v1::AllocateReply& allocation, const std::vector<v1::PageRef>& pages,
                    uint64_t token) {
    v1::SealRequest request;
    request.set_allocation_id(allocation.allocation_id());
    request.set_lease_token(token);
    for (const v1::PageRef& page : pages) *request.add_pages() = page;
    grpc::ClientContext context;
    v1::SealReply reply;
    return stub_->Seal(&context, request, &reply);
  }

  grpc::Status Renew(uint64_t id, uint64_t token, double seconds, v1::RenewReply* reply) {
    v1::RenewRequest request;
    request.set_allocation_id(id);
    request.set_lease_token(token);
    request.set_lease_seconds(seconds);
    grpc::ClientContext context;
    return stub_->Renew(&context, request, reply);
  }

  grpc::Status Release(uint64_t id, uint64_t token) {
    v1::ReleaseRequest request;
    request.set_allocation_id(id);
    request.set_lease_token(token);
    grpc::ClientContext context;
    v1::ReleaseReply reply;
    return stub_->Release(&context, request, &reply);
  }

  // Puts `page` at `address` through a client transport, as prefill does; returns its ref.
  v1::PageRef Put(Endpoint& endpoint, const std::string& page, uint64_t address, int layer,
                  int index, int tokens) {
    EXPECT_TRUE(endpoint.Put(info_.pool_rkey(), page.data(), page.size(), address).ok());
    v1::PageRef ref;
    ref.set_cache_layer(layer);
    ref.set_page_index(index);
    ref.set_num_tokens(tokens);
    ref.set_remote_address(address);
    ref.set_encoded_bytes(static_cast<uint32_t>(page.size()));
    return ref;
  }

  std::shared_ptr<FakeNetwork> network_ = std::make_shared<FakeNetwork>();
  FakeTransport server_transport_{network_};
  FakeTransport client_transport_{network_};
  std::unique_ptr<KvStoreServer> server_;
  std::unique_ptr<v1::KvStore::Stub> stub_;
  v1::KvStoreInfo info_;
};

TEST_F(KvStoreServiceTest, GetInfoDescribesThePool) {
  EXPECT_EQ(info_.worker_address(), server_transport_.address());
  EXPECT_EQ(info_.pool_address(), server_->region().address());
  EXPECT_EQ(info_.pool_rkey(), server_->region().packed_rkey());
  EXPECT_EQ(info_.slot_bytes(), kSlotBytes);
  EXPECT_EQ(info_.total_slots(), kSlots);
  EXPECT_EQ(info_.transports(), "fake");
  EXPECT_EQ(info_.default_lease_seconds(), 10.0);
  const v1::PoolUsage usage = Usage();
  EXPECT_EQ(usage.total_slots(), kSlots);
  EXPECT_EQ(usage.free_slots(), kSlots);
}

TEST_F(KvStoreServiceTest, WriteSealReadRenewRelease) {
  const std::string p0 = EncodedPage(42, 0, 0, 4);
  const std::string p1 = EncodedPage(42, 0, 1, 2);
  v1::AllocateReply allocation;
  ASSERT_TRUE(Allocate(42, {static_cast<uint32_t>(p0.size()), static_cast<uint32_t>(p1.size())}, 0,
                       &allocation)
                  .ok());
  ASSERT_EQ(allocation.slot_addresses_size(), 2);
  EXPECT_EQ(allocation.lease_seconds(), 10.0);
  for (uint64_t address : allocation.slot_addresses()) {
    EXPECT_GE(address, info_.pool_address());
    EXPECT_EQ((address - info_.pool_address()) % kSlotBytes, 0u);
  }
  v1::PoolUsage usage = Usage();
  EXPECT_EQ(usage.allocated_slots(), 2);
  EXPECT_EQ(usage.allocations(), 1);

  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint =
      client_transport_.Connect(info_.worker_address());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  const uint64_t epoch = allocation.allocation_id();
  const std::vector<v1::PageRef> refs = {
      Put(**endpoint, EncodedPage(42, 0, 0, 4, epoch), allocation.slot_addresses(0), 0, 0, 4),
      Put(**endpoint, EncodedPage(42, 0, 1, 2, epoch), allocation.slot_addresses(1), 0, 1, 2)};
  const grpc::Status sealed = Seal(allocation, refs, allocation.lease_token());
  ASSERT_TRUE(sealed.ok()) << sealed.error_message();
  usage = Usage();
  EXPECT_EQ(usage.allocated_slots(), 0);
  EXPECT_EQ(usage.sealed_slots(), 2);

  // Decode reads a sealed page back one-sided.
  std::string read(p1.size(), '\0');
  ASSERT_TRUE(
      (*endpoint)->Get(info_.pool_rkey(), read.data(), read.size(), refs[1].remote_address()).ok());
  EXPECT_EQ(read, EncodedPage(42, 0, 1, 2, epoch));

  v1::RenewReply renewed;
  ASSERT_TRUE(Renew(allocation.allocation_id(), allocation.lease_token(), 5, &renewed).ok());
  EXPECT_EQ(renewed.lease_seconds(), 5.0);
  ASSERT_TRUE(Renew(allocation.allocation_id(), allocation.lease_token(), 1000, &renewed).ok());
  EXPECT_EQ(renewed.lease_seconds(), 30.0);  // capped

  ASSERT_TRUE(Release(allocation.allocation_id(), allocation.lease_token()).ok());
  usage = Usage();
  EXPECT_EQ(usage.free_slots(), kSlots);
  EXPECT_EQ(usage.allocated_slots(), 0);
  EXPECT_EQ(usage.sealed_slots(), 0);
  EXPECT_EQ(usage.allocations(), 0);
  EXPECT_EQ(usage.releases_total(), 1);
  EXPECT_EQ(Release(allocation.allocation_id(), allocation.lease_token()).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(KvStoreServiceTest, ShortLeaseIsReaped) {
  v1::AllocateReply allocation;
  ASSERT_TRUE(Allocate(7, {100, 100, 100}, 0.2, &allocation).ok());
  EXPECT_NEAR(allocation.lease_seconds(), 0.2, 1e-9);
  EXPECT_EQ(Usage().free_slots(), kSlots - 3);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  v1::PoolUsage usage = Usage();
  while (usage.free_slots() != kSlots && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(20));
    usage = Usage();
  }
  EXPECT_EQ(usage.free_slots(), kSlots);
  EXPECT_EQ(usage.allocations(), 0);
  EXPECT_EQ(usage.lease_expiries_total(), 1);
  v1::RenewReply renewed;
  EXPECT_EQ(Renew(allocation.allocation_id(), allocation.lease_token(), 0, &renewed).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

TEST_F(KvStoreServiceTest, BadInputsGetDocumentedCodes) {
  v1::AllocateReply reply;
  EXPECT_EQ(Allocate(1, {}, 0, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Allocate(1, {kSlotBytes + 1}, 0, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Allocate(1, std::vector<uint32_t>(kSlots + 1, 10), 0, &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Allocate(1, {10}, -1, &reply).error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(Allocate(1, {10}, std::numeric_limits<double>::quiet_NaN(), &reply).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  {
    // Prefix-cache names are 16 bytes, at most one per page of each cache layer.
    v1::AllocateRequest request;
    request.set_request_id(1);
    request.add_page_bytes(10);
    request.add_page_bytes(10);
    request.set_cache_layers(2);
    request.add_prefix_hashes(std::string(15, 'x'));
    grpc::ClientContext context;
    EXPECT_EQ(stub_->Allocate(&context, request, &reply).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
    request.set_prefix_hashes(0, std::string(16, 'x'));
    request.add_prefix_hashes(std::string(16, 'y'));  // two names, one page per layer
    grpc::ClientContext again;
    EXPECT_EQ(stub_->Allocate(&again, request, &reply).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  EXPECT_EQ(Usage().free_slots(), kSlots);

  v1::AllocateReply big;
  ASSERT_TRUE(Allocate(1, std::vector<uint32_t>(kSlots - 1, 10), 0, &big).ok());
  EXPECT_EQ(Allocate(2, {10, 10}, 0, &reply).error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
  EXPECT_EQ(Usage().free_slots(), 1);

  v1::AllocateReply small;
  ASSERT_TRUE(Allocate(2, {100}, 0, &small).ok());
  const uint64_t wrong = small.lease_token() + 1;
  v1::RenewReply renewed;
  EXPECT_EQ(Renew(small.allocation_id(), wrong, 0, &renewed).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Release(small.allocation_id(), wrong).error_code(),
            grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Release(small.allocation_id() + 1000, small.lease_token()).error_code(),
            grpc::StatusCode::NOT_FOUND);

  // Seal: a page that was never written does not decode; an address outside the pool; a page of
  // another request.
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint =
      client_transport_.Connect(info_.worker_address());
  ASSERT_TRUE(endpoint.ok());
  v1::PageRef unwritten;
  unwritten.set_remote_address(small.slot_addresses(0));
  unwritten.set_encoded_bytes(100);
  unwritten.set_num_tokens(1);
  EXPECT_EQ(Seal(small, {unwritten}, small.lease_token()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  v1::PageRef outside = unwritten;
  outside.set_remote_address(info_.pool_address() + kSlots * kSlotBytes);
  EXPECT_EQ(Seal(small, {outside}, small.lease_token()).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  const v1::PageRef foreign = Put(**endpoint, EncodedPage(3, 0, 0, 4, small.allocation_id()),
                                  small.slot_addresses(0), 0, 0, 4);
  const grpc::Status sealed = Seal(small, {foreign}, small.lease_token());
  EXPECT_EQ(sealed.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(sealed.error_message().find("belongs to request 3"), std::string::npos)
      << sealed.error_message();
  EXPECT_EQ(Seal(small, {foreign}, wrong).error_code(), grpc::StatusCode::PERMISSION_DENIED);
  EXPECT_EQ(Usage().sealed_slots(), 0);

  // Cancellation stops the request's unsealed allocation (CANCELLED), whose slots its writer
  // then releases.
  v1::CancelRequestRequest cancel;
  cancel.set_request_id(1);
  v1::CancelRequestReply cancelled;
  grpc::ClientContext context;
  ASSERT_TRUE(stub_->CancelRequest(&context, cancel, &cancelled).ok());
  EXPECT_EQ(cancelled.released_allocations(), 1);
  EXPECT_EQ(Renew(big.allocation_id(), big.lease_token(), 0, &renewed).error_code(),
            grpc::StatusCode::CANCELLED);
  EXPECT_EQ(Usage().free_slots(), 0);
  EXPECT_TRUE(Release(big.allocation_id(), big.lease_token()).ok());
  EXPECT_EQ(Usage().free_slots(), kSlots - 1);
}

TEST(KvStoreServerTest, CreateRejectsBadOptions) {
  FakeTransport transport(std::make_shared<FakeNetwork>());
  const auto rejected = [&](KvStoreOptions options) {
    return absl::IsInvalidArgument(KvStoreServer::Create(options, transport).status());
  };
  KvStoreOptions options;
  options.slot_bytes = 1024;
  EXPECT_TRUE(rejected(options));
  options = KvStoreOptions();
  options.slot_bytes = 4096 + 8;
  EXPECT_TRUE(rejected(options));
  options = KvStoreOptions();
  options.pool_bytes = options.slot_bytes - 1;
  EXPECT_TRUE(rejected(options));
  options = KvStoreOptions();
  options.default_lease_seconds = 0;
  EXPECT_TRUE(rejected(options));
  options = KvStoreOptions();
  options.max_lease_seconds = 1;
  EXPECT_TRUE(rejected(options));
  EXPECT_TRUE(KvStoreOptions().Validate().ok());
}

// The same write → seal → read path with the pool allocated through UCX (two workers in this
// process): over tcp, and over shared memory (posix/sysv: the pool is a UCX-allocated shm
// segment the client maps); skipped where UCX cannot open the transports.
class KvStoreUcxTest : public ::testing::TestWithParam<const char*> {};

TEST_P(KvStoreUcxTest, RoundTrip) {
  UcxTransportOptions ucx;
  ucx.transports = GetParam();
  ucx.peer_failure_detection = ucx.transports == "tcp";  // posix/sysv need it off (UCX 1.13)
  absl::StatusOr<std::unique_ptr<UcxTransport>> server_transport = UcxTransport::Create(ucx);
  absl::StatusOr<std::unique_ptr<UcxTransport>> client_transport = UcxTransport::Create(ucx);
  if (!server_transport.ok() || !client_transport.ok()) {
    GTEST_SKIP() << "UCX cannot open " << ucx.transports << ": " << server_transport.status();
  }
  KvStoreOptions options;
  options.pool_bytes = 8 * kSlotBytes;
  options.slot_bytes = kSlotBytes;
  absl::StatusOr<std::unique_ptr<KvStoreServer>> server =
      KvStoreServer::Create(options, **server_transport);
  ASSERT_TRUE(server.ok()) << server.status();
  auto stub =
      v1::KvStore::NewStub(MakeInternalChannel((*server)->address(), ComponentRole::kKvStore));
  v1::KvStoreInfo info;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->GetInfo(&context, v1::GetInfoRequest(), &info).ok());
  }
  EXPECT_FALSE(info.transports().empty());
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint =
      (*client_transport)->Connect(info.worker_address());
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();

  const std::string page = EncodedPage(9, 2, 0, 3);
  v1::AllocateRequest allocate;
  allocate.set_request_id(9);
  allocate.add_page_bytes(static_cast<uint32_t>(page.size()));
  v1::AllocateReply allocation;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Allocate(&context, allocate, &allocation).ok());
  }
  const uint64_t address = allocation.slot_addresses(0);
  const std::string written = EncodedPage(9, 2, 0, 3, allocation.allocation_id());
  ASSERT_TRUE((*endpoint)->Put(info.pool_rkey(), written.data(), written.size(), address).ok());
  v1::SealRequest seal;
  seal.set_allocation_id(allocation.allocation_id());
  seal.set_lease_token(allocation.lease_token());
  v1::PageRef* ref = seal.add_pages();
  ref->set_cache_layer(2);
  ref->set_page_index(0);
  ref->set_num_tokens(3);
  ref->set_remote_address(address);
  ref->set_encoded_bytes(static_cast<uint32_t>(page.size()));
  {
    grpc::ClientContext context;
    v1::SealReply reply;
    const grpc::Status sealed = stub->Seal(&context, seal, &reply);
    ASSERT_TRUE(sealed.ok()) << sealed.error_message();
  }
  std::string read(page.size(), '\0');
  ASSERT_TRUE((*endpoint)->Get(info.pool_rkey(), read.data(), read.size(), address).ok());
  EXPECT_EQ(read, written);
  v1::ReleaseRequest release;
  release.set_allocation_id(allocation.allocation_id());
  release.set_lease_token(allocation.lease_token());
  grpc::ClientContext context;
  v1::ReleaseReply released;
  EXPECT_TRUE(stub->Release(&context, release, &released).ok());
  endpoint->reset();
  server->reset();
}

INSTANTIATE_TEST_SUITE_P(Transports, KvStoreUcxTest, ::testing::Values("tcp", "shm,self"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           return std::string(info.param[0] == 't' ? "tcp" : "shm");
                         });

// A KV store restarted at the same address is another instance: a cached connection's pool key and
// endpoint belong to the first, while its gRPC stub reaches the second. Allocate replies (and so
// manifests) name the instance, and KvStoreConnections replaces a connection to an earlier one.
TEST(KvStoreRestartTest, ConnectionsFollowTheInstanceAtTheAddress) {
  auto network = std::make_shared<FakeNetwork>();
  FakeTransport client_transport(network);
  KvStoreConnections stores(client_transport);
  KvStoreOptions options;
  options.pool_bytes = 4 * kSlotBytes;
  options.slot_bytes = kSlotBytes;
  std::string address;
  uint64_t first = 0;
  {
    FakeTransport transport(network);
    absl::StatusOr<std::unique_ptr<KvStoreServer>> server =
        KvStoreServer::Create(options, transport);
    ASSERT_TRUE(server.ok()) << server.status();
    address = (*server)->address();
    absl::StatusOr<std::shared_ptr<KvStoreConnection>> connection = stores.Get(address);
    ASSERT_TRUE(connection.ok()) << connection.status();
    first = (*connection)->info().instance_id();
    EXPECT_NE(first, 0u);
  }
  FakeTransport transport(network);
  options.endpoints.listen_address = address;
  absl::StatusOr<std::unique_ptr<KvStoreServer>> restarted =
      KvStoreServer::Create(options, transport);
  ASSERT_TRUE(restarted.ok()) << restarted.status();

  absl::StatusOr<std::shared_ptr<KvStoreConnection>> stale = stores.Get(address);
  ASSERT_TRUE(stale.ok());
  EXPECT_EQ((*stale)->info().instance_id(), first);  // cached: nothing told it yet
  v1::AllocateRequest request;
  request.set_request_id(1);
  request.add_page_bytes(100);
  v1::AllocateReply reply;
  absl::Status allocated;
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10); absl::Now() < give_up;) {
    allocated = (*stale)->Call("Allocate", &v1::KvStore::Stub::Allocate, request, &reply);
    if (allocated.ok()) break;
    absl::SleepFor(absl::Milliseconds(20));  // the channel reconnecting to the new process
  }
  ASSERT_TRUE(allocated.ok()) << allocated;
  EXPECT_NE(reply.store_instance(), first);

  absl::StatusOr<std::shared_ptr<KvStoreConnection>> fresh =
      stores.Get(address, reply.store_instance());
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ((*fresh)->info().instance_id(), reply.store_instance());
  EXPECT_NE(fresh->get(), stale->get());
  EXPECT_EQ(stores.Get(address)->get(), fresh->get());  // and it is the cached one now

  absl::StatusOr<std::shared_ptr<KvStoreConnection>> gone = stores.Get(address, first);
  ASSERT_FALSE(gone.ok());
  EXPECT_TRUE(absl::IsUnavailable(gone.status())) << gone.status();
  EXPECT_NE(gone.status().message().find("restarted"), std::string::npos) << gone.status();
}

TEST(KvStoreServerTest, ShutdownIsIdempotent) {
  FakeTransport transport(std::make_shared<FakeNetwork>());
  KvStoreOptions options;
  options.pool_bytes = 4 * kSlotBytes;
  options.slot_bytes = kSlotBytes;
  absl::StatusOr<std::unique_ptr<KvStoreServer>> server = KvStoreServer::Create(options, transport);
  ASSERT_TRUE(server.ok()) << server.status();
  (*server)->Shutdown(absl::ZeroDuration());
  (*server)->Shutdown(absl::ZeroDuration());
}

}  // namespace
}  // namespace pdserve
