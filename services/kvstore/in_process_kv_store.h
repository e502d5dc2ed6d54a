// InProcessKvStore: a real KV store server in this process (KvStoreServer: gRPC on loopback, its
// pool in memory of a FakeTransport) and a worker's connection to it (KvStoreConnections over
// another FakeTransport on a private FakeNetwork), for unit tests of the workers' side of the
// protocol — allocate, write, seal, renew, read, release — without UCX or other processes.
// Faults: worker_transport() fails or corrupts the worker's transfers or takes the store down for
// them (FakeTransport), Shutdown() stops its gRPC service, Restart() replaces the store with a new
// instance at the same address.
#ifndef PDSERVE_SERVICES_KVSTORE_IN_PROCESS_KV_STORE_H_
#define PDSERVE_SERVICES_KVSTORE_IN_PROCESS_KV_STORE_H_

#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "core/transport/fake_transport.h"
#include "services/common/kvstore_connection.h"
#include "services/kvstore/kvstore_service.h"

namespace pdserve {

class InProcessKvStore {
 public:
  // A store of `options` (the default endpoints: ephemeral loopback ports) and a connection to it.
  static absl::StatusOr<std::unique_ptr<InProcessKvStore>> Start(const KvStoreOptions& options);
  ~InProcessKvStore();  // Shutdown

  KvStoreServer& server() { return *server_; }
  // The worker's connection (pool key, endpoint, stub), as KvStoreConnections::Get returns it.
  const std::shared_ptr<KvStoreConnection>& connection() const { return connection_; }
  FakeTransport& worker_transport() { return worker_transport_; }
  // The byte at pool address `address` (a PageRef's remote_address plus an offset), in place.
  uint8_t& PoolByte(uint64_t address);
  // Stops the store's gRPC service at once; transfers still reach its memory until destruction.
  void Shutdown();
  // As a KV store process restarted: the store stops and another instance starts at its address,
  // with an empty pool (and prefix cache) and a new instance id. connection() keeps the connection
  // to the old instance, as a worker's cache does until a reply names the new one; Reconnect()
  // replaces it, as KvStoreConnections::Get with the new instance id does.
  absl::Status Restart();
  absl::Status Reconnect();

 private:
  InProcessKvStore() = default;

  std::shared_ptr<FakeNetwork> network_ = std::make_shared<FakeNetwork>();
  FakeTransport worker_transport_{network_};
  KvStoreConnections connections_{worker_transport_};
  KvStoreOptions options_;
  std::unique_ptr<FakeTransport> store_transport_;  // the instance's: its pool's memory
  std::unique_ptr<KvStoreServer> server_;
  std::shared_ptr<KvStoreConnection> connection_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_KVSTORE_IN_PROCESS_KV_STORE_H_
