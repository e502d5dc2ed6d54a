// UcxTransport: the Transport (transport.h) over UCX's UCP layer, for KV page bytes between
// processes. One UcxTransport owns one ucp context and one ucp worker (UCP_FEATURE_RMA, thread
// mode MULTI) plus a background progress thread: UCX's tcp transport (and shared-memory
// transports without a zero-copy RMA lane) emulate one-sided RMA with active messages, so the
// TARGET's worker must keep progressing even when its own threads are idle. The thread sleeps on
// the worker's event fd (ucp_worker_get_efd/ucp_worker_arm) with a short poll timeout when idle,
// spins while traffic flows (progress_spin), and stops in the destructor.
//
// Address format: Transport::address() is "PDUCX1" + host name + '\0' + the ucp worker address,
// so Connect knows whether the peer shares this host (for require_shared_memory).
//
// Transport choice: `transports` is a UCX_TLS-like list ("shm,tcp", "tcp", "" for UCX's default)
// applied to this context only (ucp_config_modify "TLS"). After Connect, the endpoint's lanes are
// read back (ucp_ep_print_info) and the transports that carry RMA are checked: a same-host
// endpoint whose RMA goes over tcp only is a silent fallback from shared memory; with
// require_shared_memory it is refused (FailedPrecondition naming the transports in use),
// otherwise logged loudly at warn level. Report with DescribeTransport.
//
// Memory: Register maps caller memory (ucp_mem_map without ALLOCATE). UCX 1.13's posix/sysv
// memory domains cannot register foreign memory, so RMA into it from a same-host peer is emulated
// with active messages that the target's progress thread must serve (slow: 1-17% of
// ucx_perftest). Allocate (ucp_mem_map with UCP_MEM_MAP_ALLOCATE) lets UCX allocate by
// UCX_ALLOC_PRIO (default md:sysv,md:posix,...): with sysv or posix in `transports` the memory
// is a shared-memory segment whose rkey a same-host peer can map. An endpoint whose context also
// opened sysv/posix then maps it (ucp_rkey_ptr, once per key) and PutBatch/GetBatch are plain
// memcpy into/out of the mapping (direct_shared_memory), without UCX requests, flushes or the
// target's CPU; this works with peer_failure_detection too (the endpoint's lanes may be tcp).
// Use Allocate for memory peers hit hard (the KV store pool).
//
// Access rights: Register and Allocate pass UCP_MEM_MAP_PROT_REMOTE_READ (| REMOTE_WRITE for
// kReadWrite) to ucp_mem_map, but UCX 1.13's tcp, posix/sysv and cma transports do NOT enforce
// remote protection: a peer holding the rkey of a kRead region can still Put into it (see
// ucx_transport_test.cc, RemoteAccessIsNotEnforced). Treat the rkey itself as the capability and
// only hand out keys of regions the peer may write. FakeTransport does enforce kRead.
//
// Failure: with peer_failure_detection (the default) endpoints use UCP_ERR_HANDLING_MODE_PEER,
// which in UCX 1.13 excludes the posix/sysv shared-memory transports (see the option); a peer
// failure (error handler) or a batch that has not completed within `timeout` closes the endpoint by
// force and returns Unavailable (peer error) or DeadlineExceeded (timeout); every later call on
// that endpoint returns Unavailable. Calls never hang past the timeout and never crash on a dead
// peer.
//
// Thread safety: all methods may be called from any thread. Endpoints serialize their own calls
// (one batch at a time per endpoint); the worker itself is in UCS_THREAD_MODE_MULTI. A
// UcxTransport must outlive its regions and endpoints.
#ifndef PDSERVE_CORE_TRANSPORT_UCX_TRANSPORT_H_
#define PDSERVE_CORE_TRANSPORT_UCX_TRANSPORT_H_

#include <ucp/api/ucp.h>

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/transport/transport.h"
#include "core/transport/ucx_info.h"

namespace pdserve {

struct UcxTransportOptions {
  // UCX_TLS-like list for this context, e.g. "shm,tcp", "tcp", "posix,cma"; "" = UCX default.
  std::string transports;
  // Refuse (FailedPrecondition) a same-host endpoint whose RMA lanes would use tcp only.
  bool require_shared_memory = false;
  // Endpoints use UCP_ERR_HANDLING_MODE_PEER, so a dead peer fails calls with Unavailable. UCX
  // 1.13's posix/sysv shared-memory transports lack peer-failure handling and are then NOT
  // selected (same-host RMA goes over tcp). false allows shared memory; a dead peer is then only
  // noticed through `timeout` (DeadlineExceeded).
  bool peer_failure_detection = true;
  // When a peer's region can be mapped into this process (ucp_rkey_ptr succeeds: the region came
  // from the peer's Allocate in sysv/posix shared memory and this context opened sysv/posix),
  // PutBatch/GetBatch memcpy directly into/out of the mapping instead of issuing ucp_put/get
  // (UCX 1.13 itself copies gets only up to ~30 KiB and emulates larger ones with active
  // messages; with peer_failure_detection its lanes are tcp). A direct transfer completes in
  // place and cannot notice a dead peer (the segment stays mapped here until the key is dropped).
  bool direct_shared_memory = true;
  // Upper bound on one PutBatch/GetBatch (and on Connect's wireup).
  absl::Duration timeout = absl::Seconds(10);
  // Progress thread poll timeout when idle (bounds the stop latency of the destructor too).
  absl::Duration progress_poll = absl::Milliseconds(5);
  // The progress thread keeps polling the worker this long after the last event before it
  // sleeps on the event fd (one core busy while transfers target this process).
  absl::Duration progress_spin = absl::Milliseconds(1);
};

class UcxTransport final : public Transport {
 public:
  static absl::StatusOr<std::unique_ptr<UcxTransport>> Create(const UcxTransportOptions& options);
  ~UcxTransport() override;
  UcxTransport(const UcxTransport&) = delete;
  UcxTransport& operator=(const UcxTransport&) = delete;

  const std::string& address() const override { return address_; }
  absl::StatusOr<std::unique_ptr<MemoryRegion>> Register(void* base, size_t size,
                                                         RemoteAccess access) override;
  // ucp_mem_map with UCP_MEM_MAP_ALLOCATE (host memory): UCX allocates by UCX_ALLOC_PRIO, SysV or
  // POSIX shared memory first when this context opened those transports (see the file comment).
  absl::StatusOr<std::unique_ptr<MemoryRegion>> Allocate(size_t size, RemoteAccess access) override;
  absl::StatusOr<std::unique_ptr<Endpoint>> Connect(const std::string& peer_address) override;
  // Transport names the context opened, deduplicated in UCX's order, e.g. "self,tcp,sysv,posix".
  std::string available_transports() const override { return available_transports_; }
  // Resources with devices, e.g. "self/memory,tcp/lo,tcp/eth0,posix/memory".
  const std::string& available_resources() const { return available_resources_; }

  const UcxTransportOptions& options() const { return options_; }
  ucp_context_h context() const { return context_; }
  ucp_worker_h worker() const { return worker_; }
  const std::string& host() const { return host_; }
  // Threads now progressing this worker inside a call (internal; the progress thread yields).
  std::atomic<int>& waiters() { return waiters_; }

 private:
  explicit UcxTransport(const UcxTransportOptions& options) : options_(options) {}
  absl::Status Init();
  void ProgressLoop();

  UcxTransportOptions options_;
  ucp_context_h context_ = nullptr;
  ucp_worker_h worker_ = nullptr;
  int event_fd_ = -1;
  std::string address_;
  std::string host_;
  std::string available_transports_;
  std::string available_resources_;
  std::atomic<bool> stop_{false};
  std::atomic<int> waiters_{0};
  std::thread progress_thread_;
};

// One line for a startup log: what was requested, what the context can use and, with an
// endpoint, what it uses, e.g. "ucx requested='shm,tcp' available='self,tcp,posix' ep=[...]".
std::string DescribeTransport(const Transport& transport, const Endpoint* endpoint = nullptr);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TRANSPORT_UCX_TRANSPORT_H_
