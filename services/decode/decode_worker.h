// DecodeWorker: continuous batching of decode steps over one Engine (CPU or GPU) (DESIGN §2 step
// 4).
//
// Start (on the caller's thread) checks a request and, for a disaggregated one, renews its lease
// and pulls its pages from the KV store with one batch of one-sided gets: whole pages for layers
// that keep V locally and for each layer's last, partly filled page; only the header and K bytes
// of full pages of KCache layers, whose V stays in the KV store and is fetched per step by
// RemoteValueTier. The scheduler thread then imports the pages into a sequence, emits the
// prefill's first token and runs one Forward per step over every live sequence, pushing each
// sampled token to the request's DecodeStream. A monolithic worker (no KV store, no compression)
// runs the prompt itself instead.
//
// A sequence ends on a stop token, max_tokens, cancellation (DecodeStream::Cancel) or a failed
// remote fetch; the scheduler removes it from the engine before its next step, so once a stream
// is finished no later step reads the request's pages.
#ifndef PDSERVE_SERVICES_DECODE_DECODE_WORKER_H_
#define PDSERVE_SERVICES_DECODE_DECODE_WORKER_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "core/base/mutex.h"
#include "core/engine/engine.h"
#include "core/engine/sampler.h"
#include "core/metrics/metrics_registry.h"
#include "pdserve/v1/common.pb.h"
#include "services/common/kvstore_connection.h"
#include "services/decode/decode_metrics.h"
#include "services/decode/decode_stream.h"
#include "services/decode/remote_value_tier.h"

namespace pdserve {

struct DecodeWorkerOptions {
  int max_queued_requests = 256;  // admissions waiting for a sequence slot
  uint64_t calibration_hash = 0;
  bool monolithic = false;
  std::shared_ptr<MetricsRegistry> metrics;  // where its metrics go; null: a private registry
};

struct DecodeJob {
  uint64_t request_id = 0;
  SamplingParams sampling;
  int max_tokens = 1;             // counts the first token
  std::vector<int32_t> stop_ids;  // end after any of these (EOS included by the caller)
  // Disaggregated:
  v1::PageManifest manifest;
  int32_t first_token = -1;
  std::shared_ptr<KvStoreConnection> store;
  // Monolithic:
  std::vector<int32_t> prompt;
};

struct DecodeStart {
  std::shared_ptr<DecodeStream> stream;
  double transfer_seconds = 0;  // pulling the pages
  double lease_seconds = 0;     // of the pages, as the KV store granted it at the pull
};

class DecodeWorker {
 public:
  // `tier` is the engine's value tier when it was made with RemoteValueTier (null otherwise).
  static absl::StatusOr<std::unique_ptr<DecodeWorker>> Create(std::unique_ptr<Engine> engine,
                                                              RemoteValueTier* tier,
                                                              const DecodeWorkerOptions& options);
  ~DecodeWorker();

  // InvalidArgument for a job the engine cannot run (bad tokens, context overflow, a manifest
  // that does not fit the model's KV plan), FailedPrecondition for another calibration,
  // ResourceExhausted when the admission queue is full, Unavailable when the pages cannot be read.
  absl::StatusOr<DecodeStart> Start(DecodeJob job);

  v1::QueueStatus queue() const;
  const Engine& engine() const { return *engine_; }
  bool monolithic() const { return options_.monolithic; }
  MetricsRegistry& metrics() { return *options_.metrics; }
  DecodeMetrics& stats() { return *stats_; }

 private:
  struct StagedPage;
  struct Admission;
  struct Live;

  DecodeWorker(std::unique_ptr<Engine> engine, RemoteValueTier* tier,
               const DecodeWorkerOptions& options);
  absl::Status CheckJob(const DecodeJob& job) const;
  absl::Status PullPages(Admission& admission, double* lease_seconds);
  void SchedulerLoop();
  // Moves queued admissions into the engine while sequence slots last.
  void Admit();
  // Verifies each pulled page (checksums, content, and that it is the manifest's page of its
  // writer in its epoch) before the engine takes it; a page that fails fails the request.
  absl::Status Import(Admission& admission, Live& live);
  // Counts a refusal by `reason` and returns the request's DATA_LOSS naming `what` and `why` (the
  // router answers the client UNAVAILABLE: retryable, and the worker is not at fault).
  absl::Status Refuse(const std::string& what, const char* reason, absl::string_view why);
  // Refuse for the pulled page `ref`.
  absl::Status RefusePage(const v1::PageRef& ref, const char* reason, const std::string& why);
  // The request's error after its value tier's source failed with `failure`: a refused V head
  // (DataLoss) is counted like a refused page and stays DATA_LOSS; a transport failure is
  // UNAVAILABLE.
  absl::Status FetchFailure(const absl::Status& failure);
  void Step();
  // Emits `token` as the next output of `live`. When it is the last (a stop token, max_tokens),
  // retires `live` before the stream ends, so a reader of the end finds the worker's queue without
  // it; true then.
  bool Emit(Live& live, int32_t token);
  void Retire(Live& live);

  std::unique_ptr<Engine> engine_;
  RemoteValueTier* tier_;
  DecodeWorkerOptions options_;  // metrics set
  std::unique_ptr<DecodeMetrics> stats_;

  mutable Mutex mu_;
  CondVar cv_;  // signalled when admissions_ grows or stop_ is set
  std::deque<std::unique_ptr<Admission>> admissions_ ABSL_GUARDED_BY(mu_);
  int64_t queued_tokens_ ABSL_GUARDED_BY(mu_) = 0;  // tokens still to produce, queued and live
  int live_count_ ABSL_GUARDED_BY(mu_) = 0;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::vector<std::unique_ptr<Live>> live_;  // scheduler thread only
  std::thread scheduler_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_DECODE_DECODE_WORKER_H_
