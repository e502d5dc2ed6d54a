#include "services/kvstore/kvstore_service.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <utility>
#include <vector>

#include "absl/random/random.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/rpc/tls.h"
#include "services/common/grpc_status.h"
#include "services/common/shutdown_signal.h"
#include "services/kvstore/kvstore_metrics.h"

namespace pdserve {
namespace {

// The page pool's users: the workers that write and read KV pages.
constexpr std::initializer_list<ComponentRole> kStoreUsers = {ComponentRole::kPrefill,
                                                              ComponentRole::kDecode};

namespace v1 = ::pdserve::v1;

spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> logger = GetLogger("kvstore");
  return *logger;
}

// A lease as the wire gives it: seconds, 0 = the default. Negative leases are left to the pool.
absl::StatusOr<absl::Duration> LeaseFromWire(double seconds) {
  if (!std::isfinite(seconds)) {
    return absl::InvalidArgumentError(absl::StrCat("lease_seconds must be finite, got ", seconds));
  }
  return absl::Seconds(seconds);
}

}  // namespace

absl::Status KvStoreOptions::Validate() const {
  if (endpoints.listen_address.empty())
    return absl::InvalidArgumentError("kvstore listen address is empty");
  if (slot_bytes < 4096 || slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore slot_bytes must be >= 4096 and a multiple of 64, got ", slot_bytes));
  }
  if (pool_bytes < slot_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("kvstore pool_bytes (", pool_bytes,
                                                   ") must hold at least one slot of ", slot_bytes,
                                                   " bytes"));
  }
  if (!(default_lease_seconds > 0) || !std::isfinite(default_lease_seconds)) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore default lease must be > 0 seconds, got ", default_lease_seconds));
  }
  if (!(max_lease_seconds >= default_lease_seconds) || !std::isfinite(max_lease_seconds)) {
    return absl::InvalidArgumentError(absl::StrCat("kvstore max lease (", max_lease_seconds,
                                                   " s) must be finite and >= the default lease (",
                                                   default_lease_seconds, " s)"));
  }
  return ToPagePoolOptions().Validate();
}

PagePoolOptions KvStoreOptions::ToPagePoolOptions() const {
  PagePoolOptions options;
  options.slot_bytes = slot_bytes;
  options.num_slots = slot_bytes > 0 ? pool_bytes / slot_bytes : 0;
  options.default_lease = absl::Seconds(default_lease_seconds);
  options.max_lease = absl::Seconds(max_lease_seconds);
  return options;
}

KvStoreService::KvStoreService(PagePool& pool, const MemoryRegion& region,
                               const Transport& transport,
                               prometheus::Family<prometheus::Counter>* allocations,
                               std::optional<PageTamper> tamper)
    : pool_(pool),
      region_(region),
      transport_(transport),
      allocations_(allocations),
      tamper_(tamper),
      instance_id_(absl::Uniform<uint64_t>(absl::BitGen(), 1, UINT64_MAX)) {}

grpc::Status KvStoreService::GetInfo(grpc::ServerContext* context, const v1::GetInfoRequest*,
                                     v1::KvStoreInfo* reply) {
  if (grpc::Status s = RequirePeerRole(*context, kStoreUsers); !s.ok()) return s;
  reply->set_worker_address(transport_.address());
  reply->set_pool_rkey(region_.packed_rkey());
  reply->set_pool_address(region_.address());
  reply->set_slot_bytes(static_cast<uint32_t>(pool_.slot_bytes()));
  reply->set_total_slots(static_cast<int32_t>(pool_.num_slots()));
  reply->set_transports(transport_.available_transports());
  reply->set_default_lease_seconds(absl::ToDoubleSeconds(pool_.options().default_lease));
  reply->set_instance_id(instance_id_);
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Allocate(grpc::ServerContext* context,
                                      const v1::AllocateRequest* request,
                                      v1::AllocateReply* reply) {
  if (grpc::Status s = RequirePeerRole(*context, kStoreUsers); !s.ok()) return s;
  const absl::Status status = AllocateSlots(*request, *reply);
  if (allocations_ != nullptr) {
    allocations_->Add({{"code", absl::StatusCodeToString(status.code())}}).Increment();
  }
  return ToGrpcStatus(status);
}

absl::Status KvStoreService::AllocateSlots(const v1::AllocateRequest& request,
                                           v1::AllocateReply& reply) {
  if (draining_.load()) return absl::UnavailableError("kvstore is draining: it takes no new pages");
  PDSERVE_ASSIGN_OR_RETURN(const absl::Duration lease, LeaseFromWire(request.lease_seconds()));
  const std::vector<uint32_t> page_bytes(request.page_bytes().begin(), request.page_bytes().end());
  std::vector<PrefixPageHash> names(static_cast<size_t>(request.prefix_hashes_size()));
  for (int i = 0; i < request.prefix_hashes_size(); ++i) {
    const std::string& name = request.prefix_hashes(i);
    if (name.size() != names[i].size()) {
      return absl::InvalidArgumentError(absl::StrCat("request ", request.request_id(),
                                                     ": prefix page name ", i, " has ", name.size(),
                                                     " bytes, not ", names[i].size()));
    }
    std::memcpy(names[i].data(), name.data(), name.size());
  }
  PDSERVE_ASSIGN_OR_RETURN(PageAllocation allocation,
                           pool_.Allocate(request.request_id(), page_bytes, lease,
                                          PrefixPages{names, request.cache_layers()}));
  reply.set_allocation_id(allocation.allocation_id);
  reply.set_lease_token(allocation.lease_token);
  for (int64_t slot : allocation.slots) {
    reply.add_slot_addresses(region_.address() + static_cast<uint64_t>(slot * pool_.slot_bytes()));
  }
  reply.set_lease_seconds(absl::ToDoubleSeconds(allocation.lease));
  reply.set_reused_pages(allocation.reused_pages);
  for (uint64_t writer : allocation.written_by) reply.add_written_by(writer);
  for (uint64_t epoch : allocation.written_epoch) reply.add_written_epoch(epoch);
  reply.set_store_instance(instance_id_);
  return absl::OkStatus();
}

grpc::Status KvStoreService::Seal(grpc::ServerContext* context, const v1::SealRequest* request,
                                  v1::SealReply*) {
  if (grpc::Status s = RequirePeerRole(*context, kStoreUsers); !s.ok()) return s;
  const uint64_t base = region_.address();
  const uint64_t size = static_cast<uint64_t>(pool_.pool_bytes());
  std::vector<SealedPageRef> pages;
  pages.reserve(static_cast<size_t>(request->pages_size()));
  for (int i = 0; i < request->pages_size(); ++i) {
    const v1::PageRef& ref = request->pages(i);
    if (ref.remote_address() < base || ref.remote_address() - base >= size) {
      return ToGrpcStatus(absl::InvalidArgumentError(
          absl::StrCat("allocation ", request->allocation_id(), ": page ", i, " (layer ",
                       ref.cache_layer(), ", index ", ref.page_index(), ") at address ",
                       ref.remote_address(), " is outside the page pool")));
    }
    pages.push_back(SealedPageRef{static_cast<int64_t>(ref.remote_address() - base),
                                  ref.encoded_bytes(), ref.cache_layer(), ref.page_index(),
                                  ref.num_tokens()});
  }
  const absl::Status sealed = pool_.Seal(request->allocation_id(), request->lease_token(), pages);
  if (sealed.ok() && tamper_.has_value()) {
    for (const SealedPageRef& page : pages) {
      const absl::Status tampered =
          TamperPage({pool_.base() + page.slot_offset, page.encoded_bytes}, *tamper_);
      if (!tampered.ok()) Log().error("{}", std::string(tampered.message()));
    }
  }
  return ToGrpcStatus(sealed);
}

grpc::Status KvStoreService::Renew(grpc::ServerContext* context, const v1::RenewRequest* request,
                                   v1::RenewReply* reply) {
  if (grpc::Status s = RequirePeerRole(*context, kStoreUsers); !s.ok()) return s;
  absl::StatusOr<absl::Duration> lease = LeaseFromWire(request->lease_seconds());
  if (!lease.ok()) return ToGrpcStatus(lease.status());
  absl::StatusOr<absl::Duration> granted =
      pool_.Renew(request->allocation_id(), request->lease_token(), *lease);
  if (!granted.ok()) return ToGrpcStatus(granted.status());
  reply->set_lease_seconds(absl::ToDoubleSeconds(*granted));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::Release(grpc::ServerContext* context,
                                     const v1::ReleaseRequest* request, v1::ReleaseReply*) {
  if (grpc::Status s = RequirePeerRole(*context, kStoreUsers); !s.ok()) return s;
  return ToGrpcStatus(pool_.Release(request->allocation_id(), request->lease_token()));
}

grpc::Status KvStoreService::CancelRequest(grpc::ServerContext* context,
                                           const v1::CancelRequestRequest* request,
                                           v1::CancelRequestReply* reply) {
  if (grpc::Status s = RequirePeerRole(
          *context, {ComponentRole::kRouter, ComponentRole::kPrefill, ComponentRole::kDecode});
      !s.ok()) {
    return s;
  }
  reply->set_released_allocations(pool_.CancelRequest(request->request_id()));
  return grpc::Status::OK;
}

grpc::Status KvStoreService::GetPoolUsage(grpc::ServerContext* context, const v1::PoolUsageRequest*,
                                          v1::PoolUsage* reply) {
  if (grpc::Status s = RequirePeerRole(
          *context, {ComponentRole::kPrefill, ComponentRole::kDecode, ComponentRole::kOperator});
      !s.ok()) {
    return s;
  }
  const PagePoolUsage usage = pool_.Usage();
  reply->set_total_slots(static_cast<int32_t>(usage.total_slots));
  reply->set_free_slots(static_cast<int32_t>(usage.free_slots));
  reply->set_allocated_slots(static_cast<int32_t>(usage.allocated_slots));
  reply->set_sealed_slots(static_cast<int32_t>(usage.sealed_slots));
  reply->set_allocations(static_cast<int32_t>(usage.allocations));
  reply->set_lease_expiries_total(usage.lease_expiries_total);
  reply->set_releases_total(usage.releases_total);
  reply->set_cached_slots(static_cast<int32_t>(usage.cached_slots));
  reply->set_cached_pages(static_cast<int32_t>(usage.cached_pages));
  reply->set_prefix_hit_pages_total(usage.prefix_hit_pages);
  reply->set_prefix_miss_pages_total(usage.prefix_miss_pages);
  reply->set_prefix_evictions_total(usage.prefix_evictions);
  return grpc::Status::OK;
}

absl::StatusOr<std::unique_ptr<KvStoreServer>> KvStoreServer::Create(const KvStoreOptions& options,
                                                                     Transport& transport) {
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  if (options.pool_bytes / options.slot_bytes > INT32_MAX) {
    return absl::InvalidArgumentError(
        absl::StrCat("kvstore pool of ", options.pool_bytes / options.slot_bytes,
                     " slots is more than the protocol's int32 slot counts can report"));
  }
  std::unique_ptr<KvStoreServer> server(new KvStoreServer());
  server->metrics_ = std::make_shared<MetricsRegistry>();
  const PagePoolOptions pool_options = options.ToPagePoolOptions();
  // The transport allocates the pool's memory: UCX then backs it with shared memory that
  // same-host peers map directly (one-sided put/get become memcpy), which caller-owned memory
  // registered with Register cannot be.
  absl::StatusOr<std::unique_ptr<MemoryRegion>> region =
      transport.Allocate(static_cast<size_t>(pool_options.slot_bytes * pool_options.num_slots),
                         RemoteAccess::kReadWrite);
  if (!region.ok()) {
    return absl::Status(region.status().code(), absl::StrCat("kvstore: allocating the page pool: ",
                                                             region.status().message()));
  }
  server->region_ = *std::move(region);
  PDSERVE_ASSIGN_OR_RETURN(server->pool_, PagePool::Create(pool_options, server->region_->data()));
  PagePool& pool = *server->pool_;
  prometheus::Family<prometheus::Counter>& allocations = AddKvStoreMetrics(*server->metrics_, pool);
  server->service_ = std::make_unique<KvStoreService>(pool, *server->region_, transport,
                                                      &allocations, options.tamper_sealed_pages);
  if (options.tamper_sealed_pages.has_value()) {
    Log().warn("fault injection: every sealed KV page is damaged (--fault-tamper-sealed-pages)");
  }

  const absl::Duration interval =
      std::clamp(pool.options().default_lease / 4, absl::Milliseconds(1), absl::Milliseconds(100));
  server->reaper_ = std::thread([raw = server.get(), interval] { raw->ReaperLoop(interval); });

  HttpEndpoint http;
  http.role = "kvstore";
  http.metrics = server->metrics_.get();
  http.options.listen_address = options.endpoints.http_listen_address;
  http.options.metrics_keys = options.endpoints.metrics_keys;
  PDSERVE_ASSIGN_OR_RETURN(server->server_, ServiceServer::Start(options.endpoints.listen_address,
                                                                 {server->service_.get()}, http));
  Log().info(
      "kvstore on {}: {} slots x {} bytes = {:.1f} MiB at 0x{:x}, lease {} s (max {} s), "
      "transports '{}'",
      server->address(), pool.num_slots(), pool.slot_bytes(),
      static_cast<double>(pool.pool_bytes()) / (1 << 20), server->region_->address(),
      options.default_lease_seconds, options.max_lease_seconds, transport.available_transports());
  return server;
}

KvStoreServer::~KvStoreServer() { Shutdown(absl::ZeroDuration()); }

void KvStoreServer::ReaperLoop(absl::Duration interval) {
  MutexLock lock(&stop_mu_);
  while (!stop_) {
    stop_cv_.WaitWithTimeout(&stop_mu_, interval);
    if (stop_) break;
    const int expired = pool_->ExpireLeases(pool_->options().clock());
    if (expired > 0) Log().debug("reaper: {} leases expired", expired);
  }
}

void KvStoreServer::Shutdown(absl::Duration grace) {
  if (server_ != nullptr) {
    server_->SetServing(false);
    server_->Shutdown(grace);
  }
  {
    MutexLock lock(&stop_mu_);
    stop_ = true;
    stop_cv_.SignalAll();
  }
  if (reaper_.joinable()) reaper_.join();
}

absl::Status RunKvStore(const KvStoreOptions& options, Transport& transport) {
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<KvStoreServer> server,
                           KvStoreServer::Create(options, transport));
  server->server().AnnounceReady("kvstore");
  const int signal_number = WaitForShutdownSignal();
  const PagePoolUsage usage = server->pool().Usage();
  Log().info("kvstore: signal {}, draining ({} allocations, {} slots in use; up to {})",
             signal_number, usage.allocations, usage.total_slots - usage.free_slots,
             absl::FormatDuration(options.endpoints.drain));
  server->server().SetServing(false);
  server->service().StartDraining();
  // Readers (decode workers) keep pulling pages until their requests end; the pool cannot be
  // freed under them. Pages are released by RPCs, so poll the pool until it is empty.
  const absl::Time deadline = absl::Now() + options.endpoints.drain;
  while (server->pool().Usage().allocations > 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));
  }
  const int64_t left = server->pool().Usage().allocations;
  if (left > 0) Log().warn("kvstore: {} allocations still leased after the drain budget", left);
  server->Shutdown(absl::Seconds(2));
  server.reset();  // deregisters and frees the pool
  return absl::OkStatus();
}

}  // namespace pdserve
