// The KV store service (DESIGN §2 step 3, proto/pdserve/v1/kvstore.proto): a PagePool of host
// memory allocated by the process's Transport (Transport::Allocate: remotely accessible, and
// shared memory that same-host peers map directly under UCX's posix/sysv transports), so that
// prefill writes pages into it with one-sided puts and decode reads them with gets, controlled over
// gRPC.
//
//   KvStoreService  the gRPC adapter over a PagePool (translates addresses ↔ slots and
//                   absl::Status ↔ grpc::Status; no logic of its own).
//   KvStoreServer   one running store: owns the pool, its memory region, the service, the lease
//                   reaper thread and the gRPC server.
//   RunKvStore      the body of the kvstore binary: serve until SIGINT/SIGTERM, then drain.
//
// The pool's region is kReadWrite for every peer holding the rkey (the transport cannot
// restrict it per slot); ownership of slots is enforced by lease tokens at the control plane.
//
// Thread safety: the service's handlers run on gRPC's threads; PagePool is thread-safe.
// KvStoreServer's methods are for its owner's thread.
#ifndef PDSERVE_SERVICES_KVSTORE_KVSTORE_SERVICE_H_
#define PDSERVE_SERVICES_KVSTORE_KVSTORE_SERVICE_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/base/thread_annotations.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"
#include "core/metrics/metrics_registry.h"
#include "core/transport/transport.h"
#include "pdserve/v1/kvstore.grpc.pb.h"
#include "services/common/endpoint_options.h"
#include "services/common/service_server.h"
#include "services/kvstore/page_pool.h"
#include "services/kvstore/page_tamper.h"

namespace pdserve {

struct KvStoreOptions {
  EndpointOptions endpoints;  // drain: how long to wait for leased pages to be released
  int64_t pool_bytes = int64_t{256} << 20;  // ≥ one slot; rounded down to whole slots
  int64_t slot_bytes = int64_t{128} << 10;  // ≥ 4 KiB, a multiple of 64
  double default_lease_seconds = 10;        // > 0: the lease of a request that asks for 0
  double max_lease_seconds = 60;            // ≥ default: longer requested leases are capped
  // Fault injection for tests (page_tamper.h): every page is damaged once sealed. Never set in
  // production.
  std::optional<PageTamper> tamper_sealed_pages;

  // InvalidArgument naming the option that is out of range.
  absl::Status Validate() const;
  PagePoolOptions ToPagePoolOptions() const;  // requires Validate().ok()
};

class KvStoreService final : public pdserve::v1::KvStore::Service {
 public:
  // `pool`, `region` (the registration of the pool's memory), `transport` and `allocations`
  // (Allocate calls by code; may be null) must outlive it.
  KvStoreService(PagePool& pool, const MemoryRegion& region, const Transport& transport,
                 prometheus::Family<prometheus::Counter>* allocations = nullptr,
                 std::optional<PageTamper> tamper = std::nullopt);

  grpc::Status GetInfo(grpc::ServerContext* context, const pdserve::v1::GetInfoRequest* request,
                       pdserve::v1::KvStoreInfo* reply) override;
  grpc::Status Allocate(grpc::ServerContext* context, const pdserve::v1::AllocateRequest* request,
                        pdserve::v1::AllocateReply* reply) override;
  grpc::Status Seal(grpc::ServerContext* context, const pdserve::v1::SealRequest* request,
                    pdserve::v1::SealReply* reply) override;
  grpc::Status Renew(grpc::ServerContext* context, const pdserve::v1::RenewRequest* request,
                     pdserve::v1::RenewReply* reply) override;
  grpc::Status Release(grpc::ServerContext* context, const pdserve::v1::ReleaseRequest* request,
                       pdserve::v1::ReleaseReply* reply) override;
  grpc::Status CancelRequest(grpc::ServerContext* context,
                             const pdserve::v1::CancelRequestRequest* request,
                             pdserve::v1::CancelRequestReply* reply) override;
  grpc::Status GetPoolUsage(grpc::ServerContext* context,
                            const pdserve::v1::PoolUsageRequest* request,
                            pdserve::v1::PoolUsage* reply) override;

  // From now on Allocate answers UNAVAILABLE; every other call still works, so that the pages
  // already handed out can be read and released.
  void StartDraining() { draining_.store(true); }

 private:
  absl::Status AllocateSlots(const pdserve::v1::AllocateRequest& request,
                             pdserve::v1::AllocateReply& reply);
  PagePool& pool_;
  const MemoryRegion& region_;
  const Transport& transport_;
  prometheus::Family<prometheus::Counter>* allocations_;
  const std::optional<PageTamper> tamper_;
  const uint64_t instance_id_;  // KvStoreInfo.instance_id: random, nonzero, this process's
  std::atomic<bool> draining_{false};
};

class KvStoreServer {
 public:
  // Validates `options`, allocates the pool's memory with `transport` (Allocate, kReadWrite),
  // starts the lease reaper (every min(default lease / 4, 100 ms)) and serves KvStore + health on
  // options.endpoints.listen_address. `transport` must outlive the server. InvalidArgument for bad
  // options; the transport's error when the allocation fails; Unavailable when the address cannot
  // be bound.
  static absl::StatusOr<std::unique_ptr<KvStoreServer>> Create(const KvStoreOptions& options,
                                                               Transport& transport);
  ~KvStoreServer();  // Shutdown(zero grace)
  KvStoreServer(const KvStoreServer&) = delete;
  KvStoreServer& operator=(const KvStoreServer&) = delete;

  const std::string& address() const { return server_->address(); }  // bound "host:port"
  ServiceServer& server() { return *server_; }
  PagePool& pool() { return *pool_; }
  KvStoreService& service() { return *service_; }
  const MemoryRegion& region() const { return *region_; }

  // Reports NOT_SERVING, stops accepting calls (cancelling those still running after `grace`),
  // stops the reaper. Idempotent. The pool's memory is freed when the server is destroyed.
  void Shutdown(absl::Duration grace);

 private:
  KvStoreServer() = default;
  void ReaperLoop(absl::Duration interval);

  std::shared_ptr<MetricsRegistry> metrics_;  // outlives server_ (its HTTP server reads it)
  std::unique_ptr<MemoryRegion> region_;      // owns the pool's memory (Transport::Allocate)
  std::unique_ptr<PagePool> pool_;            // destroyed before region_
  std::unique_ptr<KvStoreService> service_;
  std::unique_ptr<ServiceServer> server_;

  Mutex stop_mu_;
  CondVar stop_cv_;
  bool stop_ ABSL_GUARDED_BY(stop_mu_) = false;
  std::thread reaper_;
};

// Runs a KV store until SIGINT or SIGTERM: Create, AnnounceReady("kvstore"), wait for the
// signal (the caller has called BlockShutdownSignals before starting any thread), then drain:
// NOT_SERVING, wait up to `options.endpoints.drain` for the leased pages to be released (readers
// finish), Shutdown, free the pool. OK after a drain; Create's error otherwise.
absl::Status RunKvStore(const KvStoreOptions& options, Transport& transport);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_KVSTORE_KVSTORE_SERVICE_H_
