// Runs the router in-process on 127.0.0.1:0 with small fake Prefill, Decode and KvStore services
// (also on port 0) and drives it through the client SDK. The fakes are for testing the router
// alone; the real workers have their own integration tests.
#include "services/router/router_service.h"

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "client/pdserve_client.h"
#include "core/base/mutex.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "pdserve/v1/kvstore.grpc.pb.h"
#include "proto/retry_hint.h"
#include "services/router/test_byte_tokenizer.h"

namespace pdserve {
namespace {

using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr absl::Duration kWait = absl::Seconds(10);  // upper bound for anything "prompt"

// Polls `done` until it holds (kWait at most): waits for other threads to reach a state.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + kWait;
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(2));
  }
  return true;
}

class FakePrefill final : public v1::Prefill::Service {
 public:
  grpc::Status Prefill(grpc::ServerContext*, const v1::PrefillRequest* request,
                       v1::PrefillReply* reply) override {
    MutexLock lock(&mu_);
    requests_.push_back(*request);
    reply->set_first_token(first_token_);
    reply->mutable_manifest()->set_request_id(request->request_id());
    reply->mutable_manifest()->set_num_tokens(request->prompt_size());
    reply->mutable_manifest()->set_kvstore_grpc_address(request->kvstore_grpc_address());
    reply->set_queue_seconds(0.010);
    reply->set_compute_seconds(0.020);
    reply->set_transfer_seconds(0.003);
    // As a prefill worker with the prefix cache on: the store holds the whole pages before the
    // prompt's last token now.
    reply->set_page_tokens(16);
    reply->set_published_tokens((request->prompt_size() - 1) / 16 * 16);
    reply->mutable_manifest()->set_kvstore_instance(1);
    return grpc::Status::OK;
  }
  grpc::Status GetQueue(grpc::ServerContext*, const v1::GetQueueRequest*,
                        v1::QueueStatus*) override {
    return grpc::Status::OK;
  }
  std::vector<v1::PrefillRequest> requests() {
    MutexLock lock(&mu_);
    return requests_;
  }

  int first_token_ = ByteTokenizer::Id('H');

 private:
  Mutex mu_;
  std::vector<v1::PrefillRequest> requests_ ABSL_GUARDED_BY(mu_);
};

class FakeKvStore final : public v1::KvStore::Service {
 public:
  grpc::Status CancelRequest(grpc::ServerContext*, const v1::CancelRequestRequest* request,
                             v1::CancelRequestReply*) override {
    MutexLock lock(&mu_);
    cancelled_.push_back(request->request_id());
    changed_.SignalAll();
    return grpc::Status::OK;
  }
  // Waits until CancelRequest(request_id) arrives.
  bool WaitCancelled(uint64_t request_id) {
    const absl::Time deadline = absl::Now() + kWait;
    MutexLock lock(&mu_);
    while (std::find(cancelled_.begin(), cancelled_.end(), request_id) == cancelled_.end()) {
      if (changed_.WaitWithDeadline(&mu_, deadline)) return false;
    }
    return true;
  }

 private:
  Mutex mu_;
  CondVar changed_;  // signalled when cancelled_ grows
  std::vector<uint64_t> cancelled_ ABSL_GUARDED_BY(mu_);
};

// Streams first_token (when the request has a manifest) and then `script_`, one token per
// message, `delay_` apart; the last message is done with `reason_`. With `hang_after_` >= 0 it
// stops after that many messages and waits for the call to be cancelled.
class FakeDecode final : public v1::Decode::Service {
 public:
  grpc::Status Decode(grpc::ServerContext* context, const v1::DecodeRequest* request,
                      grpc::ServerWriter<v1::DecodeResponse>* writer) override {
    std::vector<int> stream;
    if (request->has_manifest()) stream.push_back(request->first_token());
    stream.insert(stream.end(), script_.begin(), script_.end());
    {
      MutexLock lock(&mu_);
      requests_.push_back(*request);
    }
    for (size_t i = 0; i < stream.size(); ++i) {
      if (hang_after_ >= 0 && static_cast<int>(i) == hang_after_) {
        {
          MutexLock lock(&mu_);
          hanging_ = true;
          changed_.SignalAll();
        }
        const absl::Time give_up = absl::Now() + absl::Seconds(30);
        while (!context->IsCancelled() && absl::Now() < give_up)
          absl::SleepFor(absl::Milliseconds(2));
        MutexLock lock(&mu_);
        saw_cancel_ = context->IsCancelled();
        changed_.SignalAll();
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      if (context->IsCancelled()) {
        MutexLock lock(&mu_);
        saw_cancel_ = true;
        changed_.SignalAll();
        return grpc::Status(grpc::StatusCode::CANCELLED, "cancelled");
      }
      v1::DecodeResponse response;
      response.add_tokens(stream[i]);
      if (i == 0) {
        response.set_transfer_seconds(0.004);
        response.set_prefill_seconds(request->has_manifest() ? 0.0 : 0.05);
      }
      if (i + 1 == stream.size()) {
        response.set_done(true);
        response.set_finish_reason(reason_);
      }
      if (!writer->Write(response)) {
        MutexLock lock(&mu_);
        saw_cancel_ = true;
        changed_.SignalAll();
        return grpc::Status(grpc::StatusCode::CANCELLED, "write failed");
      }
      absl::SleepFor(delay_);
    }
    return grpc::Status::OK;
  }
  grpc::Status GetQueue(grpc::ServerContext*, const v1::GetQueueRequest*,
                        v1::QueueStatus*) override {
    return grpc::Status::OK;
  }

  // Each waits up to kWait for its flag.
  bool WaitHanging() {
    const absl::Time deadline = absl::Now() + kWait;
    MutexLock lock(&mu_);
    while (!hanging_ && !changed_.WaitWithDeadline(&mu_, deadline)) {
    }
    return hanging_;
  }
  bool WaitSawCancel() {
    const absl::Time deadline = absl::Now() + kWait;
    MutexLock lock(&mu_);
    while (!saw_cancel_ && !changed_.WaitWithDeadline(&mu_, deadline)) {
    }
    return saw_cancel_;
  }
  std::vector<v1::DecodeRequest> requests() {
    MutexLock lock(&mu_);
    return requests_;
  }

  std::vector<int> script_;
  absl::Duration delay_ = absl::ZeroDuration();
  int hang_after_ = -1;
  v1::FinishReason reason_ = v1::FINISH_REASON_LENGTH;

 private:
  Mutex mu_;
  CondVar changed_;  // signalled when hanging_ or saw_cancel_ is set
  std::vector<v1::DecodeRequest> requests_ ABSL_GUARDED_BY(mu_);
  bool hanging_ ABSL_GUARDED_BY(mu_) = false;
  bool saw_cancel_ ABSL_GUARDED_BY(mu_) = false;
};

std::vector<int> Concat(std::vector<int> a, const std::vector<int>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

class RouterServiceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto workers = ServiceServer::Start("127.0.0.1:0", {&prefill_, &kvstore_});
    ASSERT_TRUE(workers.ok()) << workers.status();
    prefill_server_ = *std::move(workers);
    auto decode = ServiceServer::Start("127.0.0.1:0", {&decode_});
    ASSERT_TRUE(decode.ok()) << decode.status();
    decode_server_ = *std::move(decode);
  }
  void TearDown() override {
    router_.reset();
    if (decode_server_ != nullptr) decode_server_->Shutdown(absl::ZeroDuration());
    if (prefill_server_ != nullptr) prefill_server_->Shutdown(absl::ZeroDuration());
  }

  RouterOptions Options() {
    RouterOptions o;
    o.endpoints.listen_address = "127.0.0.1:0";
    o.tokenizer = std::make_shared<ByteTokenizer>();
    o.max_context = 256;
    o.vocab_size = ByteTokenizer::kVocab;
    o.prefill_workers = {prefill_server_->address()};
    o.decode_workers = {{decode_server_->address(), prefill_server_->address()}};
    o.heartbeat_interval = absl::Milliseconds(100);
    return o;
  }
  void StartRouter(const RouterOptions& options) {
    auto router = RouterServer::Start(options);
    ASSERT_TRUE(router.ok()) << router.status();
    router_ = *std::move(router);
    auto client = Client::Create(router_->address());
    ASSERT_TRUE(client.ok());
    client_ = *std::move(client);
  }
  // A router that runs one request at a time, `max_queued` more waiting, and that one request
  // started on another thread and hanging in decode until `cancel` (its status in `*status`).
  std::thread StartWithOneHangingCall(int max_queued, const CancellationToken& cancel,
                                      absl::Status* status = nullptr) {
    decode_.script_ = ByteTokenizer::Ids("abcdef");
    decode_.hang_after_ = 1;
    RouterOptions options = Options();
    options.max_inflight = 1;
    options.max_queued = max_queued;
    StartRouter(options);
    std::thread caller = CallUntilCancelled(cancel, "x", status);
    EXPECT_TRUE(decode_.WaitHanging());
    return caller;
  }
  // A Generate call on another thread that runs until `cancel`; its status lands in `*status`.
  std::thread CallUntilCancelled(const CancellationToken& cancel, const char* prompt,
                                 absl::Status* status = nullptr) {
    return std::thread([this, cancel, prompt, status] {
      CallOptions o;
      o.cancellation = cancel;
      absl::Status result = client_->Generate(TextRequest(prompt, 50), o).status();
      if (status != nullptr) *status = result;
    });
  }
  bool DecodeHealthy() {
    auto list = client_->ListWorkers();
    EXPECT_TRUE(list.ok()) << list.status();
    for (const v1::WorkerInfo& w : list->workers()) {
      if (w.address() == decode_server_->address()) return w.healthy();
    }
    return false;
  }

  FakePrefill prefill_;
  FakeKvStore kvstore_;  // served beside the prefill fake; stands in for the decode node's store
  FakeDecode decode_;
  std::unique_ptr<ServiceServer> prefill_server_;
  std::unique_ptr<ServiceServer> decode_server_;
  std::unique_ptr<RouterServer> router_;
  std::unique_ptr<Client> client_;
};

TEST_F(RouterServiceTest, RelaysTokensTextAndTimings) {
  decode_.script_ = Concat(ByteTokenizer::Ids("ey \xC3\xA9"), {2});  // ... EOS
  decode_.reason_ = v1::FINISH_REASON_STOP_TOKEN;
  StartRouter(Options());
  v1::GenerateRequest request = TextRequest("hi", 20);
  request.set_request_id("req-1");
  std::vector<GenerateResponse::Token> tokens;
  auto final = client_->GenerateStream(
      request, {}, [&](const GenerateResponse::Token& t) { tokens.push_back(t); });
  ASSERT_TRUE(final.ok()) << final.status();
  const std::vector<int> expected = Concat(ByteTokenizer::Ids("Hey \xC3\xA9"), {2});
  ASSERT_EQ(tokens.size(), expected.size());
  std::string text;
  for (size_t i = 0; i < tokens.size(); ++i) {
    EXPECT_EQ(tokens[i].id(), expected[i]);
    EXPECT_EQ(tokens[i].index(), static_cast<int>(i));
    text += tokens[i].text();
  }
  EXPECT_EQ(tokens[4].text(), "");  // the first byte of é alone is not text yet
  EXPECT_EQ(tokens[5].text(), "\xC3\xA9");
  EXPECT_EQ(text, "Hey \xC3\xA9");
  EXPECT_EQ(final->finish_reason(), v1::FINISH_REASON_STOP_TOKEN);
  EXPECT_EQ(final->prompt_tokens(), 3);  // BOS h i
  EXPECT_EQ(final->completion_tokens(), 7);
  EXPECT_EQ(final->request_id(), "req-1");
  EXPECT_EQ(final->prefill_worker(), prefill_server_->address());
  EXPECT_EQ(final->decode_worker(), decode_server_->address());
  const v1::Timings& t = final->timings();
  EXPECT_GE(t.queue_seconds(), 0.010);
  EXPECT_DOUBLE_EQ(t.prefill_seconds(), 0.020);
  EXPECT_NEAR(t.transfer_seconds(), 0.007, 1e-9);
  EXPECT_GT(t.first_token_seconds(), 0.0);
  EXPECT_GE(t.decode_seconds(), 0.0);
  EXPECT_GE(t.total_seconds(), t.first_token_seconds() + t.decode_seconds() - 1e-9);

  // What the workers were asked.
  auto prefills = prefill_.requests();
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_THAT(prefills[0].prompt(), ElementsAreArray(Concat({1}, ByteTokenizer::Ids("hi"))));
  EXPECT_EQ(prefills[0].kvstore_grpc_address(), prefill_server_->address());
  EXPECT_NE(prefills[0].request_id(), 0u);
  auto decodes = decode_.requests();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_EQ(decodes[0].manifest().request_id(), prefills[0].request_id());
  EXPECT_EQ(decodes[0].request_id(), prefills[0].request_id());
  EXPECT_EQ(decodes[0].first_token(), ByteTokenizer::Id('H'));
  EXPECT_EQ(decodes[0].max_tokens(), 20);
  EXPECT_THAT(decodes[0].stop().stop_token_ids(), ElementsAreArray({2, 1}));  // EOS and BOS added
  EXPECT_EQ(router_->service().inflight(), 0);

  // The blocking call gives the same.
  auto result = client_->Generate(TextRequest("hi", 20));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->text, "Hey \xC3\xA9");
  EXPECT_EQ(result->token_ids, expected);
}

// Two decode workers, each with its own KV store, and one prefill worker. Ties among the decode
// workers rotate under round-robin and least-tokens (each role keeps its own cursor, however many
// prefill choices come between); kv-aware sends a prompt where the prefill replies said its pages
// went, and counts the tokens it expected the store to give.
TEST_F(RouterServiceTest, TiesRotateAndKvAwareFollowsThePublishedPages) {
  FakeDecode second;
  auto second_server = ServiceServer::Start("127.0.0.1:0", {&second});
  ASSERT_TRUE(second_server.ok()) << second_server.status();
  const std::string store_a = prefill_server_->address();
  const std::string store_b = (*second_server)->address();  // never called on success
  const std::string prompt(100, 'x');                       // BOS + 100: 6 named pages
  for (const char* policy : {"round-robin", "least-tokens", "kv-aware"}) {
    SCOPED_TRACE(policy);
    RouterOptions options = Options();
    options.policy = policy;
    options.decode_workers.push_back({(*second_server)->address(), store_b});
    StartRouter(options);
    const size_t before = prefill_.requests().size();
    for (int i = 0; i < 4; ++i) {
      ASSERT_TRUE(client_->Generate(TextRequest(prompt, 5)).ok());
    }
    std::vector<std::string> stores;
    for (size_t i = before; i < prefill_.requests().size(); ++i) {
      stores.push_back(prefill_.requests()[i].kvstore_grpc_address() == store_a ? "a" : "b");
    }
    if (std::string(policy) == "kv-aware") {
      EXPECT_THAT(stores, ::testing::ElementsAre(stores[0], stores[0], stores[0], stores[0]));
      const std::string metrics = router_->service().metrics().Render();
      EXPECT_THAT(metrics,
                  HasSubstr("pdserve_router_cached_prompt_tokens_total{source=\"expected\"} 288"));
    } else {
      EXPECT_THAT(stores, ::testing::ElementsAre("a", "b", "a", "b"));
    }
    router_.reset();
  }
  (*second_server)->Shutdown(absl::ZeroDuration());
}

TEST_F(RouterServiceTest, ManyConcurrentCallersShareOneClient) {
  decode_.script_ = ByteTokenizer::Ids("abc");
  decode_.delay_ = absl::Milliseconds(2);
  StartRouter(Options());
  constexpr int kThreads = 16;
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 4; ++k) {
        auto result = client_->Generate(TextRequest("q", 10));
        if (result.ok() && result->text == "Habc") ++ok;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(ok.load(), kThreads * 4);
  EXPECT_EQ(router_->service().inflight(), 0);
  auto list = router_->service().registry().List();
  for (const WorkerSnapshot& w : list) EXPECT_EQ(w.inflight_tokens, 0) << w.address;
}

TEST_F(RouterServiceTest, StopStringEndsTheStreamAndCancelsDecode) {
  std::string script = "abcSTOP";
  script += std::string(200, 'z');
  decode_.script_ = ByteTokenizer::Ids(script);
  decode_.delay_ = absl::Milliseconds(5);
  StartRouter(Options());
  v1::GenerateRequest request = TextRequest("x", 250);
  request.mutable_stop()->add_stop_strings("STOP");
  request.mutable_stop()->add_stop_strings("never");
  auto result = client_->Generate(request);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->text, "Habc");
  EXPECT_EQ(result->final.finish_reason(), v1::FINISH_REASON_STOP_STRING);
  EXPECT_EQ(result->final.completion_tokens(), 8);  // H a b c S T O P
  EXPECT_TRUE(decode_.WaitSawCancel());
}

TEST_F(RouterServiceTest, ClientCancellationReachesDecode) {
  decode_.script_ = ByteTokenizer::Ids("abcdef");
  decode_.hang_after_ = 2;
  StartRouter(Options());
  CancellationToken cancel;
  CallOptions options;
  options.cancellation = cancel;
  std::atomic<int> received{0};
  absl::Status status;
  std::thread caller([&] {
    status = client_
                 ->GenerateStream(TextRequest("x", 50), options,
                                  [&](const GenerateResponse::Token&) { ++received; })
                 .status();
  });
  ASSERT_TRUE(decode_.WaitHanging());
  cancel.Cancel();
  caller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kCancelled) << status;
  EXPECT_TRUE(decode_.WaitSawCancel());
  EXPECT_TRUE(cancel.cancelled());
  // A cancelled token cancels the next call at once.
  EXPECT_EQ(client_->Generate(TextRequest("x", 5), options).status().code(),
            absl::StatusCode::kCancelled);
}

TEST_F(RouterServiceTest, ClientDeadlineReachesDecode) {
  decode_.script_ = ByteTokenizer::Ids("abcdef");
  decode_.hang_after_ = 1;
  StartRouter(Options());
  CallOptions options;
  // Long enough for the request to reach decode (and hang there) first, even under a sanitizer
  // on a slow machine: a deadline that expires before decode is called leaves nothing to cancel.
  options.timeout = kWait / 4;
  const absl::Time start = absl::Now();
  auto result = client_->Generate(TextRequest("x", 50), options);
  EXPECT_EQ(result.status().code(), absl::StatusCode::kDeadlineExceeded) << result.status();
  EXPECT_LT(absl::Now() - start, kWait);
  ASSERT_TRUE(decode_.WaitHanging()) << "the deadline expired before decode was called";
  EXPECT_TRUE(decode_.WaitSawCancel());
}

TEST_F(RouterServiceTest, DecodeWorkerDyingGivesUnavailableAndReleasesPages) {
  decode_.script_ = ByteTokenizer::Ids("abcdef");
  decode_.hang_after_ = 2;
  StartRouter(Options());
  ASSERT_TRUE(DecodeHealthy());
  absl::Status status;
  absl::Time failed_at;
  std::thread caller([&] {
    status = client_->Generate(TextRequest("x", 50)).status();
    failed_at = absl::Now();
  });
  ASSERT_TRUE(decode_.WaitHanging());
  const absl::Time killed_at = absl::Now();
  decode_server_->Shutdown(absl::ZeroDuration());  // the worker goes away mid-stream
  caller.join();
  EXPECT_EQ(status.code(), absl::StatusCode::kUnavailable) << status;
  EXPECT_THAT(status.message(), HasSubstr(decode_server_->address()));
  EXPECT_LT(failed_at - killed_at, kWait);
  EXPECT_FALSE(DecodeHealthy());
  auto prefills = prefill_.requests();
  ASSERT_EQ(prefills.size(), 1u);
  EXPECT_TRUE(kvstore_.WaitCancelled(prefills[0].request_id()));

  auto next = client_->Generate(TextRequest("x", 5));
  EXPECT_EQ(next.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(next.status().message(), HasSubstr("no healthy decode worker"));
}

// Beyond --max-inflight requests wait in arrival order; beyond --max-queued they are refused with
// RESOURCE_EXHAUSTED and the router's retry hint.
TEST_F(RouterServiceTest, RequestsQueueBeyondTheRunningLimitAndAreRefusedBeyondTheQueue) {
  CancellationToken cancel_first, cancel_second;
  absl::Status first, second;
  std::thread first_caller = StartWithOneHangingCall(/*max_queued=*/1, cancel_first, &first);
  std::thread second_caller = CallUntilCancelled(cancel_second, "y", &second);
  ASSERT_TRUE(Eventually([&] { return router_->service().inflight() == 2; }));  // one queued

  CallOptions no_retry;
  no_retry.retry.max_retries = 0;
  auto third = client_->Generate(TextRequest("z", 5), no_retry);
  EXPECT_EQ(third.status().code(), absl::StatusCode::kResourceExhausted) << third.status();
  EXPECT_THAT(third.status().message(), HasSubstr("1 queued"));
  EXPECT_EQ(RetryHint(third.status()), absl::Seconds(1));

  cancel_first.Cancel();  // frees the running slot: the queued request goes on to the workers
  first_caller.join();
  EXPECT_EQ(first.code(), absl::StatusCode::kCancelled);
  ASSERT_TRUE(Eventually([&] { return decode_.requests().size() == 2; }));
  cancel_second.Cancel();
  second_caller.join();
  EXPECT_EQ(second.code(), absl::StatusCode::kCancelled);
  EXPECT_EQ(prefill_.requests().size(), 2u);  // the refused request reached no worker
}

// Draining: a request that comes after StartDraining is refused, retryably and before it reaches a
// worker; the one already running goes on.
TEST_F(RouterServiceTest, ADrainingRouterRefusesNewRequestsAndKeepsRunningOnes) {
  CancellationToken cancel;
  absl::Status first;
  std::thread first_caller = StartWithOneHangingCall(/*max_queued=*/1, cancel, &first);
  router_->service().StartDraining();
  CallOptions no_retry;
  no_retry.retry.max_retries = 0;
  auto refused = client_->Generate(TextRequest("z", 5), no_retry);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kUnavailable) << refused.status();
  EXPECT_THAT(refused.status().message(), HasSubstr("router is draining"));
  EXPECT_EQ(decode_.requests().size(), 1u);
  EXPECT_EQ(router_->service().inflight(), 1);

  cancel.Cancel();
  first_caller.join();
  EXPECT_EQ(first.code(), absl::StatusCode::kCancelled);
}

TEST_F(RouterServiceTest, AQueuedRequestLeavesAtItsDeadline) {
  CancellationToken cancel;
  std::thread caller = StartWithOneHangingCall(RouterOptions().max_queued, cancel);
  CallOptions short_wait;
  short_wait.timeout = absl::Milliseconds(300);
  auto late = client_->Generate(TextRequest("y", 5), short_wait);
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded) << late.status();
  // The router's waiter leaves at the same deadline, on its own clock.
  EXPECT_TRUE(Eventually([&] { return router_->service().inflight() == 1; }));
  cancel.Cancel();
  caller.join();
  EXPECT_EQ(prefill_.requests().size(), 1u);
}

// The SDK retries a refusal after the router's hint, and the retry completes once there is room.
TEST_F(RouterServiceTest, TheClientRetriesARefusalAndCompletes) {
  CancellationToken cancel;
  std::thread caller = StartWithOneHangingCall(/*max_queued=*/0, cancel);
  std::atomic<int> retries{0};
  CallOptions retrying;
  retrying.on_retry = [&](const absl::Status& refusal, absl::Duration wait) {
    EXPECT_EQ(refusal.code(), absl::StatusCode::kResourceExhausted);
    EXPECT_GE(wait, absl::Seconds(1));    // the router's hint, jittered upwards
    if (++retries == 1) cancel.Cancel();  // room for the retry
  };
  decode_.hang_after_ = -1;
  auto result = client_->Generate(TextRequest("y", 3), retrying);
  caller.join();
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(retries.load(), 1);
}

// A worker whose server is gone is found dead by the poller within 2 s, with no request sent to it.
TEST_F(RouterServiceTest, AWorkerThatStopsAnsweringIsFoundDeadWithinTwoSeconds) {
  StartRouter(Options());
  ASSERT_TRUE(DecodeHealthy());
  const std::string address = decode_server_->address();
  decode_server_->Shutdown(absl::ZeroDuration());
  const absl::Time stopped = absl::Now();
  ASSERT_TRUE(Eventually([&] { return !DecodeHealthy(); }));
  EXPECT_LT(absl::Now() - stopped, absl::Seconds(2));
  bool logged_dead = false;
  for (const WorkerSnapshot& w : router_->service().registry().List()) {
    if (w.address == address) logged_dead = w.health == WorkerHealth::kDead;
  }
  EXPECT_TRUE(logged_dead);
}

TEST_F(RouterServiceTest, InvalidRequestsReachNoWorker) {
  StartRouter(Options());
  std::vector<v1::GenerateRequest> bad;
  bad.push_back(TextRequest("", 5));
  bad.push_back(TextRequest("\xC0\xAF", 5));  // refused by the client before it is sent
  bad.push_back(TokenRequest({1, 9999}, 5));
  bad.push_back(TokenRequest({1, 5}, 0));
  bad.push_back(TokenRequest({1, 5}, 255));
  bad.push_back(TokenRequest(std::vector<int>(256, 5), 1));
  v1::GenerateRequest sampling = TokenRequest({1, 5}, 5);
  sampling.mutable_sampling()->set_temperature(-2);
  bad.push_back(sampling);
  v1::GenerateRequest stop = TokenRequest({1, 5}, 5);
  stop.mutable_stop()->add_stop_strings("");
  bad.push_back(stop);
  v1::GenerateRequest stop_id = TokenRequest({1, 5}, 5);
  stop_id.mutable_stop()->add_stop_token_ids(-1);
  bad.push_back(stop_id);
  for (const v1::GenerateRequest& request : bad) {
    auto result = client_->Generate(request);
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument)
        << request.ShortDebugString() << " → " << result.status();
  }
  EXPECT_TRUE(prefill_.requests().empty());
  EXPECT_TRUE(decode_.requests().empty());
}

TEST_F(RouterServiceTest, NoWorkersGivesUnavailable) {
  RouterOptions options = Options();
  options.prefill_workers.clear();
  options.decode_workers.clear();
  StartRouter(options);
  auto result = client_->Generate(TextRequest("x", 5));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(result.status().message(), HasSubstr("no healthy decode worker"));
}

TEST_F(RouterServiceTest, UnreachableRouterIsUnavailableAtOnce) {
  // Find a port nobody listens on: bind one, then close it.
  std::string address;
  {
    FakePrefill unused;
    auto server = ServiceServer::Start("127.0.0.1:0", {&unused});
    ASSERT_TRUE(server.ok());
    address = (*server)->address();
  }
  auto client = Client::Create(address);
  ASSERT_TRUE(client.ok());
  const absl::Time start = absl::Now();
  auto result = (*client)->Generate(TextRequest("x", 5));
  EXPECT_EQ(result.status().code(), absl::StatusCode::kUnavailable) << result.status();
  EXPECT_LT(absl::Now() - start, kWait);
  EXPECT_EQ(Client::Create("").status().code(), absl::StatusCode::kInvalidArgument);
}

TEST_F(RouterServiceTest, RegisteredMonolithicWorker) {
  decode_.script_ = ByteTokenizer::Ids("ok");
  RouterOptions options = Options();
  options.prefill_workers.clear();
  options.decode_workers.clear();
  options.heartbeat_interval = absl::Seconds(1);  // nothing here sends periodic heartbeats
  StartRouter(options);
  auto stub = v1::Router::NewStub(MakeInternalChannel(router_->address(), ComponentRole::kRouter));
  {
    grpc::ClientContext context;
    v1::RegisterWorkerRequest request;
    request.set_role(v1::WORKER_ROLE_MONOLITHIC);
    request.set_address(decode_server_->address());
    v1::RegisterWorkerReply reply;
    ASSERT_TRUE(stub->RegisterWorker(&context, request, &reply).ok());
    EXPECT_DOUBLE_EQ(reply.heartbeat_interval_seconds(), 1.0);
  }
  {
    grpc::ClientContext context;
    v1::RegisterWorkerRequest request;
    request.set_role(v1::WORKER_ROLE_DECODE);  // no kvstore address
    request.set_address("127.0.0.1:1");
    v1::RegisterWorkerReply reply;
    EXPECT_EQ(stub->RegisterWorker(&context, request, &reply).error_code(),
              grpc::StatusCode::INVALID_ARGUMENT);
  }
  {
    grpc::ClientContext context;
    v1::HeartbeatRequest request;
    request.set_address(decode_server_->address());
    request.mutable_queue()->set_queued_tokens(42);
    v1::HeartbeatReply reply;
    ASSERT_TRUE(stub->Heartbeat(&context, request, &reply).ok());
    EXPECT_TRUE(reply.known());
  }
  {
    grpc::ClientContext context;
    v1::HeartbeatRequest request;
    request.set_address("127.0.0.1:2");
    v1::HeartbeatReply reply;
    ASSERT_TRUE(stub->Heartbeat(&context, request, &reply).ok());
    EXPECT_FALSE(reply.known());
  }
  auto list = client_->ListWorkers();
  ASSERT_TRUE(list.ok());
  ASSERT_EQ(list->workers_size(), 1);
  EXPECT_EQ(list->workers(0).role(), v1::WORKER_ROLE_MONOLITHIC);
  EXPECT_EQ(list->workers(0).queue().queued_tokens(), 42);
  EXPECT_TRUE(list->workers(0).healthy());

  auto result = client_->Generate(TokenRequest({1, 7, 8}, 10));
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_EQ(result->text, "ok");
  EXPECT_DOUBLE_EQ(result->final.timings().prefill_seconds(), 0.05);
  auto decodes = decode_.requests();
  ASSERT_EQ(decodes.size(), 1u);
  EXPECT_FALSE(decodes[0].has_manifest());
  EXPECT_THAT(decodes[0].prompt(), ElementsAreArray({1, 7, 8}));
  EXPECT_TRUE(prefill_.requests().empty());
}

TEST(RouterOptionsTest, Validate) {
  RouterOptions o;
  EXPECT_EQ(RouterService::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o.tokenizer = std::make_shared<ByteTokenizer>();
  o.max_context = 64;
  o.vocab_size = ByteTokenizer::kVocab;
  o.policy = "fastest";
  auto bad = RouterService::Create(o);
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(bad.status().message(), HasSubstr("unknown scheduling policy"));
  o.policy = "round-robin";
  EXPECT_TRUE(RouterService::Create(o).ok());
}

}  // namespace
}  // namespace pdserve
