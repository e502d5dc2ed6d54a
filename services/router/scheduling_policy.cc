#include "services/router/scheduling_policy.h"

#include <vector>

#include "absl/strings/str_cat.h"

namespace pdserve {

int LeastPendingTokensPolicy::Choose(std::span<const WorkerCandidate> candidates,
                                     int64_t /*request_tokens*/) {
  // Every candidate tied at the minimum (tokens, then requests).
  std::vector<int> best;
  for (int i = 0; i < static_cast<int>(candidates.size()); ++i) {
    const WorkerCandidate& c = candidates[i];
    if (!c.healthy) continue;
    if (!best.empty()) {
      const WorkerCandidate& b = candidates[best.front()];
      if (c.queued_tokens > b.queued_tokens) continue;
      if (c.queued_tokens == b.queued_tokens && c.queued_requests > b.queued_requests) continue;
      if (c.queued_tokens < b.queued_tokens || c.queued_requests < b.queued_requests) best.clear();
    }
    best.push_back(i);
  }
  if (best.empty()) return -1;
  return best[cursor_.fetch_add(1, std::memory_order_relaxed) % best.size()];
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
  if (name == "round-robin") return std::make_unique<RoundRobinPolicy>();
  return absl::InvalidArgumentError(
      absl::StrCat("unknown scheduling policy '", name, "' (known: least-tokens, round-robin)"));
}

}  // namespace pdserve
