#include "client/retry_policy.h"

#include <algorithm>
#include <random>

namespace pdserve {

absl::Status RetryPolicy::Validate() const {
  if (max_retries < -1) return absl::InvalidArgumentError("retry: max_retries < -1");
  if (initial_backoff <= absl::ZeroDuration() || max_backoff < initial_backoff) {
    return absl::InvalidArgumentError("retry: need 0 < initial_backoff <= max_backoff");
  }
  if (max_hint < absl::ZeroDuration()) return absl::InvalidArgumentError("retry: max_hint < 0");
  if (!(jitter >= 0 && jitter <= 1))
    return absl::InvalidArgumentError("retry: jitter not in [0, 1]");
  return absl::OkStatus();
}

absl::Duration RetryDelay(const RetryPolicy& policy, int retry, std::optional<absl::Duration> hint,
                          double uniform) {
  absl::Duration wait;
  if (hint.has_value() && *hint >= absl::ZeroDuration() && *hint <= policy.max_hint) {
    wait = *hint;
  } else {
    wait = policy.initial_backoff;
    for (int i = 0; i < retry && wait < policy.max_backoff; ++i) wait *= 2;
    wait = std::min(wait, policy.max_backoff);
  }
  return wait * (1.0 + policy.jitter * std::clamp(uniform, 0.0, 1.0));
}

std::optional<absl::Duration> NextRetryWait(const RetryPolicy& policy, int retries,
                                            std::optional<absl::Duration> hint,
                                            absl::Time deadline) {
  if (!policy.MayRetry(retries)) return std::nullopt;
  const absl::Duration wait = RetryDelay(policy, retries, hint, RetryJitter());
  if (absl::Now() + wait >= deadline) return std::nullopt;  // no time left for another try
  return wait;
}

double RetryJitter() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  return std::uniform_real_distribution<double>(0.0, 1.0)(rng);
}

}  // namespace pdserve
