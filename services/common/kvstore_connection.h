// KvStoreConnection: what a worker needs to move pages to or from one KV store — its gRPC stub,
// its GetInfo (pool key, slot size), and a transport endpoint to its UCX worker. KvStoreConnections
// caches one per KV store address and opens it on first use; a connection whose transfers failed
// is dropped (Forget) so that the next request reconnects. The gRPC stub reaches whatever process
// serves the address, but the pool key and the endpoint belong to one store instance
// (info().instance_id()): callers compare it with the instance a reply or manifest names.
#ifndef PDSERVE_SERVICES_COMMON_KVSTORE_CONNECTION_H_
#define PDSERVE_SERVICES_COMMON_KVSTORE_CONNECTION_H_

#include <map>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/mutex.h"
#include "core/transport/transport.h"
#include "pdserve/v1/kvstore.grpc.pb.h"
#include "services/common/grpc_status.h"

namespace pdserve {

class KvStoreConnection {
 public:
  KvStoreConnection(std::string address, std::unique_ptr<v1::KvStore::Stub> stub,
                    v1::KvStoreInfo info, std::shared_ptr<Endpoint> endpoint)
      : address_(std::move(address)),
        stub_(std::move(stub)),
        info_(std::move(info)),
        endpoint_(std::move(endpoint)) {}

  const std::string& address() const { return address_; }
  v1::KvStore::Stub& stub() { return *stub_; }
  const v1::KvStoreInfo& info() const { return info_; }
  const std::shared_ptr<Endpoint>& endpoint() const { return endpoint_; }

  // One KvStore call (e.g. Call("Seal", &v1::KvStore::Stub::Seal, request, &reply)) under the
  // deadline every store call gets; an error keeps its code and names the store and the call.
  template <typename Request, typename Reply>
  absl::Status Call(const char* name,
                    grpc::Status (v1::KvStore::Stub::*method)(grpc::ClientContext*, const Request&,
                                                              Reply*),
                    const Request& request, Reply* reply) {
    grpc::ClientContext context;
    context.set_deadline(absl::ToChronoTime(absl::Now() + kCallTimeout));
    const absl::Status status = FromGrpcStatus(((*stub_).*method)(&context, request, reply));
    if (status.ok()) return status;
    return absl::Status(status.code(),
                        absl::StrCat("KV store ", address_, " ", name, ": ", status.message()));
  }

  // The lease operations on one allocation: Renew asks for `lease_seconds` (0 = the store's
  // default) and returns the lease the store granted.
  absl::StatusOr<double> Renew(uint64_t allocation_id, uint64_t lease_token,
                               double lease_seconds = 0);
  absl::Status Release(uint64_t allocation_id, uint64_t lease_token);

 private:
  static constexpr absl::Duration kCallTimeout = absl::Seconds(5);

  std::string address_;
  std::unique_ptr<v1::KvStore::Stub> stub_;
  v1::KvStoreInfo info_;
  std::shared_ptr<Endpoint> endpoint_;
};

class KvStoreConnections {
 public:
  explicit KvStoreConnections(Transport& transport) : transport_(transport) {}

  // The connection to the KV store at `grpc_address`, opened when needed: Unavailable naming the
  // address when its GetInfo or the transport connect fails. With `instance` (nonzero, e.g. a
  // manifest's kvstore_instance) a cached connection to another instance — the store restarted
  // at that address since — is replaced, and Unavailable when the store there is not `instance`
  // (the pages it held are gone).
  absl::StatusOr<std::shared_ptr<KvStoreConnection>> Get(const std::string& grpc_address,
                                                         uint64_t instance = 0);
  // Drops the cached connection (after a failed transfer).
  void Forget(const std::string& grpc_address);
  // The UCX transports (e.g. "sysv", "tcp") the open connections use, sorted, without repeats.
  std::vector<std::string> TransportsInUse() const;

 private:
  // Connects to the store at `grpc_address` (GetInfo, transport Connect) and caches it.
  absl::StatusOr<std::shared_ptr<KvStoreConnection>> Open(const std::string& grpc_address);
  Transport& transport_;
  mutable Mutex mu_;
  std::map<std::string, std::shared_ptr<KvStoreConnection>> connections_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_KVSTORE_CONNECTION_H_
