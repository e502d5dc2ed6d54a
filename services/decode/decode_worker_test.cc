// DecodeWorker's side of the disaggregated protocol, against a real KV store in this process
// (InProcessKvStore, fake transport) and pages a real PrefillWorker wrote there: it takes over the
// lease, pulls the pages, checks each and decodes what the whole model in one process decodes;
// every step that can fail — the lease, the pull, a damaged or foreign page, the remote V rows of
// KCache layers mid-decode — fails the request with its own code, counted where it is a refusal,
// and leaves the worker serving.
#include "services/decode/decode_worker.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "core/engine/generator.h"
#include "core/engine/llama_engine.h"
#include "core/model/random_model.h"
#include "services/kvstore/in_process_kv_store.h"
#include "services/prefill/prefill_worker.h"

namespace pdserve {
namespace {

constexpr int kPage = 4;
constexpr int kMaxTokens = 8;  // the prefill's first token and 7 decode steps

std::vector<int32_t> Prompt(int variant = 0) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 14; ++i) prompt.push_back(1 + (i * 37 + 11 * variant) % 290);
  return prompt;  // 3 full pages of 4 tokens and a partial one
}

// What a decode stream delivered: its tokens and how it ended.
struct Drained {
  std::vector<int32_t> tokens;
  absl::Status status;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
};

Drained Drain(DecodeStream& stream) {
  Drained out;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (absl::Now() < deadline) {
    DecodeStream::Taken taken = stream.Take(deadline);
    out.tokens.insert(out.tokens.end(), taken.tokens.begin(), taken.tokens.end());
    if (taken.finished) {
      out.status = taken.status;
      out.reason = taken.reason;
      return out;
    }
  }
  out.status = absl::DeadlineExceededError("the stream did not finish in 30 s");
  return out;
}

class DecodeWorkerFixture : public ::testing::Test {
 protected:
  // A store, a prefill worker and a decode worker of the same model and compression: plain, or
  // (kcache) FP8 with KCache layers whose V the decode worker reads remotely (RemoteValueTier).
  void Build(bool kcache) {
    const absl::StatusOr<ModelConfig> shape = ShapeByName("stories260K");  // GQA, 5 layers
    ASSERT_TRUE(shape.ok()) << shape.status();
    weights_ = MakeRandomModel(*shape, 5);
    KvStoreOptions store;
    store.pool_bytes = 128 * 4096;
    store.slot_bytes = 4096;
    absl::StatusOr<std::unique_ptr<InProcessKvStore>> started = InProcessKvStore::Start(store);
    ASSERT_TRUE(started.ok()) << started.status();
    store_ = *std::move(started);

    options_.max_context = 64;
    options_.max_sequences = 2;
    options_.kv_page_size = kPage;
    if (kcache) {
      options_.compression.fp8 = KvScaleMode::kPerTokenHead;
      options_.compression.kcache.top_n = 4;
    }
    absl::StatusOr<std::unique_ptr<LlamaEngine>> prefill_engine =
        LlamaEngine::Create(weights_, options_);
    ASSERT_TRUE(prefill_engine.ok()) << prefill_engine.status();
    absl::StatusOr<std::unique_ptr<PrefillWorker>> prefill =
        PrefillWorker::Create(*std::move(prefill_engine), PrefillWorkerOptions());
    ASSERT_TRUE(prefill.ok()) << prefill.status();
    prefill_ = *std::move(prefill);

    EngineOptions decode_options = options_;
    if (kcache) {
      decode_options.value_tier_factory =
          [this](
              int page_size, int num_pages,
              std::vector<KvSectionLayout> sections) -> absl::StatusOr<std::unique_ptr<ValueTier>> {
        absl::StatusOr<std::unique_ptr<RemoteValueTier>> tier =
            RemoteValueTier::Create(page_size, num_pages, std::move(sections));
        if (!tier.ok()) return tier.status();
        tier_ = tier->get();
        return std::unique_ptr<ValueTier>(*std::move(tier));
      };
    }
    absl::StatusOr<std::unique_ptr<LlamaEngine>> decode_engine =
        LlamaEngine::Create(weights_, decode_options);
    ASSERT_TRUE(decode_engine.ok()) << decode_engine.status();
    ASSERT_EQ(tier_ != nullptr, kcache);
    absl::StatusOr<std::unique_ptr<DecodeWorker>> decode =
        DecodeWorker::Create(*std::move(decode_engine), tier_, DecodeWorkerOptions());
    ASSERT_TRUE(decode.ok()) << decode.status();
    decode_ = *std::move(decode);
  }
  void TearDown() override {
    decode_.reset();
    prefill_.reset();
    store_.reset();
  }

  // The greedy tokens of the whole model, with the same compression, in one engine.
  std::vector<int32_t> Reference(const std::vector<int32_t>& prompt) {
    absl::StatusOr<std::unique_ptr<LlamaEngine>> engine = LlamaEngine::Create(weights_, options_);
    EXPECT_TRUE(engine.ok()) << engine.status();
    if (!engine.ok()) return {};
    GenerationParams params;
    params.max_tokens = kMaxTokens;
    absl::StatusOr<GenerationResult> result = Generate(**engine, prompt, params, [](int32_t) {});
    EXPECT_TRUE(result.ok()) << result.status();
    return result.ok() ? result->tokens : std::vector<int32_t>();
  }

  // Runs `prompt` through the prefill worker: its pages are sealed in the store, leased to it.
  PrefillOutcome Prefill(uint64_t request_id, const std::vector<int32_t>& prompt) {
    PrefillJob job;
    job.request_id = request_id;
    job.prompt = prompt;
    job.store = store_->connection();
    absl::StatusOr<PrefillOutcome> outcome = prefill_->Run(std::move(job));
    EXPECT_TRUE(outcome.ok()) << outcome.status();
    return outcome.ok() ? *std::move(outcome) : PrefillOutcome();
  }

  DecodeJob Job(const PrefillOutcome& prefill) {
    DecodeJob job;
    job.request_id = prefill.manifest.request_id();
    job.max_tokens = kMaxTokens;
    job.manifest = prefill.manifest;
    job.first_token = prefill.first_token;
    job.store = store_->connection();
    return job;
  }

  // What the decode service does once a request ended.
  absl::Status Release(const PrefillOutcome& prefill) {
    return store_->connection()->Release(prefill.manifest.allocation_id(),
                                         prefill.manifest.lease_token());
  }
  int64_t Refused(const char* reason) {
    return static_cast<int64_t>(decode_->stats().pages_refused.Add({{"reason", reason}}).Value());
  }
  int64_t Allocations() { return store_->server().pool().Usage().allocations; }

  ModelWeights weights_;
  EngineOptions options_;
  std::unique_ptr<InProcessKvStore> store_;
  std::unique_ptr<PrefillWorker> prefill_;
  RemoteValueTier* tier_ = nullptr;  // owned by decode_'s engine (KCache only)
  std::unique_ptr<DecodeWorker> decode_;
};

// Plain, and FP8 + KCache with remote V.
class DecodeWorkerTest : public DecodeWorkerFixture, public ::testing::WithParamInterface<bool> {
 protected:
  void SetUp() override { Build(GetParam()); }
};

TEST_P(DecodeWorkerTest, TheTokensAreThoseOfTheWholeModelInOneProcess) {
  const std::vector<int32_t> reference = Reference(Prompt());
  ASSERT_EQ(reference.size(), static_cast<size_t>(kMaxTokens));
  const PrefillOutcome prefill = Prefill(1, Prompt());
  EXPECT_EQ(prefill.first_token, reference[0]);

  absl::StatusOr<DecodeStart> start = decode_->Start(Job(prefill));
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_GT(start->lease_seconds, 0);  // the lease is the decoder's now
  const Drained drained = Drain(*start->stream);
  ASSERT_TRUE(drained.status.ok()) << drained.status;
  EXPECT_EQ(drained.tokens, reference);
  EXPECT_EQ(drained.reason, v1::FINISH_REASON_LENGTH);
  if (tier_ != nullptr) {
    EXPECT_GT(tier_->remote_bytes_fetched(), 0);  // V came from the store
  }
  EXPECT_EQ(decode_->queue().running_requests(), 0);  // retired before its stream ended
  EXPECT_EQ(decode_->queue().queued_tokens(), 0);
  EXPECT_TRUE(Release(prefill).ok());
  EXPECT_EQ(Allocations(), 0);
}

TEST_P(DecodeWorkerTest, ReleasedPagesCannotBeTakenOver) {
  const PrefillOutcome prefill = Prefill(1, Prompt());
  ASSERT_TRUE(Release(prefill).ok());  // e.g. the lease ran out and the store took them back
  const uint64_t batches = store_->worker_transport().stats().batches;
  absl::StatusOr<DecodeStart> start = decode_->Start(Job(prefill));
  ASSERT_FALSE(start.ok());
  EXPECT_NE(start.status().message().find("taking over the pages of request 1"), std::string::npos)
      << start.status();
  EXPECT_EQ(store_->worker_transport().stats().batches, batches);  // nothing was read
  EXPECT_EQ(decode_->queue().queued_requests(), 0);
}

TEST_P(DecodeWorkerTest, AFailedPullIsUnavailableAndARetryDecodes) {
  const PrefillOutcome prefill = Prefill(1, Prompt());
  store_->worker_transport().FailNext(1, absl::UnavailableError("injected get failure"));
  absl::StatusOr<DecodeStart> failed = decode_->Start(Job(prefill));
  EXPECT_EQ(failed.status().code(), absl::StatusCode::kUnavailable) << failed.status();
  EXPECT_NE(failed.status().message().find("reading the pages of request 1"), std::string::npos)
      << failed.status();
  EXPECT_EQ(decode_->queue().queued_requests(), 0);

  // The pages and the lease are still there: the same job decodes.
  absl::StatusOr<DecodeStart> start = decode_->Start(Job(prefill));
  ASSERT_TRUE(start.ok()) << start.status();
  const Drained drained = Drain(*start->stream);
  EXPECT_TRUE(drained.status.ok()) << drained.status;
  EXPECT_EQ(drained.tokens, Reference(Prompt()));
  EXPECT_TRUE(Release(prefill).ok());
}

TEST_P(DecodeWorkerTest, APageDamagedOnTheWayIsRefusedAndCounted) {
  const PrefillOutcome prefill = Prefill(1, Prompt());
  store_->worker_transport().CorruptNextGets(1);
  absl::StatusOr<DecodeStart> start = decode_->Start(Job(prefill));
  ASSERT_TRUE(start.ok()) << start.status();  // checked when the scheduler imports the pages
  const Drained drained = Drain(*start->stream);
  EXPECT_EQ(drained.status.code(), absl::StatusCode::kDataLoss) << drained.status;
  EXPECT_TRUE(drained.tokens.empty());  // not even the prefill's token
  EXPECT_EQ(Refused("checksum"), 1);
  EXPECT_EQ(decode_->queue().running_requests(), 0);
  EXPECT_TRUE(Release(prefill).ok());
}

TEST_P(DecodeWorkerTest, APageOfAnotherRequestIsRefusedAsForeign) {
  const PrefillOutcome mine = Prefill(1, Prompt());
  const PrefillOutcome other = Prefill(2, Prompt(1));
  DecodeJob job = Job(mine);
  job.manifest.mutable_pages(0)->set_remote_address(other.manifest.pages(0).remote_address());
  absl::StatusOr<DecodeStart> start = decode_->Start(std::move(job));
  ASSERT_TRUE(start.ok()) << start.status();
  const Drained drained = Drain(*start->stream);
  EXPECT_EQ(drained.status.code(), absl::StatusCode::kDataLoss) << drained.status;
  EXPECT_NE(drained.status.ToString().find("it holds request 2"), std::string::npos)
      << drained.status;
  EXPECT_EQ(Refused("foreign"), 1);
  EXPECT_TRUE(Release(mine).ok());
  EXPECT_TRUE(Release(other).ok());
}

TEST_P(DecodeWorkerTest, PagesOfAnotherCalibrationAreRefusedBeforeAnyRead) {
  const PrefillOutcome prefill = Prefill(1, Prompt());
  DecodeJob job = Job(prefill);
  job.manifest.set_calibration_hash(0x5eed);
  const uint64_t batches = store_->worker_transport().stats().batches;
  absl::StatusOr<DecodeStart> start = decode_->Start(std::move(job));
  EXPECT_EQ(start.status().code(), absl::StatusCode::kFailedPrecondition) << start.status();
  EXPECT_EQ(store_->worker_transport().stats().batches, batches);
  EXPECT_TRUE(Release(prefill).ok());
}

INSTANTIATE_TEST_SUITE_P(Profiles, DecodeWorkerTest, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "fp8_kcache_remote_v" : "plain";
                         });

// KCache layers read V rows from the store at every step, after the pull.
class RemoteValueDecodeTest : public DecodeWorkerFixture {
 protected:
  void SetUp() override { Build(/*kcache=*/true); }
};

TEST_F(RemoteValueDecodeTest, TheStoreFailingMidDecodeEndsTheStreamUnavailable) {
  const PrefillOutcome prefill = Prefill(1, Prompt());
  // The pull (one batch) passes; every V fetch after it fails.
  store_->worker_transport().FailNext(1 << 20, absl::UnavailableError("injected"), /*after=*/1);
  absl::StatusOr<DecodeStart> start = decode_->Start(Job(prefill));
  ASSERT_TRUE(start.ok()) << start.status();
  const Drained drained = Drain(*start->stream);
  EXPECT_EQ(drained.status.code(), absl::StatusCode::kUnavailable) << drained.status;
  EXPECT_NE(drained.status.message().find("fetching V pages"), std::string::npos) << drained.status;
  EXPECT_EQ(drained.tokens, std::vector<int32_t>{prefill.first_token});  // no token from bad V
  EXPECT_EQ(decode_->queue().running_requests(), 0);
  EXPECT_TRUE(Release(prefill).ok());
}

TEST_F(RemoteValueDecodeTest, AVRowDamagedOnTheWayIsRefusedAndCounted) {
  const PrefillOutcome prefill = Prefill(1, Prompt());
  store_->worker_transport().CorruptNextGets(1, /*after=*/1);
  absl::StatusOr<DecodeStart> start = decode_->Start(Job(prefill));
  ASSERT_TRUE(start.ok()) << start.status();
  const Drained drained = Drain(*start->stream);
  EXPECT_EQ(drained.status.code(), absl::StatusCode::kDataLoss) << drained.status;
  EXPECT_EQ(drained.tokens, std::vector<int32_t>{prefill.first_token});
  EXPECT_EQ(Refused("checksum"), 1);
  EXPECT_TRUE(Release(prefill).ok());
}

}  // namespace
}  // namespace pdserve
