// PrefillWorker: runs prompts through an Engine (CPU or GPU), batched by token budget, and streams
// each prompt's KV pages to a KV store while the forward pass continues (DESIGN §2 step 2).
//
// A request's life here: Run allocates one slot per page in the KV store (all-or-nothing, before
// any compute), queues the prompt for the batcher and waits. The batcher thread packs queued
// prompts into one Forward up to the engine's max_batch_tokens (a longer prompt runs alone, in
// chunks); as each cache layer of the batch's final chunk is stored, its pages are handed to the
// sender thread, which encodes them (core/kv/kv_page.h) and writes them into their slots with
// one-sided puts. Run then seals the pages and returns the first token and the manifest. On every
// error path after allocation the pages are released.
//
// Prefix cache (PrefillWorkerOptions::prefix_cache): the allocation names the prompt's full pages
// before its last token (core/kv/prefix_hash.h); the KV store reuses the longest run it holds.
// Run reads those pages from the store and checks each (header, layout, checksum) before use; the
// batcher starts the sequence with them (Engine::AddSequenceWithTokens) and computes only the rest
// of the prompt. The manifest lists the cached pages where they are (PageRef::written_by), and
// Seal publishes the new named pages for later requests.
#ifndef PDSERVE_SERVICES_PREFILL_PREFILL_WORKER_H_
#define PDSERVE_SERVICES_PREFILL_PREFILL_WORKER_H_

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/mutex.h"
#include "core/engine/engine.h"
#include "core/engine/sampler.h"
#include "core/kv/prefix_hash.h"
#include "core/metrics/metrics_registry.h"
#include "pdserve/v1/common.pb.h"
#include "services/common/admission_queue.h"
#include "services/common/kvstore_connection.h"
#include "services/prefill/prefill_metrics.h"

namespace pdserve {

struct PrefillWorkerOptions {
  int max_queued_requests = 256;  // beyond this Run answers ResourceExhausted
  uint64_t calibration_hash = 0;
  // Reuse and publish KV pages of prompt prefixes through the KV store. `model_identity` names the
  // model as loaded (WeightsFingerprint, weight dtype): pages of prompts under another identity,
  // KV plan or calibration never match.
  bool prefix_cache = false;
  std::string model_identity;
  std::shared_ptr<MetricsRegistry> metrics;  // where its metrics go; null: a private registry
};

struct PrefillJob {
  uint64_t request_id = 0;
  std::vector<int32_t> prompt;
  SamplingParams sampling;
  std::shared_ptr<KvStoreConnection> store;
  double lease_seconds = 0;  // 0 = the store's default
  // While the KV store's pool is full the job waits for pages, behind the jobs that came before it,
  // until `deadline` (then DEADLINE_EXCEEDED or RESOURCE_EXHAUSTED) or until `cancelled` says so
  // (CANCELLED): pages come back as other requests end, so a full pool is a reason to queue, not to
  // refuse.
  absl::Time deadline = absl::InfiniteFuture();
  std::function<bool()> cancelled;
};

struct PrefillOutcome {
  int32_t first_token = 0;
  v1::PageManifest manifest;
  double queue_seconds = 0;
  double compute_seconds = 0;
  double transfer_seconds = 0;  // page writes still in flight after the forward pass
  int cached_tokens = 0;        // leading prompt tokens whose KV came from the prefix cache
  int published_tokens = 0;     // leading prompt tokens the store holds under their names now
  int page_tokens = 0;          // tokens per KV page
};

class PrefillWorker {
 public:
  // Takes the engine (its options bound the batch: max_batch_tokens, max_sequences).
  static absl::StatusOr<std::unique_ptr<PrefillWorker>> Create(std::unique_ptr<Engine> engine,
                                                               const PrefillWorkerOptions& options);
  ~PrefillWorker();

  // Blocking; called from many threads. InvalidArgument for a prompt the engine cannot take;
  // ResourceExhausted when the queue is full or the KV store has no room; Unavailable when the KV
  // store cannot be reached.
  absl::StatusOr<PrefillOutcome> Run(PrefillJob job);
  MetricsRegistry& metrics() { return *options_.metrics; }
  PrefillMetrics& stats() { return *stats_; }

  v1::QueueStatus queue() const;
  const Engine& engine() const { return *engine_; }

 private:
  struct Pending;
  struct PageWrite;
  class LayerStreamer;

  PrefillWorker(std::unique_ptr<Engine> engine, const PrefillWorkerOptions& options);
  absl::StatusOr<PrefillOutcome> RunJob(PrefillJob job);
  absl::Status Allocate(Pending& pending);
  // Reads the pages the store reused and checks each is what its name promises.
  absl::Status FetchCachedPages(Pending& pending);
  // A sequence holding the request's cached pages (none: an empty one).
  absl::StatusOr<int> StartSequence(Pending& pending);
  absl::Status Seal(Pending& pending);
  // Extends the allocation's lease by its granted length; failures are logged (Seal reports them).
  void Renew(Pending& pending);
  // Waits until the batcher has finished `pending` or `deadline` passes; whether it finished.
  static bool WaitFinished(Pending& pending, absl::Time deadline);
  void Release(Pending& pending);
  void BatcherLoop();
  std::vector<std::shared_ptr<Pending>> TakeBatch();
  void RunBatch(const std::vector<std::shared_ptr<Pending>>& batch);
  absl::Status ForwardBatch(const std::vector<std::shared_ptr<Pending>>& batch,
                            std::vector<int>& sequences);
  void SenderLoop();
  void EnqueueWrites(std::vector<PageWrite> writes);
  void WaitForWrites();

  std::unique_ptr<Engine> engine_;
  PrefillWorkerOptions options_;  // metrics set
  std::unique_ptr<PrefillMetrics> stats_;
  PrefixPageHash prefix_root_{};  // the identity's root name, with the prefix cache on

  // Requests ask the KV store for their pages one at a time, in arrival order; while its pool is
  // full the first keeps asking and the others wait behind it (fair: none is overtaken).
  AdmissionQueue page_line_{AdmissionQueue::Options{.name = "prefill KV-page",
                                                    .max_active = 1,
                                                    .max_queued = 1 << 20,
                                                    .max_queued_bytes = int64_t{1} << 62}};

  mutable Mutex mu_;
  CondVar queue_cv_;
  std::deque<std::shared_ptr<Pending>> queue_ ABSL_GUARDED_BY(mu_);
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;
  int running_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  Mutex send_mu_;
  CondVar send_cv_;
  std::deque<PageWrite> sends_ ABSL_GUARDED_BY(send_mu_);
  int64_t sends_in_flight_ ABSL_GUARDED_BY(send_mu_) = 0;
  bool send_stop_ ABSL_GUARDED_BY(send_mu_) = false;

  std::thread batcher_;
  std::thread sender_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_PREFILL_PREFILL_WORKER_H_
