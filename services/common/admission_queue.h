// AdmissionQueue: first-come-first-served admission with bounds. Up to `max_active` requests run at
// once; the requests beyond them wait here, in arrival order, until one of the running requests
// ends. The wait is bounded: at most `max_queued` requests holding at most `max_queued_bytes` of
// request data (what a queued request keeps in memory); past either bound a request is refused at
// once with ResourceExhausted, carrying the time a client should wait before retrying (RetryHint,
// proto/retry_hint.h). A waiting request leaves the queue at its deadline (DeadlineExceeded) or
// when its caller is cancelled. The router's admission control; the prefill worker's line for KV
// pages (max_active 1).
//
// Thread-safe. Each admitted request holds a Ticket; destroying it frees the request's slot and
// admits the first waiter.
#ifndef PDSERVE_SERVICES_COMMON_ADMISSION_QUEUE_H_
#define PDSERVE_SERVICES_COMMON_ADMISSION_QUEUE_H_

#include <cstdint>
#include <functional>
#include <list>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"

namespace pdserve {

class AdmissionQueue {
 public:
  struct Options {
    // Names the queue in its refusals and timeouts ("router": "router overloaded: …", "waited
    // 2s in the router queue …").
    std::string name = "admission";
    int max_active = 256;
    int max_queued = 4096;
    int64_t max_queued_bytes = int64_t{256} << 20;
    // The retry hint a refusal carries.
    absl::Duration retry_after = absl::Seconds(1);
    // How often a waiter checks its `cancelled` callback.
    absl::Duration cancel_poll = absl::Milliseconds(50);
  };

  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    Ticket(const Ticket&) = delete;
    Ticket& operator=(const Ticket&) = delete;
    ~Ticket();
    // How long the request waited in the queue (zero when it was admitted at once).
    absl::Duration waited() const { return waited_; }

   private:
    friend class AdmissionQueue;
    Ticket(AdmissionQueue* queue, absl::Duration waited) : queue_(queue), waited_(waited) {}
    AdmissionQueue* queue_ = nullptr;
    absl::Duration waited_;
  };

  explicit AdmissionQueue(Options options);
  // InvalidArgument naming the first bad option.
  static absl::Status Validate(const Options& options);

  // Admits a request of `bytes`, waiting in arrival order while `max_active` requests run.
  // ResourceExhausted (with a RetryHint) when the queue is full; DeadlineExceeded when `deadline`
  // passes while waiting; Cancelled when `cancelled` returns true while waiting.
  absl::StatusOr<Ticket> Admit(int64_t bytes, absl::Time deadline,
                               const std::function<bool()>& cancelled);

  int active() const;
  int queued() const;
  int64_t queued_bytes() const;
  const Options& options() const { return options_; }

 private:
  struct Waiter {
    int64_t bytes = 0;
    bool admitted = false;
  };
  void Release();
  void AdmitWaitersLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  int active_ ABSL_GUARDED_BY(mu_) = 0;
  int queued_ ABSL_GUARDED_BY(mu_) = 0;  // waiters not yet admitted
  int64_t queued_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::list<Waiter> waiters_ ABSL_GUARDED_BY(mu_);  // arrival order; admitted ones leave
  CondVar admitted_;                                // signalled when a waiter is admitted
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_ADMISSION_QUEUE_H_
