// How pdserve's clients (the SDK, loadgen) retry a request the router refused for overload
// (RESOURCE_EXHAUSTED on gRPC, 429 on HTTP), as the official OpenAI clients do: wait the server's
// hint (Retry-After) when it gave one, else back off exponentially, with jitter so that refused
// clients do not come back all at once; give up after `max_retries` or at the call's deadline.
#ifndef PDSERVE_CLIENT_RETRY_POLICY_H_
#define PDSERVE_CLIENT_RETRY_POLICY_H_

#include <optional>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace pdserve {

struct RetryPolicy {
  // 0: never retry; -1: as often as the call's deadline allows (a closed-loop client against a
  // full queue competes for each freed place with clients that resubmit at once, and may need
  // many tries: docs/measurements.md, "Overload").
  int max_retries = 8;
  absl::Duration initial_backoff = absl::Milliseconds(500);
  absl::Duration max_backoff = absl::Seconds(8);
  // A server hint longer than this is not waited for: the retry comes after max_backoff instead.
  absl::Duration max_hint = absl::Seconds(60);
  // Each wait is stretched by a uniform factor in [1, 1 + jitter].
  double jitter = 0.25;

  // InvalidArgument naming the first bad field.
  absl::Status Validate() const;
  // Whether a call refused after `retries` retries may be retried again.
  bool MayRetry(int retries) const { return max_retries < 0 || retries < max_retries; }
};

// The wait before retry number `retry` (0 for the first): the hint if it is given and at most
// max_hint, else initial_backoff · 2^retry capped at max_backoff; times 1 + jitter · `uniform`
// (`uniform` in [0, 1)).
absl::Duration RetryDelay(const RetryPolicy& policy, int retry, std::optional<absl::Duration> hint,
                          double uniform);

// A uniform number in [0, 1) from a per-thread generator, for RetryDelay.
double RetryJitter();

// The wait before retrying a call refused after `retries` retries (with the server's `hint`, if
// any): RetryDelay with fresh jitter, or nullopt when the policy allows no more retries or the
// retry could not start before `deadline`.
std::optional<absl::Duration> NextRetryWait(const RetryPolicy& policy, int retries,
                                            std::optional<absl::Duration> hint,
                                            absl::Time deadline);

}  // namespace pdserve

#endif  // PDSERVE_CLIENT_RETRY_POLICY_H_
