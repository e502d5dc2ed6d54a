#include "services/router/scheduling_policy.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace pdserve {

namespace {

// The healthy candidate of least `work`; ties go to fewest requests, remaining ties in turn
// (`cursor`). -1 when none is healthy.
template <typename Work>
int LeastWork(std::span<const WorkerCandidate> candidates, Work work,
              std::atomic<uint64_t>& cursor) {
  std::vector<int> best;  // every candidate tied at the minimum (work, then requests)
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const WorkerCandidate& c = candidates[i];
    if (!c.healthy) continue;
    if (!best.empty()) {
      const WorkerCandidate& b = candidates[best.front()];
      const int64_t cw = work(c), bw = work(b);
      if (cw > bw) continue;
      if (cw == bw && c.queued_requests > b.queued_requests) continue;
      if (cw < bw || c.queued_requests < b.queued_requests) best.clear();
    }
    best.push_back(i);
  }
  if (best.empty()) return -1;
  return best[cursor.fetch_add(1, std::memory_order_relaxed) % best.size()];
}

}  // namespace

int LeastPendingTokensPolicy::Choose(std::span<const WorkerCandidate> candidates,
                                     int64_t /*request_tokens*/) {
  return LeastWork(
      candidates, [](const WorkerCandidate& c) { return c.queued_tokens; }, cursor_);
}

int KvAwarePolicy::Choose(std::span<const WorkerCandidate> candidates, int64_t /*request_tokens*/) {
  // (prompt − cached) + queued, less the prompt's length, the same for every candidate.
  return LeastWork(
      candidates, [](const WorkerCandidate& c) { return c.queued_tokens - c.cached_tokens; },
      cursor_);
}

int RoundRobinPolicy::Choose(std::span<const WorkerCandidate> candidates,
                             int64_t /*request_tokens*/) {
  std::vector<int> healthy;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    if (candidates[i].healthy) healthy.push_back(i);
  }
  if (healthy.empty()) return -1;
  return healthy[cursor_.fetch_add(1, std::memory_order_relaxed) % healthy.size()];
}

absl::StatusOr<std::unique_ptr<SchedulingPolicy>> MakeSchedulingPolicy(const std::string& name) {
  if (name == "least-tokens") return std::make_unique<LeastPendingTokensPolicy>();
  if (name == "kv-aware") return std::make_unique<KvAwarePolicy>();
  if (name == "round-robin") return std::make_unique<RoundRobinPolicy>();
  return absl::InvalidArgumentError(absl::StrCat("unknown scheduling policy '", name,
                                                 "' (known: least-tokens, kv-aware, round-robin)"));
}

}  // namespace pdserve
