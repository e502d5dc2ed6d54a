#include "core/base/mutex.h"

#include <algorithm>
#include <chrono>

#include "absl/time/clock.h"

namespace pdserve {

void CondVar::Wait(Mutex* mu) {
  std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
  cv_.wait(lock);
  lock.release();  // the caller still holds mu
}

bool CondVar::WaitWithTimeout(Mutex* mu, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) {
    Wait(mu);
    return false;
  }
  std::unique_lock<std::mutex> lock(mu->mu_, std::adopt_lock);
  const bool timed_out =
      cv_.wait_for(lock, absl::ToChronoNanoseconds(timeout)) == std::cv_status::timeout;
  lock.release();
  return timed_out;
}

bool CondVar::WaitWithDeadline(Mutex* mu, absl::Time deadline) {
  if (deadline == absl::InfiniteFuture()) {
    Wait(mu);
    return false;
  }
  // Relative to the steady clock, so that a wall-clock step neither shortens nor stretches it.
  return WaitWithTimeout(mu, std::max(deadline - absl::Now(), absl::ZeroDuration()));
}

}  // namespace pdserve
