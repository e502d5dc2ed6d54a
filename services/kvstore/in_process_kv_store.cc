#include "services/kvstore/in_process_kv_store.h"

#include "core/base/status_macros.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<InProcessKvStore>> InProcessKvStore::Start(
    const KvStoreOptions& options) {
  auto store = std::unique_ptr<InProcessKvStore>(new InProcessKvStore());
  store->options_ = options;
  store->store_transport_ = std::make_unique<FakeTransport>(store->network_);
  PDSERVE_ASSIGN_OR_RETURN(store->server_,
                           KvStoreServer::Create(options, *store->store_transport_));
  PDSERVE_ASSIGN_OR_RETURN(store->connection_, store->connections_.Get(store->server_->address()));
  return store;
}

absl::Status InProcessKvStore::Restart() {
  const std::string address = server_->address();
  Shutdown();
  server_.reset();
  store_transport_ = std::make_unique<FakeTransport>(network_);
  KvStoreOptions options = options_;
  options.endpoints.listen_address = address;
  PDSERVE_ASSIGN_OR_RETURN(server_, KvStoreServer::Create(options, *store_transport_));
  return absl::OkStatus();
}

absl::Status InProcessKvStore::Reconnect() {
  connections_.Forget(server_->address());
  PDSERVE_ASSIGN_OR_RETURN(connection_, connections_.Get(server_->address()));
  return absl::OkStatus();
}

InProcessKvStore::~InProcessKvStore() {
  connection_.reset();
  Shutdown();
}

uint8_t& InProcessKvStore::PoolByte(uint64_t address) {
  return server_->pool().base()[address - connection_->info().pool_address()];
}

void InProcessKvStore::Shutdown() {
  if (server_ != nullptr) server_->Shutdown(absl::ZeroDuration());
}

}  // namespace pdserve
