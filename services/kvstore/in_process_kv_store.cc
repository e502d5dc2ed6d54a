#include "services/kvstore/in_process_kv_store.h"

#include "core/base/status_macros.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<InProcessKvStore>> InProcessKvStore::Start(
    const KvStoreOptions& options) {
  auto store = std::unique_ptr<InProcessKvStore>(new InProcessKvStore());
  PDSERVE_ASSIGN_OR_RETURN(store->server_, KvStoreServer::Create(options, store->store_transport_));
  PDSERVE_ASSIGN_OR_RETURN(store->connection_, store->connections_.Get(store->server_->address()));
  return store;
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
