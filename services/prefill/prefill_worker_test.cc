// PrefillWorker against a real KV store server in this process, over the fake transport: a
// repeated prompt reuses the pages the first one published and gives the same first token; a
// cached page whose bytes no longer match its checksum is refused (DATA_LOSS, counted, its
// allocation released) and never used; a failed page write, a store that is gone and a pool too
// small each fail the request with their own code and leave no allocation behind.
#include "services/prefill/prefill_worker.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/engine/llama_engine.h"
#include "core/model/random_model.h"
#include "services/kvstore/in_process_kv_store.h"

namespace pdserve {
namespace {

constexpr int kPage = 4;

class PrefillWorkerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::StatusOr<ModelConfig> shape = ShapeByName("stories260K");  // GQA, 5 layers
    ASSERT_TRUE(shape.ok()) << shape.status();
    weights_ = MakeRandomModel(*shape, 5);
    KvStoreOptions options;
    options.pool_bytes = 64 * 4096;
    options.slot_bytes = 4096;
    absl::StatusOr<std::unique_ptr<InProcessKvStore>> store = InProcessKvStore::Start(options);
    ASSERT_TRUE(store.ok()) << store.status();
    store_ = *std::move(store);
    EngineOptions engine_options;
    engine_options.max_context = 64;
    engine_options.max_sequences = 2;
    engine_options.kv_page_size = kPage;
    absl::StatusOr<std::unique_ptr<LlamaEngine>> engine =
        LlamaEngine::Create(weights_, engine_options);
    ASSERT_TRUE(engine.ok()) << engine.status();
    PrefillWorkerOptions worker;
    worker.prefix_cache = true;
    worker.model_identity = "random 5";
    absl::StatusOr<std::unique_ptr<PrefillWorker>> prefill =
        PrefillWorker::Create(*std::move(engine), worker);
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    prefill_ = *std::move(prefill);
  }
  void TearDown() override {
    prefill_.reset();
    store_.reset();
  }

  absl::StatusOr<PrefillOutcome> Run(uint64_t request_id, const std::vector<int32_t>& prompt,
                                     absl::Time deadline = absl::InfiniteFuture()) {
    PrefillJob job;
    job.request_id = request_id;
    job.prompt = prompt;
    job.store = store_->connection();
    job.deadline = deadline;
    return prefill_->Run(std::move(job));
  }
  // What a decode worker does when it is done with the pages.
  void Release(const PrefillOutcome& outcome) {
    EXPECT_TRUE(store_->connection()
                    ->Release(outcome.manifest.allocation_id(), outcome.manifest.lease_token())
                    .ok());
  }
  int64_t Allocations() { return store_->server().pool().Usage().allocations; }

  ModelWeights weights_;
  std::unique_ptr<InProcessKvStore> store_;
  std::unique_ptr<PrefillWorker> prefill_;
};

std::vector<int32_t> Prompt() {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 14; ++i) prompt.push_back(1 + (i * 37) % 290);  // 3 named pages of 4
  return prompt;
}

// 24 tokens (6 pages in each cache layer), different for each `variant` from the first on.
std::vector<int32_t> LongPrompt(size_t variant) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 24; ++i) prompt.push_back(1 + (i * 37 + 11 * variant) % 290);
  return prompt;
}

TEST_F(PrefillWorkerTest, ARepeatedPromptReusesThePagesAndTheAnswer) {
  absl::StatusOr<PrefillOutcome> first = Run(1, Prompt());
  ASSERT_TRUE(first.ok()) << first.status();
  EXPECT_EQ(first->cached_tokens, 0);
  EXPECT_EQ(first->published_tokens, 3 * kPage);  // what a router learns of the store's cache
  EXPECT_EQ(first->page_tokens, kPage);
  Release(*first);

  absl::StatusOr<PrefillOutcome> second = Run(2, Prompt());
  ASSERT_TRUE(second.ok()) << second.status();
  EXPECT_EQ(second->cached_tokens, 3 * kPage);
  EXPECT_EQ(second->first_token, first->first_token);
  EXPECT_EQ(second->published_tokens, 3 * kPage);
  for (const v1::PageRef& page : second->manifest.pages()) {
    EXPECT_EQ(page.written_by(), page.page_index() < 3 ? 1u : 0u);
  }
  EXPECT_EQ(prefill_->stats().cached_tokens.Value(), 3 * kPage);
  Release(*second);
}

// A KV store restart empties the prefix cache: the first request after it learns of the new
// instance at Allocate (ABORTED, nothing computed, nothing left allocated; the service reconnects
// and runs it again), then computes the whole prompt to the same answer and publishes it anew.
TEST_F(PrefillWorkerTest, AKvStoreRestartEmptiesTheCacheWithoutWrongAnswers) {
  absl::StatusOr<PrefillOutcome> first = Run(1, Prompt());
  ASSERT_TRUE(first.ok()) << first.status();
  Release(*first);
  ASSERT_TRUE(store_->Restart().ok());

  absl::StatusOr<PrefillOutcome> stale = Run(2, Prompt());
  EXPECT_TRUE(absl::IsAborted(stale.status())) << stale.status();
  EXPECT_EQ(Allocations(), 0);
  ASSERT_TRUE(store_->Reconnect().ok());
  absl::StatusOr<PrefillOutcome> again = Run(2, Prompt());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->cached_tokens, 0);
  EXPECT_EQ(again->first_token, first->first_token);
  EXPECT_NE(again->manifest.kvstore_instance(), first->manifest.kvstore_instance());
  Release(*again);

  absl::StatusOr<PrefillOutcome> third = Run(3, Prompt());
  ASSERT_TRUE(third.ok()) << third.status();
  EXPECT_EQ(third->cached_tokens, 3 * kPage);
  EXPECT_EQ(third->first_token, first->first_token);
  Release(*third);
}

TEST_F(PrefillWorkerTest, ACorruptedCachedPageIsRefusedNeverUsed) {
  absl::StatusOr<PrefillOutcome> first = Run(1, Prompt());
  ASSERT_TRUE(first.ok()) << first.status();
  Release(*first);
  // Flip a byte in the middle of cache layer 0's page 1 as it lies in the store.
  const v1::PageRef& page = first->manifest.pages(1);
  ASSERT_EQ(page.cache_layer(), 0);
  ASSERT_EQ(page.page_index(), 1);
  store_->PoolByte(page.remote_address() + page.encoded_bytes() / 2) ^= 0x40;

  absl::StatusOr<PrefillOutcome> second = Run(2, Prompt());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kDataLoss) << second.status();
  EXPECT_EQ(prefill_->stats().cache_refused_pages.Value(), 1);
  EXPECT_EQ(Allocations(), 0);  // released on the way out
}

TEST_F(PrefillWorkerTest, AFailedPageWriteFailsTheRequestAndReleasesItsPages) {
  store_->worker_transport().FailNext(1, absl::UnavailableError("injected put failure"));
  absl::StatusOr<PrefillOutcome> outcome = Run(1, Prompt());
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable) << outcome.status();
  EXPECT_NE(outcome.status().message().find("injected put failure"), std::string::npos)
      << outcome.status();
  EXPECT_EQ(Allocations(), 0);
  // Nothing of the failed request was published: the next prompt computes everything.
  absl::StatusOr<PrefillOutcome> again = Run(2, Prompt());
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(again->cached_tokens, 0);
  Release(*again);
}

TEST_F(PrefillWorkerTest, AFailedCachedPageReadFailsTheRequestAndReleasesItsPages) {
  absl::StatusOr<PrefillOutcome> first = Run(1, Prompt());
  ASSERT_TRUE(first.ok()) << first.status();
  Release(*first);
  store_->worker_transport().FailNext(1, absl::UnavailableError("injected get failure"));
  absl::StatusOr<PrefillOutcome> second = Run(2, Prompt());
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable) << second.status();
  EXPECT_NE(second.status().message().find("reading cached prefix pages"), std::string::npos)
      << second.status();
  EXPECT_EQ(Allocations(), 0);
}

TEST_F(PrefillWorkerTest, AKvStoreThatIsGoneIsUnavailable) {
  store_->Shutdown();
  absl::StatusOr<PrefillOutcome> outcome = Run(1, Prompt());
  EXPECT_EQ(outcome.status().code(), absl::StatusCode::kUnavailable) << outcome.status();
  EXPECT_NE(outcome.status().message().find("Allocate"), std::string::npos) << outcome.status();
}

TEST_F(PrefillWorkerTest, APoolThatStaysFullFailsTheRequestAtItsDeadline) {
  // Two 24-token prompts hold 2 × 6 pages × 5 cache layers of the pool's 64 slots, unreleased.
  std::vector<PrefillOutcome> held;
  for (size_t i = 0; i < 2; ++i) {
    absl::StatusOr<PrefillOutcome> outcome = Run(100 + i, LongPrompt(i));
    ASSERT_TRUE(outcome.ok()) << outcome.status();
    held.push_back(*std::move(outcome));
  }
  const absl::Time start = absl::Now();
  absl::StatusOr<PrefillOutcome> waited =
      Run(1, LongPrompt(2), absl::Now() + absl::Milliseconds(200));
  EXPECT_EQ(waited.status().code(), absl::StatusCode::kResourceExhausted) << waited.status();
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(100));  // it waited for pages to come back
  EXPECT_EQ(Allocations(), 2);                              // and took none
  for (const PrefillOutcome& outcome : held) Release(outcome);
  EXPECT_EQ(Allocations(), 0);
}

}  // namespace
}  // namespace pdserve
