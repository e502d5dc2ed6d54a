#include "services/common/kvstore_connection.h"

#include <set>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "services/common/grpc_status.h"
#include "services/common/service_server.h"

namespace pdserve {

absl::StatusOr<double> KvStoreConnection::Renew(uint64_t allocation_id, uint64_t lease_token,
                                                double lease_seconds) {
  v1::RenewRequest request;
  request.set_allocation_id(allocation_id);
  request.set_lease_token(lease_token);
  request.set_lease_seconds(lease_seconds);
  v1::RenewReply reply;
  PDSERVE_RETURN_IF_ERROR(Call("Renew", &v1::KvStore::Stub::Renew, request, &reply));
  return reply.lease_seconds();
}

absl::Status KvStoreConnection::Release(uint64_t allocation_id, uint64_t lease_token) {
  v1::ReleaseRequest request;
  request.set_allocation_id(allocation_id);
  request.set_lease_token(lease_token);
  v1::ReleaseReply reply;
  return Call("Release", &v1::KvStore::Stub::Release, request, &reply);
}

absl::StatusOr<std::shared_ptr<KvStoreConnection>> KvStoreConnections::Get(
    const std::string& grpc_address, uint64_t instance) {
  {
    MutexLock lock(&mu_);
    auto it = connections_.find(grpc_address);
    if (it != connections_.end()) {
      if (instance == 0 || it->second->info().instance_id() == instance) return it->second;
      connections_.erase(it);  // connected to an earlier instance at that address
    }
  }
  PDSERVE_ASSIGN_OR_RETURN(std::shared_ptr<KvStoreConnection> connection, Open(grpc_address));
  if (instance != 0 && connection->info().instance_id() != instance) {
    return absl::UnavailableError(absl::StrCat(
        "KV store ", grpc_address, " restarted (instance ", connection->info().instance_id(),
        ", the pages were in instance ", instance, "): the request's pages are gone"));
  }
  return connection;
}

absl::StatusOr<std::shared_ptr<KvStoreConnection>> KvStoreConnections::Open(
    const std::string& grpc_address) {
  auto stub = v1::KvStore::NewStub(MakeInternalChannel(grpc_address, ComponentRole::kKvStore));
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(5)));
  v1::KvStoreInfo info;
  grpc::Status rpc = stub->GetInfo(&context, v1::GetInfoRequest(), &info);
  if (!rpc.ok()) {
    return absl::UnavailableError(
        absl::StrCat("KV store ", grpc_address, " did not answer GetInfo: ", rpc.error_message()));
  }
  absl::StatusOr<std::unique_ptr<Endpoint>> endpoint = transport_.Connect(info.worker_address());
  if (!endpoint.ok()) {
    return absl::UnavailableError(
        absl::StrCat("cannot reach KV store ", grpc_address,
                     " over the transport: ", endpoint.status().message()));
  }
  std::shared_ptr<Endpoint> shared_endpoint = std::move(*endpoint);
  std::string lanes;
  for (const std::string& lane : shared_endpoint->transports_in_use()) {
    absl::StrAppend(&lanes, lanes.empty() ? "" : ",", lane);
  }
  GetLogger("transport")
      ->info("connected to KV store {} (transports in use: {})", grpc_address,
             lanes.empty() ? "unknown" : lanes);
  auto connection = std::make_shared<KvStoreConnection>(grpc_address, std::move(stub),
                                                        std::move(info), shared_endpoint);
  MutexLock lock(&mu_);
  auto [it, inserted] = connections_.emplace(grpc_address, connection);
  return it->second;
}

void KvStoreConnections::Forget(const std::string& grpc_address) {
  MutexLock lock(&mu_);
  connections_.erase(grpc_address);
}

std::vector<std::string> KvStoreConnections::TransportsInUse() const {
  std::set<std::string> names;
  MutexLock lock(&mu_);
  for (const auto& [address, connection] : connections_) {
    for (const std::string& name : connection->endpoint()->transports_in_use()) names.insert(name);
  }
  return {names.begin(), names.end()};
}

}  // namespace pdserve
