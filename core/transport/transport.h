// Transport: one-sided bulk transfers of KV page bytes between processes (DESIGN §2: control is
// gRPC, KV bytes move here). A process owns one Transport (a UCX worker in UcxTransport); it
// registers the memory remote peers may touch, publishes its address and the packed remote key
// of that memory over gRPC, and opens endpoints to peers from their addresses.
//
// Transfers are one-sided: Put writes local bytes into a peer's registered memory, Get reads a
// peer's registered memory into local bytes; the peer's CPU takes no part. A batch of transfers
// issued together completes together (Flush/Wait inside PutBatch/GetBatch): when the call returns
// OK every byte has landed. A failed call names the peer and the operation; the endpoint may be
// unusable afterwards (Unavailable) and callers should reconnect or give up.
//
// Thread safety: every method may be called from any thread; implementations serialize what
// their library requires.
#ifndef PDSERVE_CORE_TRANSPORT_TRANSPORT_H_
#define PDSERVE_CORE_TRANSPORT_TRANSPORT_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve {

// What remote peers may do with a registered region.
enum class RemoteAccess { kRead, kReadWrite };

// Local memory open to remote access, from Transport::Register (caller-owned memory: it is
// deregistered when the region is destroyed and must outlive the region) or Transport::Allocate
// (transport-owned memory: destroying the region frees it).
class MemoryRegion {
 public:
  virtual ~MemoryRegion() = default;
  virtual uint64_t address() const = 0;  // the address peers use for byte 0 of the region
  virtual size_t size() const = 0;
  // This process's pointer to byte 0 of the region: the registered base for Register, the
  // transport's allocation for Allocate. Valid while the region lives.
  virtual uint8_t* data() const = 0;
  // The packed remote key peers need to reach this region (opaque bytes, sent over gRPC).
  virtual const std::string& packed_rkey() const = 0;
};

// One transfer: `length` bytes between local memory and remote_address in the peer's region.
struct TransferOp {
  void* local = nullptr;  // Put reads from it, Get writes into it
  size_t length = 0;
  uint64_t remote_address = 0;
};

// A connection to one peer, able to reach the regions whose keys it was given.
class Endpoint {
 public:
  virtual ~Endpoint() = default;

  // Writes every op's local bytes into the peer's memory under `packed_rkey`; returns when all
  // have landed remotely. InvalidArgument for a malformed key; Unavailable when the peer is gone
  // or a transfer fails.
  virtual absl::Status PutBatch(const std::string& packed_rkey,
                                std::span<const TransferOp> ops) = 0;
  // Reads every op's remote bytes into its local buffer; returns when all have arrived.
  virtual absl::Status GetBatch(const std::string& packed_rkey,
                                std::span<const TransferOp> ops) = 0;

  absl::Status Put(const std::string& packed_rkey, const void* local, size_t length,
                   uint64_t remote_address) {
    TransferOp op{const_cast<void*>(local), length, remote_address};
    return PutBatch(packed_rkey, std::span<const TransferOp>(&op, 1));
  }
  absl::Status Get(const std::string& packed_rkey, void* local, size_t length,
                   uint64_t remote_address) {
    TransferOp op{local, length, remote_address};
    return GetBatch(packed_rkey, std::span<const TransferOp>(&op, 1));
  }

  // The transports this endpoint's lanes use, e.g. {"posix/memory", "tcp/lo"} (for reports).
  virtual std::vector<std::string> transports_in_use() const = 0;
};

class Transport {
 public:
  virtual ~Transport() = default;

  // Opaque bytes a peer passes to Connect to reach this transport.
  virtual const std::string& address() const = 0;
  // Registers [base, base + size) for remote access. InvalidArgument for a null or empty range.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> Register(void* base, size_t size,
                                                                 RemoteAccess access) = 0;
  // Allocates `size` bytes of memory open to remote access, owned by the returned region (freed
  // when it is destroyed); contents unspecified, at least 64-byte aligned (UcxTransport and
  // FakeTransport: page aligned). Transports may back it with memory
  // peers reach faster than Register'd memory (UcxTransport: UCX allocates it, e.g. in SysV/POSIX
  // shared memory that same-host peers map directly, so puts and gets are memcpy instead of
  // active messages). InvalidArgument for size 0; ResourceExhausted when it cannot be had.
  virtual absl::StatusOr<std::unique_ptr<MemoryRegion>> Allocate(size_t size,
                                                                 RemoteAccess access) = 0;
  // Opens an endpoint to the peer with `peer_address`. Unavailable when it cannot be reached.
  virtual absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const std::string& peer_address) = 0;
  // The transports this process's worker can use (e.g. "posix,sysv,cma,tcp"), for reports.
  virtual std::string available_transports() const = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_TRANSPORT_TRANSPORT_H_
