// WorkerRegistry: the router's view of its workers (prefill, decode, monolithic) and their load.
// Workers come from static flags or register themselves and send heartbeats; the router polls
// every one of them each heartbeat interval as well (RouterService::PollOnce).
//
// Health tells busy from dead (docs/services.md, "Health"):
//   - dead: a call or poll found the worker unreachable (MarkFailed: its connection is gone), or it
//     has been silent for `silence_limit` while another worker of its role is live;
//   - late: nothing heard (heartbeat, poll answer, or tokens streaming from it: NoteProgress) for
//     `missed_heartbeats` intervals. A late worker is busy, not dead: it is still routed to;
//   - healthy otherwise.
// The last live workers of a role are never taken out for silence alone (as Envoy's panic
// threshold). The next heartbeat, poll answer or progress revives a dead worker. Sweep reports each
// change of health once, with its reason.
//
// Load: each worker's last reported queue plus what the router assigned since that report
// (Acquire adds a request and its tokens, Release removes them), so that a burst of requests
// between two reports is spread instead of piling onto the worker that looked idle.
//
// Thread-safe; the clock is injectable for tests.
#ifndef PDSERVE_SERVICES_ROUTER_WORKER_REGISTRY_H_
#define PDSERVE_SERVICES_ROUTER_WORKER_REGISTRY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"
#include "services/router/scheduling_policy.h"

namespace pdserve {

// Values match pdserve.v1.WorkerRole.
enum class WorkerRole { kPrefill = 1, kDecode = 2, kMonolithic = 3 };
const char* WorkerRoleName(WorkerRole role);

struct WorkerLoad {
  int32_t queued_requests = 0;
  int64_t queued_tokens = 0;
  int32_t running_requests = 0;
};

enum class WorkerHealth { kHealthy, kLate, kDead };
const char* WorkerHealthName(WorkerHealth health);

struct WorkerSnapshot {
  WorkerRole role = WorkerRole::kDecode;
  std::string address;
  std::string kvstore_grpc_address;  // decode workers: their node's KV store
  uint64_t calibration_hash = 0;
  bool is_static = false;         // from flags: the router polls it
  WorkerLoad reported;            // the last report
  int32_t inflight_requests = 0;  // assigned by this router and not yet released
  int64_t inflight_tokens = 0;
  int32_t pending_requests = 0;  // reported + assigned since the report (what policies see)
  int64_t pending_tokens = 0;
  WorkerHealth health = WorkerHealth::kDead;
  bool healthy = false;  // routable: not dead (a late worker is routed to)
  absl::Duration since_heard = absl::ZeroDuration();
};

// A worker's health as it changed since the previous Sweep.
struct HealthChange {
  WorkerRole role = WorkerRole::kDecode;
  std::string address;
  WorkerHealth from = WorkerHealth::kHealthy;
  WorkerHealth to = WorkerHealth::kHealthy;
  std::string reason;
};

// A request's claim on a worker; give it back with Release exactly once.
struct WorkerAssignment {
  WorkerRole role = WorkerRole::kDecode;
  std::string address;
  std::string kvstore_grpc_address;
  int64_t tokens = 0;
  uint64_t report_epoch = 0;  // which report the assignment came after
};

class WorkerRegistry {
 public:
  struct Options {
    absl::Duration heartbeat_interval = absl::Milliseconds(500);
    int missed_heartbeats = 3;                         // silent this many intervals: late
    absl::Duration silence_limit = absl::Seconds(30);  // silent this long: dead, unless the last
    std::function<absl::Time()> now;                   // default absl::Now
  };
  explicit WorkerRegistry(Options options);

  // A worker from flags: healthy from now.
  void AddStatic(WorkerRole role, const std::string& address,
                 const std::string& kvstore_grpc_address);
  // RegisterWorker: adds or replaces the worker at `address`; it is healthy.
  void Register(WorkerRole role, const std::string& address, const WorkerLoad& load,
                uint64_t calibration_hash, const std::string& kvstore_grpc_address);
  // A heartbeat or a successful poll. False when the address is unknown (register again). A report
  // the worker sent before the last MarkFailed (`sent_at`, on this registry's clock: a poll
  // answered just before the worker died, processed after the failure) updates the load but leaves
  // the worker failed.
  bool Heartbeat(const std::string& address, const WorkerLoad& load,
                 absl::Time sent_at = absl::InfiniteFuture());
  // A call or poll found the worker unreachable (`reason`): dead until it is heard from again.
  void MarkFailed(const std::string& address, const std::string& reason);
  // Tokens or a reply arrived from the worker: it is alive (and not late), as a heartbeat says.
  void NoteProgress(const std::string& address);
  // The health changes since the last call (each worker's first Sweep compares with healthy).
  std::vector<HealthChange> Sweep();

  // Chooses a healthy worker of `role` with `policy` and assigns it `tokens` of work.
  // `cached_tokens` (optional): per KV store address, the prompt tokens that store is expected to
  // hold; each candidate sees its own store's (WorkerCandidate::cached_tokens).
  // Unavailable "no healthy <role> worker" when there is none.
  absl::StatusOr<WorkerAssignment> Acquire(
      WorkerRole role, SchedulingPolicy& policy, int64_t tokens,
      const absl::flat_hash_map<std::string, int64_t>* cached_tokens = nullptr);
  void Release(const WorkerAssignment& assignment);

  // Workers of `role` that are known (healthy or not).
  int Count(WorkerRole role) const;
  std::vector<WorkerSnapshot> List() const;
  absl::Duration heartbeat_interval() const { return options_.heartbeat_interval; }
  absl::Time Now() const { return options_.now(); }

 private:
  struct Worker {
    WorkerRole role = WorkerRole::kDecode;
    std::string kvstore_grpc_address;
    uint64_t calibration_hash = 0;
    bool is_static = false;
    WorkerLoad reported;
    uint64_t report_epoch = 0;
    int32_t inflight_requests = 0;
    int64_t inflight_tokens = 0;
    int32_t since_report_requests = 0;
    int64_t since_report_tokens = 0;
    absl::Time last_heard;
    bool failed = false;
    absl::Time failed_at = absl::InfinitePast();
    std::string failed_reason;
    WorkerHealth swept = WorkerHealth::kHealthy;  // as the last Sweep reported it
  };
  // The entry of `address` (made, and put in scheduling order, when new) with its role and KV
  // store set.
  Worker& UpsertLocked(WorkerRole role, const std::string& address,
                       const std::string& kvstore_grpc_address) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // `reason` (optional) receives why the worker is not healthy.
  WorkerHealth HealthLocked(const Worker& worker, absl::Time now,
                            std::string* reason = nullptr) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  bool SilentLocked(const Worker& worker, absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  WorkerSnapshot SnapshotLocked(const std::string& address, const Worker& worker,
                                absl::Time now) const ABSL_SHARED_LOCKS_REQUIRED(mu_);
  const Options options_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Worker> workers_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> order_ ABSL_GUARDED_BY(mu_);  // insertion order, for stable listing
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_WORKER_REGISTRY_H_
