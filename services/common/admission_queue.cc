#include "services/common/admission_queue.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/retry_hint.h"

namespace pdserve {

AdmissionQueue::Ticket::Ticket(Ticket&& other) noexcept
    : queue_(std::exchange(other.queue_, nullptr)), waited_(other.waited_) {}

AdmissionQueue::Ticket& AdmissionQueue::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    if (queue_ != nullptr) queue_->Release();
    queue_ = std::exchange(other.queue_, nullptr);
    waited_ = other.waited_;
  }
  return *this;
}

AdmissionQueue::Ticket::~Ticket() {
  if (queue_ != nullptr) queue_->Release();
}

AdmissionQueue::AdmissionQueue(Options options) : options_(options) {}

absl::Status AdmissionQueue::Validate(const Options& options) {
  if (options.max_active < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("admission: max_active ", options.max_active, " < 1"));
  }
  if (options.max_queued < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("admission: max_queued ", options.max_queued, " < 0"));
  }
  if (options.max_queued_bytes < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("admission: max_queued_bytes ", options.max_queued_bytes, " < 0"));
  }
  if (options.retry_after <= absl::ZeroDuration() || options.cancel_poll <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("admission: retry_after and cancel_poll must be positive");
  }
  return absl::OkStatus();
}

absl::StatusOr<AdmissionQueue::Ticket> AdmissionQueue::Admit(
    int64_t bytes, absl::Time deadline, const std::function<bool()>& cancelled) {
  const absl::Time start = absl::Now();
  MutexLock lock(&mu_);
  if (queued_ == 0 && active_ < options_.max_active) {
    ++active_;
    return Ticket(this, absl::ZeroDuration());
  }
  if (queued_ >= options_.max_queued || queued_bytes_ + bytes > options_.max_queued_bytes) {
    absl::Status refusal = absl::ResourceExhaustedError(absl::StrCat(
        options_.name, " overloaded: ", active_, " requests running (limit ", options_.max_active,
        ") and ", queued_, " queued holding ", queued_bytes_, " bytes (limits ",
        options_.max_queued, " requests, ", options_.max_queued_bytes, " bytes); retry after ",
        absl::FormatDuration(options_.retry_after)));
    SetRetryHint(refusal, options_.retry_after);
    return refusal;
  }
  auto self = waiters_.insert(waiters_.end(), Waiter{bytes, false});
  ++queued_;
  queued_bytes_ += bytes;
  while (!self->admitted) {
    const absl::Time now = absl::Now();
    const bool expired = now >= deadline;
    if (expired || cancelled()) {
      --queued_;
      queued_bytes_ -= self->bytes;
      waiters_.erase(self);
      if (expired) {
        return absl::DeadlineExceededError(
            absl::StrCat("waited ", absl::FormatDuration(now - start), " in the ", options_.name,
                         " queue without being admitted (deadline)"));
      }
      return absl::CancelledError("cancelled by the client while queued");
    }
    admitted_.WaitWithDeadline(&mu_, std::min(deadline, now + options_.cancel_poll));
  }
  waiters_.erase(self);  // AdmitWaitersLocked counted it active and released its place
  return Ticket(this, absl::Now() - start);
}

void AdmissionQueue::Release() {
  MutexLock lock(&mu_);
  --active_;
  AdmitWaitersLocked();
}

void AdmissionQueue::AdmitWaitersLocked() {
  for (Waiter& w : waiters_) {
    if (active_ >= options_.max_active) return;
    if (w.admitted) continue;
    w.admitted = true;
    --queued_;
    queued_bytes_ -= w.bytes;
    ++active_;
    admitted_.SignalAll();
  }
}

int AdmissionQueue::active() const {
  MutexLock lock(&mu_);
  return active_;
}

int AdmissionQueue::queued() const {
  MutexLock lock(&mu_);
  return queued_;
}

int64_t AdmissionQueue::queued_bytes() const {
  MutexLock lock(&mu_);
  return queued_bytes_;
}

}  // namespace pdserve
