// SchedulingPolicy: picks the worker that should take a request, from snapshots of the candidate
// workers' load. Policies see only what the router knows: each worker's last reported queue plus
// the work the router itself assigned since that report, and for a prefix-aware policy how much of
// the prompt each decode worker's KV store is expected to hold (PrefixIndex). Implementations keep
// at most a round-robin cursor; Choose is thread-safe.
#ifndef PDSERVE_SERVICES_ROUTER_SCHEDULING_POLICY_H_
#define PDSERVE_SERVICES_ROUTER_SCHEDULING_POLICY_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "absl/status/statusor.h"

namespace pdserve {

// One candidate worker as the registry sees it at the moment of the decision.
struct WorkerCandidate {
  std::string address;
  int32_t queued_requests = 0;  // last report + requests the router assigned since
  int64_t queued_tokens = 0;    // last report + tokens the router assigned since
  // Tokens of the request's prompt that the worker's KV store is expected to hold (PrefixIndex),
  // so prefill need not compute them (at most the prompt's length); filled for decode workers when
  // the policy is prefix_aware, 0 otherwise.
  int64_t cached_tokens = 0;
  bool healthy = true;
};

class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  virtual const char* name() const = 0;
  // Whether Choose reads WorkerCandidate::cached_tokens (the router then keeps a PrefixIndex).
  virtual bool prefix_aware() const { return false; }
  // Index into `candidates` of the chosen worker for a request of `request_tokens` tokens of work;
  // only healthy candidates are chosen. -1 when none is healthy.
  virtual int Choose(std::span<const WorkerCandidate> candidates, int64_t request_tokens) = 0;
};

// The default: fewest pending tokens; ties go to fewest requests, remaining ties round robin.
class LeastPendingTokensPolicy : public SchedulingPolicy {
 public:
  const char* name() const override { return "least-tokens"; }
  int Choose(std::span<const WorkerCandidate> candidates, int64_t request_tokens) override;

 private:
  std::atomic<uint64_t> cursor_{0};
};

// Least expected work: the prompt tokens the worker's KV store lacks (what prefill must compute
// for the request there) plus the worker's pending tokens — so a conversation's next turn goes
// where its history is cached unless that worker's queue outweighs the saving. Ties as
// least-tokens. Where no store is expected to hold any of the prompt (prefill workers, one KV
// store for all workers) it chooses as least-tokens does.
class KvAwarePolicy : public SchedulingPolicy {
 public:
  const char* name() const override { return "kv-aware"; }
  bool prefix_aware() const override { return true; }
  int Choose(std::span<const WorkerCandidate> candidates, int64_t request_tokens) override;

 private:
  std::atomic<uint64_t> cursor_{0};
};

// Healthy candidates in turn, ignoring load (a baseline for comparison).
class RoundRobinPolicy : public SchedulingPolicy {
 public:
  const char* name() const override { return "round-robin"; }
  int Choose(std::span<const WorkerCandidate> candidates, int64_t request_tokens) override;

 private:
  std::atomic<uint64_t> cursor_{0};
};

// "least-tokens", "kv-aware" or "round-robin"; InvalidArgument naming the known policies
// otherwise.
absl::StatusOr<std::unique_ptr<SchedulingPolicy>> MakeSchedulingPolicy(const std::string& name);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_SCHEDULING_POLICY_H_
