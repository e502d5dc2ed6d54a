// FakeTransport: an in-process Transport for unit tests of services (no UCX). FakeTransports
// that share a FakeNetwork (by default the process-wide one) reach each other by address();
// Put/Get are memcpy between the caller's buffer and the peer's registered memory, checked
// against the region's bounds (InvalidArgument) and access (PermissionDenied for a Put into a
// kRead region) — checks UcxTransport cannot make on the target side.
//
// Fault injection (initiator side unless noted): FailNext(n, status, after) lets `after` batches
// issued through this transport's endpoints pass and fails the n after them;
// FakeNetwork::SetPeerDown(address) makes every later Connect and batch towards that peer
// Unavailable (a crashed process, for everyone); CorruptNextGets(n, after) lets `after` GetBatch
// calls pass and flips one byte of every op of the n after them, after the copy. `after` lets a
// test reach a later step of a protocol (the first batch succeeds, the second fails).
// stats() counts ops, batches and bytes.
//
// Ownership: regions and endpoints keep the state they need alive, so destroying a transport
// first makes its peers' calls Unavailable instead of crashing. Thread-safe throughout.
#ifndef PDSERVE_CORE_TRANSPORT_FAKE_TRANSPORT_H_
#define PDSERVE_CORE_TRANSPORT_FAKE_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "core/base/mutex.h"
#include "core/transport/transport.h"

namespace pdserve {

namespace fake_transport_internal {
struct Node;  // one transport's regions, shared with its regions and peers' endpoints
}  // namespace fake_transport_internal

// The set of FakeTransports that can reach each other.
class FakeNetwork {
 public:
  static std::shared_ptr<FakeNetwork> Default();  // process-wide

  // Every later Connect and batch towards `address` fails with Unavailable (until set back).
  void SetPeerDown(const std::string& address, bool down = true);
  bool IsDown(const std::string& address) const;

 private:
  friend class FakeTransport;
  friend class FakeEndpoint;
  std::shared_ptr<fake_transport_internal::Node> Find(const std::string& address) const;

  mutable Mutex mu_;
  absl::flat_hash_map<std::string, std::weak_ptr<fake_transport_internal::Node>> nodes_
      ABSL_GUARDED_BY(mu_);
  absl::flat_hash_set<std::string> down_ ABSL_GUARDED_BY(mu_);
};

struct FakeTransportStats {
  uint64_t put_ops = 0;
  uint64_t get_ops = 0;
  uint64_t batches = 0;
  uint64_t put_bytes = 0;
  uint64_t get_bytes = 0;
  uint64_t failed_batches = 0;
};

class FakeTransport final : public Transport {
 public:
  explicit FakeTransport(std::shared_ptr<FakeNetwork> network = FakeNetwork::Default());
  ~FakeTransport() override;

  const std::string& address() const override;
  absl::StatusOr<std::unique_ptr<MemoryRegion>> Register(void* base, size_t size,
                                                         RemoteAccess access) override;
  // Page-aligned, zero-filled heap memory owned by the region.
  absl::StatusOr<std::unique_ptr<MemoryRegion>> Allocate(size_t size, RemoteAccess access) override;
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const std::string& peer_address) override;
  std::string available_transports() const override { return "fake"; }

  // Fails `n` batches issued through this transport's endpoints with `status`, after letting the
  // next `after` pass. Replaces any failure still pending.
  void FailNext(int n, absl::Status status, int after = 0);
  // Marks `address` down on this transport's network (see FakeNetwork::SetPeerDown).
  void SetPeerDown(const std::string& address, bool down = true);
  // Flips one byte of each op's local buffer in `n` GetBatch calls, after letting the next
  // `after` pass. Replaces any corruption still pending.
  void CorruptNextGets(int n, int after = 0);
  FakeTransportStats stats() const;

 private:
  friend class FakeEndpoint;
  struct Faults;
  std::shared_ptr<FakeNetwork> network_;
  std::shared_ptr<fake_transport_internal::Node> node_;
  std::shared_ptr<Faults> faults_;  // shared with this transport's endpoints
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_TRANSPORT_FAKE_TRANSPORT_H_
