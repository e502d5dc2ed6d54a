#include "services/router/worker_registry.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace pdserve {

const char* WorkerRoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kMonolithic:
      return "monolithic";
  }
  return "unknown";
}

const char* WorkerHealthName(WorkerHealth health) {
  switch (health) {
    case WorkerHealth::kHealthy:
      return "healthy";
    case WorkerHealth::kLate:
      return "late";
    case WorkerHealth::kDead:
      return "dead";
  }
  return "unknown";
}

WorkerRegistry::WorkerRegistry(Options options)
    : options_([&] {
        if (!options.now) options.now = [] { return absl::Now(); };
        return std::move(options);
      }()) {}

WorkerRegistry::Worker& WorkerRegistry::UpsertLocked(WorkerRole role, const std::string& address,
                                                     const std::string& kvstore_grpc_address) {
  auto [it, inserted] = workers_.try_emplace(address);
  if (inserted) order_.push_back(address);
  Worker& w = it->second;
  w.role = role;
  w.kvstore_grpc_address = kvstore_grpc_address;
  return w;
}

void WorkerRegistry::AddStatic(WorkerRole role, const std::string& address,
                               const std::string& kvstore_grpc_address) {
  MutexLock lock(&mu_);
  Worker& w = UpsertLocked(role, address, kvstore_grpc_address);
  w.is_static = true;
  w.last_heard = Now();
  w.failed = false;
}

void WorkerRegistry::Register(WorkerRole role, const std::string& address, const WorkerLoad& load,
                              uint64_t calibration_hash, const std::string& kvstore_grpc_address) {
  MutexLock lock(&mu_);
  Worker& w = UpsertLocked(role, address, kvstore_grpc_address);
  w.calibration_hash = calibration_hash;
  w.reported = load;
  ++w.report_epoch;
  w.since_report_requests = 0;
  w.since_report_tokens = 0;
  w.last_heard = Now();
  w.failed = false;
}

bool WorkerRegistry::Heartbeat(const std::string& address, const WorkerLoad& load,
                               absl::Time sent_at) {
  MutexLock lock(&mu_);
  auto it = workers_.find(address);
  if (it == workers_.end()) return false;
  Worker& w = it->second;
  w.reported = load;
  ++w.report_epoch;
  w.since_report_requests = 0;
  w.since_report_tokens = 0;
  w.last_heard = Now();
  if (sent_at >= w.failed_at) w.failed = false;
  return true;
}

void WorkerRegistry::MarkFailed(const std::string& address, const std::string& reason) {
  MutexLock lock(&mu_);
  auto it = workers_.find(address);
  if (it == workers_.end()) return;
  it->second.failed = true;
  it->second.failed_at = Now();
  it->second.failed_reason = reason;
}

void WorkerRegistry::NoteProgress(const std::string& address) {
  MutexLock lock(&mu_);
  auto it = workers_.find(address);
  if (it == workers_.end()) return;
  it->second.last_heard = Now();
  it->second.failed = false;
}

bool WorkerRegistry::SilentLocked(const Worker& worker, absl::Time now) const {
  return now - worker.last_heard > options_.silence_limit;
}

WorkerHealth WorkerRegistry::HealthLocked(const Worker& worker, absl::Time now,
                                          std::string* reason) const {
  if (worker.failed) {
    if (reason != nullptr) *reason = absl::StrCat("unreachable: ", worker.failed_reason);
    return WorkerHealth::kDead;
  }
  const absl::Duration silent = now - worker.last_heard;
  if (silent <= options_.heartbeat_interval * options_.missed_heartbeats) {
    return WorkerHealth::kHealthy;
  }
  if (SilentLocked(worker, now)) {
    int live_peers = 0;
    for (const auto& [address, other] : workers_) {
      if (&other != &worker && other.role == worker.role && !other.failed &&
          !SilentLocked(other, now)) {
        ++live_peers;
      }
    }
    if (live_peers > 0) {
      if (reason != nullptr) {
        *reason = absl::StrCat("silent for ", absl::FormatDuration(silent), " while ", live_peers,
                               " other ", WorkerRoleName(worker.role), " worker(s) are live");
      }
      return WorkerHealth::kDead;
    }
  }
  if (reason != nullptr) {
    *reason = absl::StrCat("nothing heard for ", absl::FormatDuration(silent),
                           " (busy, not dead: still routed to)");
  }
  return WorkerHealth::kLate;
}

std::vector<HealthChange> WorkerRegistry::Sweep() {
  MutexLock lock(&mu_);
  const absl::Time now = Now();
  std::vector<HealthChange> changes;
  for (const std::string& address : order_) {
    Worker& w = workers_.at(address);
    std::string reason = "heard from again";
    const WorkerHealth health = HealthLocked(w, now, &reason);
    if (health == w.swept) continue;
    changes.push_back({w.role, address, w.swept, health, std::move(reason)});
    w.swept = health;
  }
  return changes;
}

WorkerSnapshot WorkerRegistry::SnapshotLocked(const std::string& address, const Worker& w,
                                              absl::Time now) const {
  WorkerSnapshot s;
  s.role = w.role;
  s.address = address;
  s.kvstore_grpc_address = w.kvstore_grpc_address;
  s.calibration_hash = w.calibration_hash;
  s.is_static = w.is_static;
  s.reported = w.reported;
  s.inflight_requests = w.inflight_requests;
  s.inflight_tokens = w.inflight_tokens;
  s.pending_requests = w.reported.queued_requests + w.since_report_requests;
  s.pending_tokens = w.reported.queued_tokens + w.since_report_tokens;
  s.health = HealthLocked(w, now);
  s.healthy = s.health != WorkerHealth::kDead;
  s.since_heard = now - w.last_heard;
  return s;
}

absl::StatusOr<WorkerAssignment> WorkerRegistry::Acquire(
    WorkerRole role, SchedulingPolicy& policy, int64_t tokens,
    const absl::flat_hash_map<std::string, int64_t>* cached_tokens) {
  MutexLock lock(&mu_);
  const absl::Time now = Now();
  std::vector<const std::string*> addresses;
  std::vector<WorkerCandidate> candidates;
  for (const std::string& address : order_) {
    const Worker& w = workers_.at(address);
    if (w.role != role) continue;
    WorkerCandidate c;
    c.address = address;
    c.queued_requests = w.reported.queued_requests + w.since_report_requests;
    c.queued_tokens = w.reported.queued_tokens + w.since_report_tokens;
    c.healthy = HealthLocked(w, now) != WorkerHealth::kDead;
    if (cached_tokens != nullptr) {
      auto cached = cached_tokens->find(w.kvstore_grpc_address);
      if (cached != cached_tokens->end()) c.cached_tokens = cached->second;
    }
    addresses.push_back(&address);
    candidates.push_back(std::move(c));
  }
  const int chosen = policy.Choose(candidates, tokens);
  if (chosen < 0 || chosen >= static_cast<int>(candidates.size()) || !candidates[chosen].healthy) {
    return absl::UnavailableError(absl::StrCat("no healthy ", WorkerRoleName(role), " worker (",
                                               candidates.size(), " known)"));
  }
  Worker& w = workers_.at(*addresses[chosen]);
  w.inflight_requests += 1;
  w.inflight_tokens += tokens;
  w.since_report_requests += 1;
  w.since_report_tokens += tokens;
  WorkerAssignment a;
  a.role = role;
  a.address = *addresses[chosen];
  a.kvstore_grpc_address = w.kvstore_grpc_address;
  a.tokens = tokens;
  a.report_epoch = w.report_epoch;
  return a;
}

void WorkerRegistry::Release(const WorkerAssignment& assignment) {
  MutexLock lock(&mu_);
  auto it = workers_.find(assignment.address);
  if (it == workers_.end()) return;
  Worker& w = it->second;
  w.inflight_requests = std::max(0, w.inflight_requests - 1);
  w.inflight_tokens = std::max<int64_t>(0, w.inflight_tokens - assignment.tokens);
  // Work assigned after the last report is not in that report: take it out of the estimate too.
  if (assignment.report_epoch == w.report_epoch) {
    w.since_report_requests = std::max(0, w.since_report_requests - 1);
    w.since_report_tokens = std::max<int64_t>(0, w.since_report_tokens - assignment.tokens);
  }
}

int WorkerRegistry::Count(WorkerRole role) const {
  MutexLock lock(&mu_);
  int n = 0;
  for (const auto& [address, w] : workers_) n += w.role == role ? 1 : 0;
  return n;
}

std::vector<WorkerSnapshot> WorkerRegistry::List() const {
  MutexLock lock(&mu_);
  const absl::Time now = Now();
  std::vector<WorkerSnapshot> out;
  out.reserve(order_.size());
  for (const std::string& address : order_) {
    out.push_back(SnapshotLocked(address, workers_.at(address), now));
  }
  return out;
}

}  // namespace pdserve
