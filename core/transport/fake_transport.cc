#include "core/transport/fake_transport.h"

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace fake_transport_internal {

struct Region {
  uint64_t base;
  size_t size;
  RemoteAccess access;
};

struct Node {
  std::string address;
  Mutex mu;
  uint64_t next_rkey ABSL_GUARDED_BY(mu) = 1;
  absl::flat_hash_map<uint64_t, Region> regions ABSL_GUARDED_BY(mu);
};

}  // namespace fake_transport_internal

using fake_transport_internal::Node;
using fake_transport_internal::Region;

namespace {

constexpr char kRkeyPrefix[] = "fake-rkey:";
constexpr size_t kAllocateAlignment = 4096;

struct AlignedFree {
  void operator()(uint8_t* p) const { std::free(p); }
};

class FakeMemoryRegion final : public MemoryRegion {
 public:
  // `owned` is the memory of an Allocate'd region (freed after it is unregistered).
  FakeMemoryRegion(std::shared_ptr<Node> node, uint64_t id, uint64_t base, size_t size,
                   std::unique_ptr<uint8_t, AlignedFree> owned = nullptr)
      : node_(std::move(node)),
        id_(id),
        base_(base),
        size_(size),
        packed_rkey_(absl::StrCat(kRkeyPrefix, node_->address, ":", id)),
        owned_(std::move(owned)) {}
  ~FakeMemoryRegion() override {
    MutexLock lock(&node_->mu);  // no peer copies while the region goes away
    node_->regions.erase(id_);
    owned_.reset();
  }
  uint64_t address() const override { return base_; }
  size_t size() const override { return size_; }
  uint8_t* data() const override { return reinterpret_cast<uint8_t*>(base_); }
  const std::string& packed_rkey() const override { return packed_rkey_; }

 private:
  std::shared_ptr<Node> node_;
  uint64_t id_;
  uint64_t base_;
  size_t size_;
  std::string packed_rkey_;
  std::unique_ptr<uint8_t, AlignedFree> owned_;
};

}  // namespace

struct FakeTransport::Faults {
  Mutex mu;
  int fail_next ABSL_GUARDED_BY(mu) = 0;
  int fail_after ABSL_GUARDED_BY(mu) = 0;  // batches still to pass before fail_next starts
  absl::Status fail_status ABSL_GUARDED_BY(mu);
  int corrupt_gets ABSL_GUARDED_BY(mu) = 0;
  int corrupt_after ABSL_GUARDED_BY(mu) = 0;  // gets still to pass before corrupt_gets starts

  // Whether this batch is one of `n` to damage after `after` pass; counts it.
  static bool Take(int& n, int& after) {
    if (n == 0) return false;
    if (after > 0) {
      --after;
      return false;
    }
    --n;
    return true;
  }
  FakeTransportStats stats ABSL_GUARDED_BY(mu);
};

class FakeEndpoint final : public Endpoint {
 public:
  FakeEndpoint(std::shared_ptr<FakeNetwork> network, std::string peer,
               std::shared_ptr<FakeTransport::Faults> faults)
      : network_(std::move(network)), peer_(std::move(peer)), faults_(std::move(faults)) {}

  absl::Status PutBatch(const std::string& packed_rkey, std::span<const TransferOp> ops) override {
    return Run(/*put=*/true, packed_rkey, ops);
  }
  absl::Status GetBatch(const std::string& packed_rkey, std::span<const TransferOp> ops) override {
    return Run(/*put=*/false, packed_rkey, ops);
  }
  std::vector<std::string> transports_in_use() const override { return {"fake"}; }

 private:
  absl::Status Run(bool put, const std::string& packed_rkey, std::span<const TransferOp> ops) {
    absl::Status status = Copy(put, packed_rkey, ops);
    MutexLock lock(&faults_->mu);
    FakeTransportStats& stats = faults_->stats;
    ++stats.batches;
    if (!status.ok()) {
      ++stats.failed_batches;
      return status;
    }
    for (const TransferOp& op : ops) {
      (put ? stats.put_ops : stats.get_ops) += 1;
      (put ? stats.put_bytes : stats.get_bytes) += op.length;
    }
    if (!put && FakeTransport::Faults::Take(faults_->corrupt_gets, faults_->corrupt_after)) {
      for (const TransferOp& op : ops) {
        if (op.length > 0) static_cast<uint8_t*>(op.local)[op.length / 2] ^= 0x5a;
      }
    }
    return absl::OkStatus();
  }

  absl::Status Copy(bool put, const std::string& packed_rkey, std::span<const TransferOp> ops) {
    const char* what = put ? "fake put" : "fake get";
    {
      MutexLock lock(&faults_->mu);
      if (FakeTransport::Faults::Take(faults_->fail_next, faults_->fail_after)) {
        return faults_->fail_status;
      }
    }
    std::shared_ptr<Node> node = network_->IsDown(peer_) ? nullptr : network_->Find(peer_);
    if (node == nullptr)
      return absl::UnavailableError(absl::StrCat(what, ": peer ", peer_, " down"));
    const std::string expected_prefix = absl::StrCat(kRkeyPrefix, peer_, ":");
    uint64_t id = 0;
    if (packed_rkey.compare(0, expected_prefix.size(), expected_prefix) != 0 ||
        !absl::SimpleAtoi(absl::string_view(packed_rkey).substr(expected_prefix.size()), &id)) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " to ", peer_, ": malformed rkey or rkey of another peer"));
    }
    MutexLock lock(&node->mu);  // keeps the region registered during the copy
    auto it = node->regions.find(id);
    if (it == node->regions.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " to ", peer_, ": rkey ", id, " is not registered"));
    }
    const Region& region = it->second;
    if (put && region.access != RemoteAccess::kReadWrite) {
      return absl::PermissionDeniedError(
          absl::StrCat(what, " to ", peer_, ": region ", id, " is read-only"));
    }
    for (const TransferOp& op : ops) {
      if (op.length == 0) continue;
      if (op.local == nullptr || op.remote_address < region.base || op.length > region.size ||
          op.remote_address - region.base > region.size - op.length) {
        return absl::InvalidArgumentError(
            absl::StrCat(what, " to ", peer_, ": op [", op.remote_address, ", +", op.length,
                         ") outside region [", region.base, ", +", region.size, ")"));
      }
    }
    for (const TransferOp& op : ops) {
      if (op.length == 0) continue;
      void* remote = reinterpret_cast<void*>(op.remote_address);
      if (put) {
        std::memmove(remote, op.local, op.length);
      } else {
        std::memmove(op.local, remote, op.length);
      }
    }
    return absl::OkStatus();
  }

  std::shared_ptr<FakeNetwork> network_;
  std::string peer_;
  std::shared_ptr<FakeTransport::Faults> faults_;
};

std::shared_ptr<FakeNetwork> FakeNetwork::Default() {
  static auto* network = new std::shared_ptr<FakeNetwork>(std::make_shared<FakeNetwork>());
  return *network;
}

void FakeNetwork::SetPeerDown(const std::string& address, bool down) {
  MutexLock lock(&mu_);
  if (down) {
    down_.insert(address);
  } else {
    down_.erase(address);
  }
}

bool FakeNetwork::IsDown(const std::string& address) const {
  MutexLock lock(&mu_);
  return down_.contains(address);
}

std::shared_ptr<Node> FakeNetwork::Find(const std::string& address) const {
  MutexLock lock(&mu_);
  auto it = nodes_.find(address);
  return it == nodes_.end() ? nullptr : it->second.lock();
}

FakeTransport::FakeTransport(std::shared_ptr<FakeNetwork> network)
    : network_(std::move(network)),
      node_(std::make_shared<Node>()),
      faults_(std::make_shared<Faults>()) {
  static std::atomic<uint64_t> next_id{1};  // unique across networks
  node_->address = absl::StrCat("fake://", next_id.fetch_add(1));
  MutexLock lock(&network_->mu_);
  network_->nodes_[node_->address] = node_;
}

FakeTransport::~FakeTransport() {
  MutexLock lock(&network_->mu_);
  network_->nodes_.erase(node_->address);
}

const std::string& FakeTransport::address() const { return node_->address; }

absl::StatusOr<std::unique_ptr<MemoryRegion>> FakeTransport::Register(void* base, size_t size,
                                                                      RemoteAccess access) {
  if (base == nullptr || size == 0) {
    return absl::InvalidArgumentError("fake Register: null or empty range");
  }
  uint64_t id;
  {
    MutexLock lock(&node_->mu);
    id = node_->next_rkey++;
    node_->regions[id] = Region{reinterpret_cast<uint64_t>(base), size, access};
  }
  return std::unique_ptr<MemoryRegion>(
      new FakeMemoryRegion(node_, id, reinterpret_cast<uint64_t>(base), size));
}

absl::StatusOr<std::unique_ptr<MemoryRegion>> FakeTransport::Allocate(size_t size,
                                                                      RemoteAccess access) {
  if (size == 0) return absl::InvalidArgumentError("fake Allocate: size 0");
  const size_t rounded = (size + kAllocateAlignment - 1) / kAllocateAlignment * kAllocateAlignment;
  std::unique_ptr<uint8_t, AlignedFree> memory(
      static_cast<uint8_t*>(std::aligned_alloc(kAllocateAlignment, rounded)));
  if (memory == nullptr) {
    return absl::ResourceExhaustedError(absl::StrCat("fake Allocate of ", size, " bytes failed"));
  }
  std::memset(memory.get(), 0, rounded);
  const uint64_t base = reinterpret_cast<uint64_t>(memory.get());
  uint64_t id;
  {
    MutexLock lock(&node_->mu);
    id = node_->next_rkey++;
    node_->regions[id] = Region{base, size, access};
  }
  return std::unique_ptr<MemoryRegion>(
      new FakeMemoryRegion(node_, id, base, size, std::move(memory)));
}

absl::StatusOr<std::unique_ptr<Endpoint>> FakeTransport::Connect(const std::string& peer_address) {
  if (network_->IsDown(peer_address) || network_->Find(peer_address) == nullptr) {
    return absl::UnavailableError(
        absl::StrCat("fake connect: peer ", peer_address, " is down or unknown"));
  }
  return std::unique_ptr<Endpoint>(new FakeEndpoint(network_, peer_address, faults_));
}

void FakeTransport::FailNext(int n, absl::Status status, int after) {
  MutexLock lock(&faults_->mu);
  faults_->fail_next = n;
  faults_->fail_after = after;
  faults_->fail_status = std::move(status);
}

void FakeTransport::SetPeerDown(const std::string& address, bool down) {
  network_->SetPeerDown(address, down);
}

void FakeTransport::CorruptNextGets(int n, int after) {
  MutexLock lock(&faults_->mu);
  faults_->corrupt_gets = n;
  faults_->corrupt_after = after;
}

FakeTransportStats FakeTransport::stats() const {
  MutexLock lock(&faults_->mu);
  return faults_->stats;
}

}  // namespace pdserve
