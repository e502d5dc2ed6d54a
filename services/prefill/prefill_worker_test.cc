// PrefillWorker's prefix cache against a real KV store server in this process, over the fake
// transport: a repeated prompt reuses the pages the first one published and gives the same first
// token; a cached page whose bytes no longer match its checksum is refused (DATA_LOSS, counted, its
// allocation released) and never used.
#include "services/prefill/prefill_worker.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/engine/llama_engine.h"
#include "core/model/random_model.h"
#include "core/transport/fake_transport.h"
#include "services/kvstore/kvstore_service.h"

namespace pdserve {
namespace {

constexpr int kPage = 4;

class PrefillPrefixCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<ModelConfig> shape = ShapeByName("stories260K");  // GQA, 5 layers
    ASSERT_TRUE(shape.ok()) << shape.status();
    weights_ = MakeRandomModel(*shape, 5);
    KvStoreOptions store;
    store.pool_bytes = 64 * 4096;
    store.slot_bytes = 4096;
    absl::StatusOr<std::unique_ptr<KvStoreServer>> server =
        KvStoreServer::Create(store, store_transport_);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    EngineOptions options;
    options.max_context = 64;
    options.max_sequences = 2;
    options.kv_page_size = kPage;
    absl::StatusOr<std::unique_ptr<LlamaEngine>> engine = LlamaEngine::Create(weights_, options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    PrefillWorkerOptions worker;
    worker.prefix_cache = true;
    worker.model_identity = "random 5";
    absl::StatusOr<std::unique_ptr<PrefillWorker>> prefill =
        PrefillWorker::Create(*std::move(engine), worker);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    prefill_ = *std::move(prefill);
    absl::StatusOr<std::shared_ptr<KvStoreConnection>> store_connection =
        connections_.Get(server_->address());
    ASSERT_TRUE(store_connection.ok()) << store_connection.status();
    store_ = *store_connection;
  }
  void TearDown() override {
    prefill_.reset();
    store_.reset();
    if (server_ != nullptr) server_->Shutdown(absl::ZeroDuration());
  }

  absl::StatusOr<PrefillOutcome> Run(uint64_t request_id, const std::vector<int32_t>& prompt) {
    PrefillJob job;
    job.request_id = request_id;
    job.prompt = prompt;
    job.store = store_;
    return prefill_->Run(std::move(job));
  }
  // What a decode worker does when it is done with the pages.
  void Release(const PrefillOutcome& outcome) {
    EXPECT_TRUE(
        store_->Release(outcome.manifest.allocation_id(), outcome.manifest.lease_token()).ok());
  }

  std::shared_ptr<FakeNetwork> network_ = std::make_shared<FakeNetwork>();
  FakeTransport store_transport_{network_};
  FakeTransport worker_transport_{network_};
  KvStoreConnections connections_{worker_transport_};
  ModelWeights weights_;
  std::unique_ptr<KvStoreServer> server_;
  std::unique_ptr<PrefillWorker> prefill_;
  std::shared_ptr<KvStoreConnection> store_;
};

std::vector<int32_t> Prompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 14; ++i) prompt.push_back(1 + (i * 37) % 290);  // 3 named pages of 4
  return prompt;
}

TEST_F(PrefillPrefixCacheTest, ARepeatedPromptReusesThePagesAndTheAnswer) {
  absl::StatusOr<PrefillOutcome> first = Run(1, Prompt());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->cached_tokens, 0);
  Release(*first);

  absl::StatusOr<PrefillOutcome> second = Run(2, Prompt());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->cached_tokens, 3 * kPage);
  EXPECT_EQ(second->first_token, first->first_token);
  for (const v1::PageRef& page : second->manifest.pages()) {
    EXPECT_EQ(page.written_by(), page.page_index() < 3 ? 1u : 0u);
  }
  EXPECT_EQ(prefill_->stats().cached_tokens.Value(), 3 * kPage);
  Release(*second);
}

TEST_F(PrefillPrefixCacheTest, ACorruptedCachedPageIsRefusedNeverUsed) {
  absl::StatusOr<PrefillOutcome> first = Run(1, Prompt());
  ASSERT_TRUE(first.ok()) << first.status();
  Release(*first);
  // Flip a byte in the middle of cache layer 0's page 1 as it lies in the store.
  const v1::PageRef& page = first->manifest.pages(1);
  ASSERT_EQ(page.cache_layer(), 0);
  ASSERT_EQ(page.page_index(), 1);
  const uint64_t pool = store_->info().pool_address();
  server_->pool().base()[page.remote_address() - pool + page.encoded_bytes() / 2] ^= 0x40;

  absl::StatusOr<PrefillOutcome> second = Run(2, Prompt());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kDataLoss) << second.status();
  EXPECT_EQ(prefill_->stats().cache_refused_pages.Value(), 1);
  EXPECT_EQ(server_->pool().Usage().allocations, 0);  // released on the way out
}

}  // namespace
}  // namespace pdserve
