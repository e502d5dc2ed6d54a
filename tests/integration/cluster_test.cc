// The disaggregated cluster end to end: real `pdserve up` processes (router, KV store, prefill and
// decode workers) on loopback, driven through the client SDK and checked against in-process
// Generate on the same model and settings (stories260K).
//
//  - GreedyEquivalence*: greedy output through the system equals in-process Generate — plain
//    model, the default compression profile, and --monolithic.
//  - DefaultProfileCluster (one cluster for the suite, --lease-seconds 3): 64 concurrent streams,
//    cancelling half of 32 streams mid-stream, bad input, health.
//  - KvAwareRoutingTest: a KV store per decode worker; a conversation's turns follow its history.
//  - ShortLeaseTest: a prefill queue longer than the KV store's lease loses no pages.
//  - DecodeWorkerDeathTest: SIGKILL a decode worker with streams in flight.
//
// No fixed sleeps: every wait polls a condition (GetPoolUsage, ListWorkers, stream progress) under
// a deadline.
#include "tests/integration/cluster.h"

#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/pdserve_client.h"
#include "core/compress/profile.h"
#include "core/engine/generator.h"
#include "core/engine/llama_engine.h"
#include "core/formats/model_loader.h"
#include "core/tokenizer/text_stream.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace pdserve::integration {
namespace {

using grpc::health::v1::HealthCheckResponse;

// The default technique profile (`pdserve up` flags and the in-process equivalent).
const std::vector<std::string> kDefaultProfileFlags = {"--swiftkv-layer=4", "--fp8=per-token",
                                                       "--kcache-topn=32"};
constexpr double kLeaseSeconds = 3;
constexpr absl::Duration kCallTimeout = absl::Seconds(60);

CompressionProfile DefaultProfile() {
  CompressionProfile profile;
  profile.swiftkv_layer = 4;
  profile.fp8 = KvScaleMode::kPerTokenHead;
  profile.kcache.top_n = 32;
  return profile;
}

std::vector<std::string> Concat(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Polls `condition` every `interval` until it holds or `timeout` passes; returns its last value.
bool WaitUntil(absl::Duration timeout, const std::function<bool()>& condition,
               absl::Duration interval = absl::Milliseconds(50)) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    if (condition()) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(interval);
  }
}

// No request holds a page: every slot is free or holds an unpinned prefix-cache page.
bool PoolIdle(const v1::PoolUsage& usage) {
  return usage.free_slots() + usage.cached_slots() == usage.total_slots() &&
         usage.allocations() == 0 && usage.allocated_slots() == 0 && usage.sealed_slots() == 0;
}

std::string Describe(const absl::StatusOr<v1::PoolUsage>& usage) {
  return usage.ok() ? usage->ShortDebugString() : usage.status().ToString();
}

// Waits until the KV store's pool is back to its idle state; returns the last usage seen.
absl::StatusOr<v1::PoolUsage> WaitForIdlePool(const Cluster& cluster, absl::Duration timeout) {
  absl::StatusOr<v1::PoolUsage> usage;
  WaitUntil(timeout, [&] {
    usage = cluster.PoolUsage();
    return usage.ok() && PoolIdle(*usage);
  });
  return usage;
}

// What in-process Generate produces for one request.
struct Expected {
  std::vector<int> tokens;
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
};

// In-process Generate on the same model and settings as the workers.
class Reference {
 public:
  static std::unique_ptr<Reference> Create(const CompressionProfile& profile) {
    std::unique_ptr<Reference> reference(new Reference());
    absl::StatusOr<LoadedModel> model = LoadModel(ModelPath(), TokenizerPath());
    if (!model.ok()) {
      ADD_FAILURE() << model.status();
      return nullptr;
    }
    reference->model_ = *std::move(model);
    absl::StatusOr<PreparedModel> prepared =
        PrepareModel(reference->model_.weights, profile, /*calibration=*/nullptr);
    if (!prepared.ok()) {
      ADD_FAILURE() << prepared.status();
      return nullptr;
    }
    reference->prepared_ = *std::move(prepared);
    EngineOptions options;
    options.num_threads = 1;
    options.max_sequences = 1;
    options.max_context = reference->model_.weights.config.max_seq_len;
    options.max_batch_tokens = std::min(512, options.max_context);
    options.compression = reference->prepared_.compression;
    absl::StatusOr<std::unique_ptr<LlamaEngine>> engine =
        LlamaEngine::Create(reference->prepared_.weights, options);
    if (!engine.ok()) {
      ADD_FAILURE() << engine.status();
      return nullptr;
    }
    reference->engine_ = *std::move(engine);
    return reference;
  }

  const Tokenizer& tokenizer() const { return *model_.tokenizer; }
  int context() const { return model_.weights.config.max_seq_len; }
  std::vector<int> Encode(const std::string& text) const {
    return model_.tokenizer->Encode(text, /*add_bos=*/true);
  }

  // The router's stop ids: the request's, plus EOS and BOS unless ignore_eos.
  Expected Run(const std::vector<int>& prompt, const v1::GenerateRequest& request) {
    GenerationParams params;
    params.max_tokens = request.max_tokens();
    params.stop_ids.assign(request.stop().stop_token_ids().begin(),
                           request.stop().stop_token_ids().end());
    if (!request.stop().ignore_eos()) {
      params.stop_ids.push_back(tokenizer().eos_id());
      params.stop_ids.push_back(tokenizer().bos_id());
    }
    const std::vector<int32_t> ids(prompt.begin(), prompt.end());
    absl::StatusOr<GenerationResult> result;
    {
      absl::MutexLock lock(&mu_);
      result = Generate(*engine_, ids, params, [](int32_t) {});
    }
    Expected expected;
    if (!result.ok()) {
      ADD_FAILURE() << "in-process Generate: " << result.status();
      return expected;
    }
    expected.tokens.assign(result->tokens.begin(), result->tokens.end());
    TextStream stream(tokenizer(), prompt.back());
    for (int id : expected.tokens) expected.text += stream.Push(id);
    expected.text += stream.Flush();
    const bool stopped =
        !expected.tokens.empty() && std::find(params.stop_ids.begin(), params.stop_ids.end(),
                                              expected.tokens.back()) != params.stop_ids.end();
    expected.finish = stopped ? v1::FINISH_REASON_STOP_TOKEN : v1::FINISH_REASON_LENGTH;
    return expected;
  }

 private:
  Reference() = default;
  LoadedModel model_;
  PreparedModel prepared_;
  std::unique_ptr<LlamaEngine> engine_;
  absl::Mutex mu_;
};

// One streamed call, recorded.
struct StreamOutcome {
  absl::Status status;
  std::vector<int> tokens;
  std::string text;
  v1::GenerateResponse::Final final;
  bool indexes_in_order = true;
  absl::Time ended;
};

StreamOutcome RunStream(Client& client, const v1::GenerateRequest& request,
                        const CallOptions& options,
                        const std::function<void(int tokens_so_far)>& after_token = {}) {
  StreamOutcome outcome;
  absl::StatusOr<v1::GenerateResponse::Final> final =
      client.GenerateStream(request, options, [&](const v1::GenerateResponse::Token& token) {
        if (token.id() >= 0) {
          if (token.index() != static_cast<int>(outcome.tokens.size())) {
            outcome.indexes_in_order = false;
          }
          outcome.tokens.push_back(token.id());
        }
        outcome.text += token.text();
        if (after_token && token.id() >= 0) after_token(static_cast<int>(outcome.tokens.size()));
      });
  outcome.ended = absl::Now();
  outcome.status = final.status();
  if (final.ok()) outcome.final = *std::move(final);
  return outcome;
}

CallOptions WithTimeout(absl::Duration timeout) {
  CallOptions options;
  options.timeout = timeout;
  return options;
}

std::unique_ptr<Client> MakeClient(const Cluster& cluster) {
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(cluster.router_address());
  EXPECT_TRUE(client.ok()) << client.status();
  return client.ok() ? *std::move(client) : nullptr;
}

std::string ReadEvalText() {
  std::ifstream in(EvalTextPath(), std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// A prompt of `length` tokens: BOS, then consecutive tokens of the evaluation text from `start`.
std::vector<int> EvalPrompt(const Reference& reference, const std::vector<int>& corpus,
                            size_t start, int length) {
  std::vector<int> prompt = {reference.tokenizer().bos_id()};
  start %= corpus.size() - length;
  prompt.insert(prompt.end(), corpus.begin() + start, corpus.begin() + start + length - 1);
  return prompt;
}

// Greedy text prompts through the cluster equal in-process Generate: ids, text, finish reason and
// usage. The router stops at EOS and BOS, as `pdserve generate` does.
void ExpectGreedyMatchesInProcess(const Cluster& cluster, Reference& reference) {
  const std::vector<std::string> prompts = {
      "Once upon a time",
      "Lily and Ben went to the park. They",
      "The cat",
      "One day, a little girl named Sue found a big red ball in the garden. She wanted to",
      "Tom was sad because",
  };
  std::unique_ptr<Client> client = MakeClient(cluster);
  ASSERT_NE(client, nullptr);
  for (const std::string& prompt : prompts) {
    for (const bool stop_at_bos : {false, true}) {
      SCOPED_TRACE(absl::StrCat("prompt '", prompt, "'", stop_at_bos ? ", stop at BOS" : ""));
      v1::GenerateRequest request = TextRequest(prompt, 80);
      if (stop_at_bos) request.mutable_stop()->add_stop_token_ids(reference.tokenizer().bos_id());
      const std::vector<int> ids = reference.Encode(prompt);
      const Expected expected = reference.Run(ids, request);
      absl::StatusOr<GenerateResult> result = client->Generate(request, WithTimeout(kCallTimeout));
      ASSERT_TRUE(result.ok()) << result.status() << "\n" << cluster.LogTail();
      EXPECT_EQ(result->token_ids, expected.tokens);
      EXPECT_EQ(result->text, expected.text);
      EXPECT_EQ(result->final.finish_reason(), expected.finish);
      EXPECT_EQ(result->final.prompt_tokens(), static_cast<int>(ids.size()));
      EXPECT_EQ(result->final.completion_tokens(), static_cast<int>(result->token_ids.size()));
    }
  }
}

// The prefix cache: a prompt sent again, one that extends it and one that shares only its first
// pages reuse the whole pages the KV store holds (the timings say how many tokens, when
// `cache_on`), and every answer equals in-process Generate's: the answer without the cache.
// `offset` picks corpus text no other test of the cluster sends.
void ExpectPrefixReuseKeepsAnswers(const Cluster& cluster, Reference& reference, bool cache_on,
                                   size_t offset) {
  constexpr int kPage = 16;  // the workers' kv_page_size
  const std::vector<int> corpus = reference.tokenizer().Encode(ReadEvalText(), false);
  ASSERT_GT(corpus.size(), offset + 300);
  const auto text = [&](size_t from, size_t count) {
    return std::vector<int>(corpus.begin() + from, corpus.begin() + from + count);
  };
  std::vector<int> base = {reference.tokenizer().bos_id()};
  for (int id : text(offset, 99)) base.push_back(id);  // 100 tokens: 6 whole pages before the last
  std::vector<int> extended = base;
  for (int id : text(offset + 99, 60)) extended.push_back(id);
  std::vector<int> diverging(base.begin(), base.begin() + 40);  // 2 whole pages in common
  for (int id : text(offset + 200, 60)) diverging.push_back(id);
  struct Case {
    const char* name;
    std::vector<int> prompt;
    int cached;  // tokens the prefix cache must give
  };
  const Case cases[] = {{"first", base, 0},
                        {"again", base, 6 * kPage},
                        {"extended", extended, 6 * kPage},  // the base's pages, not its tail
                        {"diverging", diverging, 2 * kPage}};
  std::unique_ptr<Client> client = MakeClient(cluster);
  ASSERT_NE(client, nullptr);
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat(c.name, ": ", c.prompt.size(), " prompt tokens"));
    v1::GenerateRequest request = TokenRequest(c.prompt, 24);
    request.mutable_stop()->set_ignore_eos(true);
    const Expected expected = reference.Run(c.prompt, request);
    absl::StatusOr<GenerateResult> result = client->Generate(request, WithTimeout(kCallTimeout));
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << cluster.LogTail();
    EXPECT_EQ(result->token_ids, expected.tokens);
    EXPECT_EQ(result->final.timings().cached_prompt_tokens(), cache_on ? c.cached : 0);
  }
}

// A multi-turn conversation: each turn's prompt is the whole history (every earlier prompt and
// answer) plus a new user message. Every answer equals in-process Generate's on the same history
// (the answer without the cache); with `cache_on` each turn reuses at least the whole pages of the
// previous turn's prompt (the pages of generated tokens are decode's and not published), without
// it none. `offset` picks corpus text no other test of the cluster sends.
void ExpectMultiTurnKeepsAnswers(const Cluster& cluster, Reference& reference, bool cache_on,
                                 size_t offset) {
  constexpr int kPage = 16;  // the workers' kv_page_size
  const std::vector<int> corpus = reference.tokenizer().Encode(ReadEvalText(), false);
  ASSERT_GT(corpus.size(), offset + 400);
  std::unique_ptr<Client> client = MakeClient(cluster);
  ASSERT_NE(client, nullptr);
  std::vector<int> history = {reference.tokenizer().bos_id()};
  size_t previous_prompt = 0;
  for (int turn = 0; turn < 4; ++turn) {
    SCOPED_TRACE(absl::StrCat("turn ", turn));
    const size_t message = offset + static_cast<size_t>(turn) * 100;  // the user's new message
    history.insert(history.end(), corpus.begin() + message, corpus.begin() + message + 37);
    v1::GenerateRequest request = TokenRequest(history, 20);
    request.mutable_stop()->set_ignore_eos(true);
    const Expected expected = reference.Run(history, request);
    absl::StatusOr<GenerateResult> result = client->Generate(request, WithTimeout(kCallTimeout));
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << cluster.LogTail();
    EXPECT_EQ(result->token_ids, expected.tokens);
    const int cached = result->final.timings().cached_prompt_tokens();
    if (cache_on) {
      EXPECT_GE(cached, static_cast<int>(previous_prompt) / kPage * kPage);
    } else {
      EXPECT_EQ(cached, 0);
    }
    previous_prompt = history.size();
    history.insert(history.end(), result->token_ids.begin(), result->token_ids.end());
  }
}

// ---------------------------------------------------------------------------------------------
// The harness itself: a cluster that cannot start fails with its log; stopping one leaves no
// process behind.

TEST(ClusterHarnessTest, StartFailsLoudlyWithTheLogTail) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster =
      Cluster::Start({"--swiftkv-layer=99"}, absl::Seconds(60));
  ASSERT_FALSE(cluster.ok());
  EXPECT_EQ(cluster.status().code(), absl::StatusCode::kUnavailable);
  // What the workers and `up` wrote on stderr, not only the command line.
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "layer 99 is outside"))
      << cluster.status();
  // Only "prefill-0": `up` races the child's exit and sometimes says "prefill-0 did not become
  // ready in time" 0.2 s in, though it exited with code 1 (tools/process_group.cc, Start: the
  // stdout EOF comes before the child can be reaped with WNOHANG).
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "prefill-0")) << cluster.status();
}

TEST(ClusterHarnessTest, StoppingLeavesNoProcessBehind) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({"--decode-workers=2"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::vector<pid_t> pids = {(*cluster)->up_pid()};
  for (const Cluster::Process& process : (*cluster)->processes()) pids.push_back(process.pid);
  EXPECT_EQ(pids.size(), 6u);  // up, router, kvstore, prefill-0, decode-0, decode-1
  for (pid_t pid : pids) EXPECT_TRUE(ProcessIsRunning(pid)) << pid;
  cluster->reset();
  // `up` is reaped by the destructor; its children were stopped before it exited.
  for (pid_t pid : pids) EXPECT_FALSE(ProcessIsRunning(pid)) << pid;
}

// `up`'s own throwaway CA (no --tls-dir): once every process serves, its private keys are gone from
// disk — an `up` killed before its cleanup leaves certificates only — and the directory goes when
// `up` exits.
TEST(ClusterHarnessTest, AThrowawayCaKeepsNoPrivateKeyOnDiskOnceServing) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({"--insecure=false"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  ASSERT_FALSE((*cluster)->announced_ca().empty());
  const std::filesystem::path dir = std::filesystem::path((*cluster)->announced_ca()).parent_path();
  std::vector<std::string> files;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    files.push_back(entry.path().filename().string());
  }
  EXPECT_THAT(files, ::testing::Contains("ca.pem"));
  EXPECT_THAT(files, ::testing::Contains("router.pem"));
  EXPECT_THAT(files, ::testing::Not(::testing::Contains(::testing::HasSubstr("-key.pem"))));
  cluster->reset();
  EXPECT_FALSE(std::filesystem::exists(dir));
}

TEST(ClusterHarnessTest, EachRoleRunsItsOwnThreadCount) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster =
      Cluster::Start({"--threads=1", "--prefill-threads=2"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string log = (*cluster)->LogTail(64 << 10);
  EXPECT_TRUE(absl::StrContains(log, "[prefill] [info] engine: 2 threads,")) << log;
  EXPECT_TRUE(absl::StrContains(log, "[decode] [info] engine: 1 thread,")) << log;
}

TEST(ClusterHarnessTest, ThreadCountsBelowMinusOneAreRefused) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({"--decode-threads=-2"});
  ASSERT_FALSE(cluster.ok());
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "--decode-threads must be"))
      << cluster.status();
}

// ---------------------------------------------------------------------------------------------
// 1. Greedy equivalence: plain model and --monolithic, each on its own cluster.

TEST(GreedyEquivalenceTest, PlainModelMatchesInProcessGenerate) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<Reference> reference = Reference::Create(CompressionProfile());
  ASSERT_NE(reference, nullptr);
  ExpectGreedyMatchesInProcess(**cluster, *reference);
  ExpectPrefixReuseKeepsAnswers(**cluster, *reference, /*cache_on=*/true, /*offset=*/0);
  ExpectMultiTurnKeepsAnswers(**cluster, *reference, /*cache_on=*/true, /*offset=*/30000);
}

// The same prompts and conversation as above with the cache off: the same answers (both equal
// in-process Generate's), every prompt computed whole.
TEST(GreedyEquivalenceTest, PrefixCacheOffComputesEveryPrompt) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({"--prefix-cache=false"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  std::unique_ptr<Reference> reference = Reference::Create(CompressionProfile());
  ASSERT_NE(reference, nullptr);
  ExpectPrefixReuseKeepsAnswers(**cluster, *reference, /*cache_on=*/false, /*offset=*/0);
  ExpectMultiTurnKeepsAnswers(**cluster, *reference, /*cache_on=*/false, /*offset=*/30000);
}

// A KV store per decode worker, as on two nodes: each store's prefix cache holds only what was
// prefilled into it, so a conversation's turns hit only where its history went. kv-aware routing
// sends every turn after the first to that store (least-tokens alternates between the two idle
// decode workers, and every other turn would miss).
TEST(KvAwareRoutingTest, AConversationFollowsItsHistoryToItsKvStore) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster =
      Cluster::Start({"--decode-workers=2", "--kvstores=2", "--policy=kv-aware"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_NE((*cluster)->Find("kvstore-0"), nullptr);
  EXPECT_NE((*cluster)->Find("kvstore-1"), nullptr);
  std::unique_ptr<Reference> reference = Reference::Create(CompressionProfile());
  ASSERT_NE(reference, nullptr);
  ExpectMultiTurnKeepsAnswers(**cluster, *reference, /*cache_on=*/true, /*offset=*/30000);
  ExpectMultiTurnKeepsAnswers(**cluster, *reference, /*cache_on=*/true, /*offset=*/31000);
}

TEST(KvAwareRoutingTest, MoreKvStoresThanDecodeWorkersAreRefused) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({"--kvstores=2"});
  ASSERT_FALSE(cluster.ok());
  EXPECT_TRUE(absl::StrContains(cluster.status().message(), "--kvstores 2 must be in [1"))
      << cluster.status();
}

TEST(GreedyEquivalenceTest, MonolithicMatchesInProcessGenerate) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start({"--monolithic"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_NE((*cluster)->Find("monolithic-0"), nullptr);
  EXPECT_EQ((*cluster)->Find("kvstore"), nullptr);
  // --monolithic runs the plain model.
  std::unique_ptr<Reference> reference = Reference::Create(CompressionProfile());
  ASSERT_NE(reference, nullptr);
  ExpectGreedyMatchesInProcess(**cluster, *reference);
}

// Token retention (KVCrush) across processes, on top of the default profile: the prefill worker
// keeps a quarter of each prompt (its pages list the kept tokens' positions, the manifest the
// prompt's length) and the decode worker continues exactly as in-process Generate does with the
// same settings. The answers differ from the default profile's alone (retention is really on).
TEST(TokenRetentionClusterTest, KvCrushMatchesInProcessGenerate) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster =
      Cluster::Start(Concat(kDefaultProfileFlags, {"--kvcrush-budget=25%"}));
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  CompressionProfile profile = DefaultProfile();
  profile.retention.fraction = 0.25;
  std::unique_ptr<Reference> reference = Reference::Create(profile);
  std::unique_ptr<Reference> without = Reference::Create(DefaultProfile());
  ASSERT_NE(reference, nullptr);
  ASSERT_NE(without, nullptr);
  std::unique_ptr<Client> client = MakeClient(**cluster);
  ASSERT_NE(client, nullptr);
  const std::vector<int> corpus = reference->tokenizer().Encode(ReadEvalText(), false);
  int differs = 0;
  for (const int length : {300, 201, 130, 64, 17}) {
    SCOPED_TRACE(absl::StrCat(length, " prompt tokens"));
    const std::vector<int> prompt = EvalPrompt(*reference, corpus, 7919 * length, length);
    v1::GenerateRequest request = TokenRequest(prompt, 40);
    request.mutable_stop()->set_ignore_eos(true);
    const Expected expected = reference->Run(prompt, request);
    absl::StatusOr<GenerateResult> result = client->Generate(request, WithTimeout(kCallTimeout));
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << (*cluster)->LogTail();
    EXPECT_EQ(result->token_ids, expected.tokens);
    EXPECT_EQ(result->final.prompt_tokens(), length);
    differs += without->Run(prompt, request).tokens != expected.tokens;
  }
  EXPECT_GT(differs, 0);
}

// Decode-time eviction on the decode worker (no KCache: its V would live in the KV store): prompts
// kept to a quarter, then generations of 60 tokens held within 48 + a page, as in-process.
TEST(TokenRetentionClusterTest, DecodeEvictionMatchesInProcessGenerate) {
  absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(
      {"--swiftkv-layer=4", "--fp8=per-token", "--kvcrush-budget=25%", "--kvcrush-max-tokens=48"});
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  CompressionProfile profile;
  profile.swiftkv_layer = 4;
  profile.fp8 = KvScaleMode::kPerTokenHead;
  profile.retention.fraction = 0.25;
  profile.retention.max_tokens = 48;
  std::unique_ptr<Reference> reference = Reference::Create(profile);
  ASSERT_NE(reference, nullptr);
  CompressionProfile no_eviction = profile;
  no_eviction.retention.max_tokens = 0;
  std::unique_ptr<Reference> without = Reference::Create(no_eviction);
  ASSERT_NE(without, nullptr);
  int differs = 0;
  std::unique_ptr<Client> client = MakeClient(**cluster);
  ASSERT_NE(client, nullptr);
  const std::vector<int> corpus = reference->tokenizer().Encode(ReadEvalText(), false);
  for (const int length : {300, 90, 20}) {
    SCOPED_TRACE(absl::StrCat(length, " prompt tokens"));
    const std::vector<int> prompt = EvalPrompt(*reference, corpus, 6007 * length, length);
    v1::GenerateRequest request = TokenRequest(prompt, 60);
    request.mutable_stop()->set_ignore_eos(true);
    const Expected expected = reference->Run(prompt, request);
    absl::StatusOr<GenerateResult> result = client->Generate(request, WithTimeout(kCallTimeout));
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << (*cluster)->LogTail();
    EXPECT_EQ(result->token_ids, expected.tokens);
    differs += without->Run(prompt, request).tokens != expected.tokens;
  }
  EXPECT_GT(differs, 0);  // eviction really ran
}

// ---------------------------------------------------------------------------------------------
// One disaggregated cluster with the default profile and a 3 s lease for the rest of the suite.

class DefaultProfileCluster : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<std::unique_ptr<Cluster>> cluster = Cluster::Start(
        Concat(kDefaultProfileFlags, {absl::StrCat("--lease-seconds=", kLeaseSeconds)}));
    if (!cluster.ok()) {
      start_error_ = new std::string(cluster.status().ToString());
      return;
    }
    cluster_ = cluster->release();
    reference_ = Reference::Create(DefaultProfile()).release();
  }
  static void TearDownTestSuite() {
    delete cluster_;
    cluster_ = nullptr;
    delete reference_;
    reference_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
    ASSERT_NE(cluster_, nullptr);
    ASSERT_NE(reference_, nullptr);
    client_ = MakeClient(*cluster_);
    ASSERT_NE(client_, nullptr);
  }

  static Cluster* cluster_;
  static Reference* reference_;
  static std::string* start_error_;
  std::unique_ptr<Client> client_;
};

Cluster* DefaultProfileCluster::cluster_ = nullptr;
Reference* DefaultProfileCluster::reference_ = nullptr;
std::string* DefaultProfileCluster::start_error_ = nullptr;

// The prefix cache under the default profile (SwiftKV, FP8, KCache): cached pages are read into
// the prefill engine, the rest computed, and decode reads cached and new pages alike.
TEST_F(DefaultProfileCluster, PrefixReuseKeepsAnswers) {
  ExpectPrefixReuseKeepsAnswers(*cluster_, *reference_, /*cache_on=*/true, /*offset=*/20000);
}

TEST_F(DefaultProfileCluster, MultiTurnConversationKeepsAnswers) {
  ExpectMultiTurnKeepsAnswers(*cluster_, *reference_, /*cache_on=*/true, /*offset=*/30000);
}

// 6. Health: every process answers grpc.health.v1 Check with SERVING; the router lists its
// workers as healthy.
TEST_F(DefaultProfileCluster, EveryProcessIsServing) {
  for (const char* name : {"router", "kvstore", "prefill-0", "decode-0"}) {
    EXPECT_NE(cluster_->Find(name), nullptr) << name << " missing from the table of `up`";
  }
  for (const Cluster::Process& process : cluster_->processes()) {
    absl::StatusOr<HealthCheckResponse::ServingStatus> status = cluster_->Health(process.address);
    ASSERT_TRUE(status.ok()) << process.name << ": " << status.status();
    EXPECT_EQ(*status, HealthCheckResponse::SERVING) << process.name;
  }
  absl::StatusOr<v1::ListWorkersReply> workers =
      client_->ListWorkers(WithTimeout(absl::Seconds(5)));
  ASSERT_TRUE(workers.ok()) << workers.status();
  for (const char* name : {"prefill-0", "decode-0"}) {
    const Cluster::Process* process = cluster_->Find(name);
    ASSERT_NE(process, nullptr);
    bool healthy = false;
    for (const v1::WorkerInfo& worker : workers->workers()) {
      healthy = healthy || (worker.address() == process->address && worker.healthy());
    }
    EXPECT_TRUE(healthy) << name << " " << process->address << " not healthy in "
                         << workers->ShortDebugString();
  }
}

// 1b. The default compression profile.
TEST_F(DefaultProfileCluster, GreedyMatchesInProcessGenerate) {
  ExpectGreedyMatchesInProcess(*cluster_, *reference_);
}

// 2. 64 concurrent streams on one shared Client, prompts of 5..300 tokens, mixed max_tokens and
// stop conditions: each equals in-process Generate and ends with the right finish reason.
TEST_F(DefaultProfileCluster, SixtyFourConcurrentStreamsMatchInProcessGenerate) {
  constexpr int kStreams = 64;
  const std::vector<int> corpus = reference_->tokenizer().Encode(ReadEvalText(), false);
  ASSERT_GT(corpus.size(), 1000u);
  std::vector<v1::GenerateRequest> requests;
  std::vector<Expected> expected;
  int prompt_tokens = 0;
  for (int i = 0; i < kStreams; ++i) {
    const int length = i == 0 ? 5 : i == 1 ? 300 : 5 + (i * 53) % 296;
    const std::vector<int> prompt = EvalPrompt(*reference_, corpus, i * 2099u, length);
    v1::GenerateRequest request = TokenRequest(prompt, 1 + (i * 29) % 120);
    if (i % 3 == 0) request.mutable_stop()->set_ignore_eos(true);
    if (i % 5 == 1) request.mutable_stop()->add_stop_token_ids(reference_->tokenizer().bos_id());
    request.set_request_id(absl::StrCat("concurrent-", i));
    expected.push_back(reference_->Run(prompt, request));
    requests.push_back(std::move(request));
    prompt_tokens += length;
  }

  std::vector<StreamOutcome> outcomes(kStreams);
  std::atomic<int> overloaded{0};
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      // Overload is answered early with RESOURCE_EXHAUSTED before anything runs: retry then.
      const absl::Time deadline = absl::Now() + absl::Seconds(90);
      do {
        outcomes[i] = RunStream(*client_, requests[i], WithTimeout(kCallTimeout));
        if (outcomes[i].status.code() != absl::StatusCode::kResourceExhausted) break;
        ++overloaded;
        absl::SleepFor(absl::Milliseconds(50));
      } while (absl::Now() < deadline);
    });
  }
  for (std::thread& thread : threads) thread.join();
  const absl::Duration elapsed = absl::Now() - start;
  RecordProperty("prompt_tokens", prompt_tokens);
  RecordProperty("seconds", absl::StrCat(absl::ToDoubleSeconds(elapsed)));
  RecordProperty("resource_exhausted_retries", overloaded.load());

  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i, ": ", requests[i].token_ids().ids_size(),
                              " prompt tokens, max_tokens ", requests[i].max_tokens(),
                              requests[i].stop().ShortDebugString()));
    ASSERT_TRUE(outcomes[i].status.ok()) << outcomes[i].status << "\n" << cluster_->LogTail();
    EXPECT_EQ(outcomes[i].tokens, expected[i].tokens);
    EXPECT_EQ(outcomes[i].text, expected[i].text);
    EXPECT_TRUE(outcomes[i].indexes_in_order);
    EXPECT_EQ(outcomes[i].final.finish_reason(), expected[i].finish);
    EXPECT_EQ(outcomes[i].final.completion_tokens(), static_cast<int>(expected[i].tokens.size()));
    EXPECT_EQ(outcomes[i].final.prompt_tokens(), requests[i].token_ids().ids_size());
  }
  const absl::StatusOr<v1::PoolUsage> usage =
      WaitForIdlePool(*cluster_, absl::Seconds(kLeaseSeconds + 2));
  EXPECT_TRUE(usage.ok() && PoolIdle(*usage)) << Describe(usage);
}

// 3. Cancel half of 32 concurrent streams after each got a few tokens: they end CANCELLED, the
// others complete correctly, and the pool returns to idle within one lease period.
TEST_F(DefaultProfileCluster, CancellingHalfTheStreamsReleasesTheirPages) {
  constexpr int kStreams = 32;
  constexpr int kCancelAfter = 3;
  const absl::StatusOr<v1::PoolUsage> baseline =
      WaitForIdlePool(*cluster_, absl::Seconds(kLeaseSeconds + 2));
  ASSERT_TRUE(baseline.ok() && PoolIdle(*baseline)) << Describe(baseline);

  const std::vector<int> corpus = reference_->tokenizer().Encode(ReadEvalText(), false);
  std::vector<v1::GenerateRequest> requests;
  std::vector<Expected> expected(kStreams);
  for (int i = 0; i < kStreams; ++i) {
    const int length = 20 + (i * 41) % 180;
    const std::vector<int> prompt = EvalPrompt(*reference_, corpus, 7 + i * 3181u, length);
    v1::GenerateRequest request =
        TokenRequest(prompt, std::min(160, reference_->context() - length));
    request.mutable_stop()->set_ignore_eos(true);  // long streams: cancelled mid-way
    request.set_request_id(absl::StrCat("cancel-", i));
    if (i % 2 == 1) expected[i] = reference_->Run(prompt, request);
    requests.push_back(std::move(request));
  }

  std::vector<StreamOutcome> outcomes(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      CallOptions options = WithTimeout(kCallTimeout);
      CancellationToken token;
      if (i % 2 == 0) options.cancellation = token;
      outcomes[i] = RunStream(*client_, requests[i], options, [&](int tokens) {
        if (i % 2 == 0 && tokens == kCancelAfter) token.Cancel();
      });
    });
  }
  for (std::thread& thread : threads) thread.join();
  const absl::Time ended = absl::Now();

  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    if (i % 2 == 0) {
      EXPECT_EQ(outcomes[i].status.code(), absl::StatusCode::kCancelled) << outcomes[i].status;
      EXPECT_GE(outcomes[i].tokens.size(), static_cast<size_t>(kCancelAfter));
      EXPECT_LT(outcomes[i].tokens.size(), static_cast<size_t>(requests[i].max_tokens()));
    } else {
      ASSERT_TRUE(outcomes[i].status.ok()) << outcomes[i].status << "\n" << cluster_->LogTail();
      EXPECT_EQ(outcomes[i].tokens, expected[i].tokens);
      EXPECT_EQ(outcomes[i].final.finish_reason(), v1::FINISH_REASON_LENGTH);
    }
  }
  const absl::StatusOr<v1::PoolUsage> usage =
      WaitForIdlePool(*cluster_, absl::Seconds(kLeaseSeconds + 1.5));
  RecordProperty("seconds_to_idle_pool", absl::StrCat(absl::ToDoubleSeconds(absl::Now() - ended)));
  ASSERT_TRUE(usage.ok() && PoolIdle(*usage))
      << "not idle " << kLeaseSeconds + 1.5 << " s after the streams ended: " << Describe(usage)
      << "\nbaseline " << Describe(baseline);
  EXPECT_EQ(usage->total_slots(), baseline->total_slots());
  EXPECT_GE(usage->releases_total() + usage->lease_expiries_total(),
            baseline->releases_total() + baseline->lease_expiries_total() + kStreams / 2)
      << "every completed request's allocation ends in a release or an expiry";
  // DESIGN §6: explicit release on every path, cancellation included; expiry is the backstop.
  EXPECT_EQ(usage->lease_expiries_total(), baseline->lease_expiries_total())
      << "pages of cancelled requests were reclaimed by lease expiry, not released";
}

// 5. Bad input: INVALID_ARGUMENT naming the offending field, and nothing allocated in the KV store.
TEST_F(DefaultProfileCluster, BadInputIsInvalidArgumentAndAllocatesNothing) {
  const absl::StatusOr<v1::PoolUsage> baseline =
      WaitForIdlePool(*cluster_, absl::Seconds(kLeaseSeconds + 2));
  ASSERT_TRUE(baseline.ok() && PoolIdle(*baseline)) << Describe(baseline);
  const int context = reference_->context();
  const std::vector<int> prompt = reference_->Encode("Once upon a time");
  const int room = context - static_cast<int>(prompt.size());

  struct Case {
    std::string name;
    v1::GenerateRequest request;
    std::string mentions;  // the message names the offending field
  };
  std::vector<Case> cases;
  cases.push_back({"empty text prompt", TextRequest("", 8), "text"});
  cases.push_back({"empty token list", TokenRequest({}, 8), "token_ids"});
  cases.push_back({"no prompt at all", v1::GenerateRequest(), "prompt"});
  cases.back().request.set_max_tokens(8);
  cases.push_back({"invalid UTF-8 text", TextRequest("Once \xff\xfe upon", 8), "UTF-8"});
  cases.push_back({"prompt longer than the context",
                   TokenRequest(std::vector<int>(context + 10, 300), 1), "prompt"});
  cases.push_back(
      {"prompt filling the context", TokenRequest(std::vector<int>(context, 300), 1), "prompt"});
  std::string long_text;
  while (reference_->Encode(long_text).size() <= static_cast<size_t>(context)) {
    long_text += "The little dog ran to the big tree and barked at the bird. ";
  }
  cases.push_back({"text prompt longer than the context", TextRequest(long_text, 1), "prompt"});
  cases.push_back({"max_tokens 0", TextRequest("Once upon a time", 0), "max_tokens"});
  cases.push_back({"max_tokens -5", TextRequest("Once upon a time", -5), "max_tokens"});
  cases.push_back(
      {"max_tokens one past the context", TextRequest("Once upon a time", room + 1), "max_tokens"});
  cases.push_back(
      {"max_tokens beyond the context", TextRequest("Once upon a time", 100000), "max_tokens"});
  auto sampled = [](auto set) {
    v1::GenerateRequest request = TextRequest("Once upon a time", 8);
    set(*request.mutable_sampling());
    return request;
  };
  cases.push_back({"temperature -1", sampled([](v1::SamplingParams& s) { s.set_temperature(-1); }),
                   "temperature"});
  cases.push_back({"temperature NaN", sampled([](v1::SamplingParams& s) {
                     s.set_temperature(std::numeric_limits<float>::quiet_NaN());
                   }),
                   "temperature"});
  cases.push_back({"temperature inf", sampled([](v1::SamplingParams& s) {
                     s.set_temperature(std::numeric_limits<float>::infinity());
                   }),
                   "temperature"});
  cases.push_back({"top_p 2", sampled([](v1::SamplingParams& s) { s.set_top_p(2); }), "top_p"});
  cases.push_back(
      {"top_p -0.5", sampled([](v1::SamplingParams& s) { s.set_top_p(-0.5f); }), "top_p"});
  cases.push_back({"top_k -1", sampled([](v1::SamplingParams& s) { s.set_top_k(-1); }), "top_k"});
  cases.push_back({"token id -1", TokenRequest({1, 300, -1, 42}, 8), "token_ids"});
  cases.push_back({"token id 100000", TokenRequest({1, 100000}, 8), "token_ids"});
  cases.push_back({"token id = vocab size",
                   TokenRequest({1, reference_->tokenizer().vocab_size()}, 8), "token_ids"});
  v1::GenerateRequest bad_stop = TextRequest("Once upon a time", 8);
  bad_stop.mutable_stop()->add_stop_token_ids(-3);
  cases.push_back({"stop token id -3", bad_stop, "stop_token_ids"});

  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<GenerateResult> result =
        client_->Generate(c.request, WithTimeout(absl::Seconds(10)));
    ASSERT_FALSE(result.ok()) << "accepted; generated " << result->token_ids.size() << " tokens";
    EXPECT_EQ(result.status().code(), absl::StatusCode::kInvalidArgument) << result.status();
    EXPECT_TRUE(absl::StrContains(result.status().message(), c.mentions))
        << "message does not mention '" << c.mentions << "': " << result.status();
  }

  // The same invalid UTF-8 past the SDK's own check, through a raw Router stub (the bytes are
  // patched into an otherwise valid serialized request).
  {
    v1::GenerateRequest request = TextRequest("XXXX", 8);
    std::string bytes = request.SerializeAsString();
    const size_t at = bytes.find("XXXX");
    ASSERT_NE(at, std::string::npos);
    bytes.replace(at, 4, "\xff\xfe\xc3\x28");
    grpc::Slice slice(bytes);
    grpc::ByteBuffer buffer(&slice, 1);
    auto channel =
        grpc::CreateChannel(cluster_->router_address(), grpc::InsecureChannelCredentials());
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    std::unique_ptr<grpc::ClientReader<v1::GenerateResponse>> reader(
        grpc::internal::ClientReaderFactory<v1::GenerateResponse>::Create(
            channel.get(),
            grpc::internal::RpcMethod("/pdserve.v1.Router/Generate",
                                      grpc::internal::RpcMethod::SERVER_STREAMING),
            &context, buffer));
    v1::GenerateResponse response;
    int messages = 0;
    while (reader->Read(&response)) ++messages;
    const grpc::Status status = reader->Finish();
    EXPECT_EQ(messages, 0);
    EXPECT_FALSE(status.ok());
    // The prompt text is `bytes` on the wire, so the router's own validation answers.
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_THAT(status.error_message(), ::testing::HasSubstr("UTF-8"));
  }

  const absl::StatusOr<v1::PoolUsage> after = cluster_->PoolUsage();
  ASSERT_TRUE(after.ok()) << after.status();
  EXPECT_EQ(after->ShortDebugString(), baseline->ShortDebugString())
      << "rejected requests touched the KV store";
  // The cluster still serves.
  absl::StatusOr<GenerateResult> good =
      client_->Generate(TextRequest("Once upon a time", 8), WithTimeout(kCallTimeout));
  EXPECT_TRUE(good.ok()) << good.status();
}

// ---------------------------------------------------------------------------------------------
// 4. A decode worker killed with streams in flight.

// A prefill queue longer than the KV store's lease: 64 concurrent 400-token prompts queue at
// the one prefill worker for longer than the lease; the worker renews each allocation while
// its request waits and computes, so every request keeps its pages until Seal (regression: the
// requests at the back of the queue failed NOT_FOUND, "Seal: allocation N does not exist").
// The lease must be short next to the prefill queue (so queued requests must renew it) yet long
// next to the hand-off from a sealing prefill worker to the decode worker taking the pages over
// (RPCs among busy processes). Sanitizers slow compute far more than RPCs, so the lease is set from
// this build's own speed: 24 prompts' in-process prefill, with a floor for a fast build's
// hand-off; the queue of kStreams prompts must outlast it (2-4 times, measured in each build).
TEST(ShortLeaseTest, QueuedPrefillsKeepTheirPages) {
  std::unique_ptr<Reference> reference = Reference::Create(DefaultProfile());
  ASSERT_NE(reference, nullptr);
  constexpr int kStreams = 64;
  constexpr int kPromptTokens = 400;
  const std::vector<int> corpus = reference->tokenizer().Encode(ReadEvalText(), false);
  std::vector<v1::GenerateRequest> requests;
  for (int i = 0; i < kStreams; ++i) {
    requests.push_back(
        TokenRequest(EvalPrompt(*reference, corpus, 7 + i * 1009u, kPromptTokens), 4));
  }
  // The fastest of a few probes: a busy machine only ever adds to a probe's time.
  double prompt_seconds = std::numeric_limits<double>::infinity();
  for (int i = 0; i < 5; ++i) {
    const absl::Time probe = absl::Now();
    reference->Run(EvalPrompt(*reference, corpus, 3 + i, kPromptTokens), TokenRequest({}, 1));
    prompt_seconds = std::min(prompt_seconds, absl::ToDoubleSeconds(absl::Now() - probe));
  }
  const double lease_seconds = std::max(0.2, 24 * prompt_seconds);

  absl::StatusOr<std::unique_ptr<Cluster>> started = Cluster::Start(
      Concat(kDefaultProfileFlags, {absl::StrCat("--lease-seconds=", lease_seconds)}));
  ASSERT_TRUE(started.ok()) << started.status();
  Cluster& cluster = **started;
  std::unique_ptr<Client> client = MakeClient(cluster);
  ASSERT_NE(client, nullptr);
  std::vector<StreamOutcome> outcomes(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back(
        [&, i] { outcomes[i] = RunStream(*client, requests[i], WithTimeout(kCallTimeout)); });
  }
  for (std::thread& thread : threads) thread.join();
  double longest_queue = 0;
  for (int i = 0; i < kStreams; ++i) {
    EXPECT_TRUE(outcomes[i].status.ok()) << "stream " << i << ": " << outcomes[i].status;
    longest_queue = std::max(longest_queue, outcomes[i].final.timings().queue_seconds());
  }
  RecordProperty("prompt_seconds", absl::StrCat(prompt_seconds));
  RecordProperty("lease_seconds", absl::StrCat(lease_seconds));
  RecordProperty("longest_queue_seconds", absl::StrCat(longest_queue));
  EXPECT_GT(longest_queue, lease_seconds) << "the test needs a queue longer than the lease";
}

TEST(DecodeWorkerDeathTest, ClientsFailPromptlyAndTheSurvivorServes) {
  absl::StatusOr<std::unique_ptr<Cluster>> started = Cluster::Start(
      Concat(kDefaultProfileFlags,
             {"--decode-workers=2", absl::StrCat("--lease-seconds=", kLeaseSeconds)}));
  ASSERT_TRUE(started.ok()) << started.status();
  Cluster& cluster = **started;
  const std::vector<Cluster::Process> decoders = cluster.WithPrefix("decode-");
  ASSERT_EQ(decoders.size(), 2u);
  std::unique_ptr<Reference> reference = Reference::Create(DefaultProfile());
  ASSERT_NE(reference, nullptr);
  std::unique_ptr<Client> client = MakeClient(cluster);
  ASSERT_NE(client, nullptr);
  const absl::StatusOr<v1::PoolUsage> baseline = cluster.PoolUsage();
  ASSERT_TRUE(baseline.ok() && PoolIdle(*baseline)) << Describe(baseline);

  // Long streams, so that all are in flight when the worker dies.
  constexpr int kStreams = 8;
  const std::vector<int> corpus = reference->tokenizer().Encode(ReadEvalText(), false);
  std::vector<v1::GenerateRequest> requests;
  std::vector<std::vector<int>> prompts;
  for (int i = 0; i < kStreams; ++i) {
    const int length = 30 + 9 * i;
    prompts.push_back(EvalPrompt(*reference, corpus, 11 + i * 1531u, length));
    v1::GenerateRequest request = TokenRequest(prompts.back(), reference->context() - length);
    request.mutable_stop()->set_ignore_eos(true);
    requests.push_back(std::move(request));
  }
  std::vector<StreamOutcome> outcomes(kStreams);
  std::vector<std::atomic<int>> progress(kStreams);
  std::vector<std::atomic<bool>> done(kStreams);
  std::vector<std::thread> threads;
  for (int i = 0; i < kStreams; ++i) {
    threads.emplace_back([&, i] {
      outcomes[i] = RunStream(*client, requests[i], WithTimeout(absl::Seconds(30)),
                              [&](int tokens) { progress[i] = tokens; });
      done[i] = true;
    });
  }
  // Decode is under way on every stream (the first token comes from prefill) ...
  const bool all_decoding = WaitUntil(
      absl::Seconds(20),
      [&] {
        for (int i = 0; i < kStreams; ++i) {
          if (progress[i] < 2 && !done[i]) return false;
        }
        return true;
      },
      absl::Milliseconds(1));
  // ... then both decode workers are frozen so that no stream can finish in between, the one the
  // router shows busiest is killed and the other resumes.
  for (const Cluster::Process& decoder : decoders) kill(decoder.pid, SIGSTOP);
  int in_flight = 0;
  for (int i = 0; i < kStreams; ++i) in_flight += !done[i];
  size_t victim_index = 0;
  absl::StatusOr<v1::ListWorkersReply> listed = client->ListWorkers(WithTimeout(absl::Seconds(5)));
  if (listed.ok()) {
    int busiest = 0;
    for (const v1::WorkerInfo& worker : listed->workers()) {
      for (size_t d = 0; d < decoders.size(); ++d) {
        if (worker.address() == decoders[d].address &&
            worker.queue().running_requests() > busiest) {
          busiest = worker.queue().running_requests();
          victim_index = d;
        }
      }
    }
  }
  const Cluster::Process* victim = &decoders[victim_index];
  const Cluster::Process* survivor = &decoders[1 - victim_index];
  EXPECT_EQ(kill(victim->pid, SIGKILL), 0);
  const absl::Time killed = absl::Now();
  kill(survivor->pid, SIGCONT);
  for (std::thread& thread : threads) thread.join();
  ASSERT_TRUE(all_decoding) << "streams did not get going";
  ASSERT_GT(in_flight, 0) << "every stream finished before the kill";
  RecordProperty("victim", victim->name);
  RecordProperty("in_flight_at_kill", in_flight);

  int failed = 0;
  for (int i = 0; i < kStreams; ++i) {
    SCOPED_TRACE(absl::StrCat("stream ", i));
    const StreamOutcome& outcome = outcomes[i];
    if (outcome.status.ok()) {
      EXPECT_EQ(outcome.final.decode_worker(), survivor->address)
          << "completed on the killed worker?";
      const Expected expected = reference->Run(prompts[i], requests[i]);
      EXPECT_EQ(outcome.tokens, expected.tokens);
      continue;
    }
    ++failed;
    EXPECT_EQ(outcome.status.code(), absl::StatusCode::kUnavailable) << outcome.status;
    EXPECT_LT(outcome.ended - killed, absl::Seconds(5))
        << "the client learned of the dead worker only after "
        << absl::FormatDuration(outcome.ended - killed) << ": " << outcome.status;
  }
  EXPECT_GE(failed, 1) << "no stream was on " << victim->name;
  RecordProperty("failed_streams", failed);

  // The router marks the dead worker unhealthy (or forgets it) ...
  absl::StatusOr<v1::ListWorkersReply> workers;
  const bool marked = WaitUntil(absl::Seconds(5), [&] {
    workers = client->ListWorkers(WithTimeout(absl::Seconds(2)));
    if (!workers.ok()) return false;
    for (const v1::WorkerInfo& worker : workers->workers()) {
      if (worker.address() == victim->address && worker.healthy()) return false;
    }
    return true;
  });
  EXPECT_TRUE(marked) << (workers.ok() ? workers->ShortDebugString() : workers.status().ToString());

  // ... and new requests succeed on the survivor.
  for (int i = 0; i < 4; ++i) {
    v1::GenerateRequest request = TextRequest("Once upon a time", 30);
    absl::StatusOr<GenerateResult> result = client->Generate(request, WithTimeout(kCallTimeout));
    ASSERT_TRUE(result.ok()) << result.status() << "\n" << cluster.LogTail();
    EXPECT_EQ(result->final.decode_worker(), survivor->address);
    EXPECT_EQ(result->token_ids,
              reference->Run(reference->Encode("Once upon a time"), request).tokens);
  }

  // The dead worker's pages are reclaimed within a lease period (plus margin) of its death.
  const absl::StatusOr<v1::PoolUsage> usage =
      WaitForIdlePool(cluster, killed + absl::Seconds(kLeaseSeconds + 2) - absl::Now());
  RecordProperty("seconds_to_idle_pool", absl::StrCat(absl::ToDoubleSeconds(absl::Now() - killed)));
  EXPECT_TRUE(usage.ok() && PoolIdle(*usage))
      << "pool not idle " << kLeaseSeconds + 2 << " s after the kill: " << Describe(usage);
}

}  // namespace
}  // namespace pdserve::integration
