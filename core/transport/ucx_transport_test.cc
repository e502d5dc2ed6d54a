#include "core/transport/ucx_transport.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

using ::testing::AnyOf;
using ::testing::HasSubstr;

struct Variant {
  const char* name;
  const char* transports;
  bool peer_failure_detection;
  bool expect_shared_memory;  // skip when UCX does not select shared memory here
  bool allocate = false;      // the target region comes from Allocate, not Register
  bool direct = true;         // UcxTransportOptions::direct_shared_memory
};

void Fill(std::vector<uint8_t>& bytes, uint32_t seed) {
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>((i * 131 + seed) >> 3);
}

bool UsesSharedMemory(const Endpoint& endpoint) {
  for (const std::string& t : endpoint.transports_in_use()) {
    if (t.rfind("posix", 0) == 0 || t.rfind("sysv", 0) == 0 || t.rfind("cma", 0) == 0) return true;
  }
  return false;
}

class UcxPairTest : public ::testing::TestWithParam<Variant> {
 protected:
  void SetUp() override {
    UcxTransportOptions options;
    options.transports = GetParam().transports;
    options.peer_failure_detection = GetParam().peer_failure_detection;
    options.direct_shared_memory = GetParam().direct;
    options.timeout = absl::Seconds(5);
    auto a = UcxTransport::Create(options);
    auto b = UcxTransport::Create(options);
    if (!a.ok() || !b.ok()) {
      GTEST_SKIP() << "UCX cannot open '" << options.transports
                   << "' here: " << (a.ok() ? b.status() : a.status());
    }
    a_ = *std::move(a);
    b_ = *std::move(b);
    constexpr size_t kTargetBytes = 8 << 20;
    absl::StatusOr<std::unique_ptr<MemoryRegion>> region;
    if (GetParam().allocate) {
      region = a_->Allocate(kTargetBytes, RemoteAccess::kReadWrite);
    } else {
      storage_.resize(kTargetBytes);
      region = a_->Register(storage_.data(), storage_.size(), RemoteAccess::kReadWrite);
    }
    ASSERT_TRUE(region.ok()) << region.status();
    region_ = *std::move(region);
    target_ = region_->data();
    ASSERT_NE(target_, nullptr);
    ASSERT_EQ(region_->size(), kTargetBytes);
    ASSERT_EQ(region_->address(), reinterpret_cast<uint64_t>(target_));
    if (GetParam().allocate) {
      EXPECT_EQ(reinterpret_cast<uintptr_t>(target_) % 4096, 0u);
      std::memset(target_, 0x5c, kTargetBytes);  // the owner may use every byte
    } else {
      EXPECT_EQ(target_, storage_.data());
    }
    auto endpoint = b_->Connect(a_->address());
    if (!endpoint.ok()) GTEST_SKIP() << "cannot connect: " << endpoint.status();
    endpoint_ = *std::move(endpoint);
    if (GetParam().expect_shared_memory && !UsesSharedMemory(*endpoint_)) {
      GTEST_SKIP() << "UCX chose no shared memory: " << DescribeTransport(*b_, endpoint_.get());
    }
    std::printf("%s\n", DescribeTransport(*b_, endpoint_.get()).c_str());
  }
  void TearDown() override {
    endpoint_.reset();
    region_.reset();
    b_.reset();
    a_.reset();
  }

  std::unique_ptr<UcxTransport> a_, b_;
  std::vector<uint8_t> storage_;  // Register'd memory (not allocate)
  uint8_t* target_ = nullptr;     // region_->data()
  std::unique_ptr<MemoryRegion> region_;
  std::unique_ptr<Endpoint> endpoint_;
};

TEST_P(UcxPairTest, PutThenGetRoundTripsManySizes) {
  for (size_t size : {size_t{1}, size_t{7}, size_t{64}, size_t{4096}, size_t{65536},
                      size_t{1} << 20, size_t{4} << 20}) {
    SCOPED_TRACE(size);
    std::vector<uint8_t> source(size), back(size, 0);
    Fill(source, static_cast<uint32_t>(size));
    const uint64_t remote = region_->address() + 3;  // unaligned on purpose
    ASSERT_TRUE(endpoint_->Put(region_->packed_rkey(), source.data(), size, remote).ok());
    ASSERT_EQ(0, std::memcmp(target_ + 3, source.data(), size));
    ASSERT_TRUE(endpoint_->Get(region_->packed_rkey(), back.data(), size, remote).ok());
    ASSERT_EQ(source, back);
  }
}

// Local buffers at every distance from the (page-aligned) remote bytes modulo 4 KiB that the
// direct shared-memory copy treats specially.
TEST_P(UcxPairTest, UnalignedLocalBuffersRoundTrip) {
  std::vector<uint8_t> storage(3 * 65536 + 8192);
  uint8_t* page = storage.data() + (4096 - reinterpret_cast<uintptr_t>(storage.data()) % 4096);
  for (size_t offset : {size_t{0}, size_t{1}, size_t{16}, size_t{63}, size_t{64}, size_t{4080}}) {
    for (size_t size : {size_t{255}, size_t{4096}, size_t{65536 + 77}}) {
      SCOPED_TRACE(testing::Message() << offset << " " << size);
      std::vector<uint8_t> source(size);
      Fill(source, static_cast<uint32_t>(offset + size));
      uint8_t* local = page + offset;
      std::memcpy(local, source.data(), size);
      ASSERT_TRUE(endpoint_->Put(region_->packed_rkey(), local, size, region_->address()).ok());
      ASSERT_EQ(0, std::memcmp(target_, source.data(), size));
      std::memset(local, 0, size);
      ASSERT_TRUE(endpoint_->Get(region_->packed_rkey(), local, size, region_->address()).ok());
      ASSERT_EQ(0, std::memcmp(local, source.data(), size));
    }
  }
}

TEST_P(UcxPairTest, BatchesLandTogether) {
  for (size_t depth : {size_t{1}, size_t{16}, size_t{256}}) {
    const size_t page = 16384;
    std::vector<uint8_t> source(depth * page), back(depth * page, 0);
    Fill(source, static_cast<uint32_t>(depth));
    std::vector<TransferOp> puts, gets;
    for (size_t i = 0; i < depth; ++i) {
      // Scatter: op i goes to slot (i * 7) % depth of the remote region.
      uint64_t remote = region_->address() + ((i * 7) % depth) * page;
      puts.push_back({source.data() + i * page, page, remote});
      gets.push_back({back.data() + i * page, page, remote});
    }
    ASSERT_TRUE(endpoint_->PutBatch(region_->packed_rkey(), puts).ok());
    ASSERT_TRUE(endpoint_->GetBatch(region_->packed_rkey(), gets).ok());
    ASSERT_EQ(source, back) << depth;
  }
}

TEST_P(UcxPairTest, BadKeysAndRangesAreErrorsNotCrashes) {
  uint8_t byte = 1;
  const uint64_t base = region_->address();
  EXPECT_EQ(endpoint_->Put("garbage", &byte, 1, base).code(), absl::StatusCode::kInvalidArgument);
  std::string truncated = region_->packed_rkey().substr(0, region_->packed_rkey().size() - 3);
  EXPECT_EQ(endpoint_->Put(truncated, &byte, 1, base).code(), absl::StatusCode::kInvalidArgument);
  std::string flipped = region_->packed_rkey();
  flipped.back() ^= 0x40;
  EXPECT_EQ(endpoint_->Get(flipped, &byte, 1, base).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoint_->Put(region_->packed_rkey(), &byte, 1, base + region_->size()).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(endpoint_->Get(region_->packed_rkey(), &byte, 2, base - 1).code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a_->Register(nullptr, 10, RemoteAccess::kRead).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(a_->Allocate(0, RemoteAccess::kRead).status().code(),
            absl::StatusCode::kInvalidArgument);
  // The endpoint still works afterwards.
  EXPECT_TRUE(endpoint_->Put(region_->packed_rkey(), &byte, 1, base).ok());
}

TEST_P(UcxPairTest, PutIntoReadOnlyRegionIsRefused) {
  std::vector<uint8_t> readonly(4096, 0x11);
  auto region = a_->Register(readonly.data(), readonly.size(), RemoteAccess::kRead);
  ASSERT_TRUE(region.ok()) << region.status();
  uint8_t byte = 0x22;
  EXPECT_EQ(endpoint_->Put((*region)->packed_rkey(), &byte, 1, (*region)->address()).code(),
            absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(readonly[0], 0x11);
  ASSERT_TRUE(endpoint_->Get((*region)->packed_rkey(), &byte, 1, (*region)->address()).ok());
  EXPECT_EQ(byte, 0x11);
}

TEST_P(UcxPairTest, AllocatedReadOnlyRegionIsReadableNotWritable) {
  auto region = a_->Allocate(10000, RemoteAccess::kRead);
  ASSERT_TRUE(region.ok()) << region.status();
  ASSERT_EQ((*region)->size(), 10000u);
  std::memset((*region)->data(), 0x33, (*region)->size());
  uint8_t byte = 0x44;
  EXPECT_EQ(endpoint_->Put((*region)->packed_rkey(), &byte, 1, (*region)->address()).code(),
            absl::StatusCode::kPermissionDenied);
  std::vector<uint8_t> back(10000, 0);
  ASSERT_TRUE(
      endpoint_->Get((*region)->packed_rkey(), back.data(), back.size(), (*region)->address())
          .ok());
  EXPECT_EQ(back, std::vector<uint8_t>(10000, 0x33));
  EXPECT_EQ(
      endpoint_->Get((*region)->packed_rkey(), back.data(), 1, (*region)->address() + 10000).code(),
      absl::StatusCode::kInvalidArgument);
}

TEST_P(UcxPairTest, DestroyedPeerIsUnavailableWithinTimeout) {
  uint8_t byte = 5;
  ASSERT_TRUE(endpoint_->Put(region_->packed_rkey(), &byte, 1, region_->address()).ok());
  std::string rkey = region_->packed_rkey();
  uint64_t remote = region_->address();
  region_.reset();
  a_.reset();
  absl::Time start = absl::Now();
  absl::Status status;
  for (int i = 0; i < 3 && status.ok(); ++i) status = endpoint_->Put(rkey, &byte, 1, remote);
  if (status.ok() && !GetParam().peer_failure_detection) {
    GTEST_SKIP() << "without peer failure detection a put into a destroyed in-process peer may "
                    "still land (its memory is alive here)";
  }
  EXPECT_THAT(status.code(),
              AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded))
      << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(5 + 2));
  EXPECT_EQ(endpoint_->Put(rkey, &byte, 1, remote).code(), absl::StatusCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(
    Transports, UcxPairTest,
    ::testing::Values(Variant{"tcp", "tcp", true, false}, Variant{"default", "", true, false},
                      Variant{"shm", "shm,self", false, true},
                      Variant{"posix", "posix", false, true},
                      Variant{"tcp_allocated", "tcp", true, false, true},
                      Variant{"shm_allocated", "shm,self", false, true, true},
                      Variant{"posix_allocated", "posix", false, true, true},
                      Variant{"sysv_allocated", "sysv", false, true, true},
                      Variant{"shm_allocated_no_direct", "shm,self", false, true, true, false}),
    [](const ::testing::TestParamInfo<Variant>& info) { return std::string(info.param.name); });

TEST(UcxTransportTest, RequireSharedMemoryRefusesTcpOnlyEndpoint) {
  UcxTransportOptions options;
  options.transports = "tcp";
  options.require_shared_memory = true;
  auto a = UcxTransport::Create(options);
  auto b = UcxTransport::Create(options);
  ASSERT_TRUE(a.ok() && b.ok());
  auto endpoint = (*b)->Connect((*a)->address());
  ASSERT_EQ(endpoint.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(endpoint.status().message(), HasSubstr("tcp"));
}

TEST(UcxTransportTest, MalformedAddressAndBadTransportList) {
  auto a = UcxTransport::Create({});
  ASSERT_TRUE(a.ok()) << a.status();
  EXPECT_EQ((*a)->Connect("nonsense").status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE((*a)->available_transports().empty());
  UcxTransportOptions bad;
  bad.timeout = absl::ZeroDuration();
  EXPECT_EQ(UcxTransport::Create(bad).status().code(), absl::StatusCode::kInvalidArgument);
}

// Cross-process: the child (this binary re-executed with PDSERVE_UCX_CHILD_FD set) registers
// memory and prints its address and key; the parent reads and writes it, then kills the child.
TEST(UcxChildHelper, Serve) {
  const char* fd_env = std::getenv("PDSERVE_UCX_CHILD_FD");
  if (fd_env == nullptr) GTEST_SKIP() << "only runs as the child of CrossProcess tests";
  UcxTransportOptions options;
  options.transports = "tcp";
  auto transport = UcxTransport::Create(options);
  ASSERT_TRUE(transport.ok()) << transport.status();
  std::vector<uint8_t> memory(1 << 20);
  Fill(memory, 99);
  auto region = (*transport)->Register(memory.data(), memory.size(), RemoteAccess::kReadWrite);
  ASSERT_TRUE(region.ok());
  std::string line = absl::StrCat(absl::BytesToHexString((*transport)->address()), " ",
                                  absl::BytesToHexString((*region)->packed_rkey()), " ",
                                  (*region)->address(), "\n");
  FILE* out = fdopen(std::atoi(fd_env), "w");
  std::fputs(line.c_str(), out);
  std::fflush(out);
  absl::SleepFor(absl::Seconds(60));  // killed by the parent
}

TEST(UcxCrossProcessTest, ReadWriteThenKilledPeerIsUnavailable) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  std::string fd_env = absl::StrCat("PDSERVE_UCX_CHILD_FD=", fds[1]);
  std::vector<char*> argv = {const_cast<char*>("/proc/self/exe"),
                             const_cast<char*>("--gtest_filter=UcxChildHelper.Serve"), nullptr};
  std::vector<char*> envp;
  for (char** e = environ; *e != nullptr; ++e) envp.push_back(*e);
  envp.push_back(fd_env.data());
  envp.push_back(nullptr);
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(fds[0]);
    int devnull = open("/dev/null", O_WRONLY);
    dup2(devnull, 1);
    execve("/proc/self/exe", argv.data(), envp.data());
    _exit(127);
  }
  close(fds[1]);
  FILE* in = fdopen(fds[0], "r");
  char buffer[8192] = {};
  ASSERT_NE(std::fgets(buffer, sizeof(buffer), in), nullptr);
  std::fclose(in);
  std::vector<std::string> parts = absl::StrSplit(std::string(buffer), ' ');
  ASSERT_EQ(parts.size(), 3u);
  std::string address = absl::HexStringToBytes(parts[0]);
  std::string rkey = absl::HexStringToBytes(parts[1]);
  uint64_t base = std::strtoull(parts[2].c_str(), nullptr, 10);

  UcxTransportOptions options;
  options.transports = "tcp";
  options.timeout = absl::Seconds(4);
  auto transport = UcxTransport::Create(options);
  ASSERT_TRUE(transport.ok()) << transport.status();
  auto endpoint = (*transport)->Connect(address);
  ASSERT_TRUE(endpoint.ok()) << endpoint.status();
  std::vector<uint8_t> expected(1 << 20), got(1 << 20);
  Fill(expected, 99);
  ASSERT_TRUE((*endpoint)->Get(rkey, got.data(), got.size(), base).ok());
  EXPECT_EQ(got, expected);
  std::vector<uint8_t> fresh(4096, 0xab), back(4096);
  ASSERT_TRUE((*endpoint)->Put(rkey, fresh.data(), fresh.size(), base + 4096).ok());
  ASSERT_TRUE((*endpoint)->Get(rkey, back.data(), back.size(), base + 4096).ok());
  EXPECT_EQ(back, fresh);

  kill(child, SIGKILL);
  waitpid(child, nullptr, 0);
  absl::Time start = absl::Now();
  absl::Status status;
  for (int i = 0; i < 3 && status.ok(); ++i) {
    status = (*endpoint)->Put(rkey, fresh.data(), fresh.size(), base);
  }
  EXPECT_THAT(status.code(),
              AnyOf(absl::StatusCode::kUnavailable, absl::StatusCode::kDeadlineExceeded))
      << status;
  EXPECT_LT(absl::Now() - start, absl::Seconds(4 + 2));
}

}  // namespace
}  // namespace pdserve
