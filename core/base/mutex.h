// Mutex, MutexLock and CondVar: the project's lock and condition variable. A Mutex is a std::mutex
// with Clang's thread-safety annotations (absl/base/thread_annotations.h), so that a Clang build
// (-Wthread-safety, the tsan preset) checks every ABSL_GUARDED_BY field and every
// ABSL_EXCLUSIVE_LOCKS_REQUIRED function; and it locks through pthreads, which ThreadSanitizer
// intercepts — Debian's prebuilt Abseil is not instrumented, so an absl::Mutex is invisible to TSan
// and every field it guards would be reported as a race.
//
// Waiting: CondVar::Wait* release the mutex while blocked and hold it again on return; callers
// loop on their condition (`while (!ready_) cv_.Wait(&mu_);`), since wakeups may be spurious, and
// whoever changes the condition signals the CondVar.
#ifndef PDSERVE_CORE_BASE_MUTEX_H_
#define PDSERVE_CORE_BASE_MUTEX_H_

#include <condition_variable>
#include <mutex>

#include "absl/base/thread_annotations.h"
#include "absl/time/time.h"

namespace pdserve {

class ABSL_LOCKABLE Mutex {
 public:
  Mutex() = default;
  Mutex(const Mutex&) = delete;
  Mutex& operator=(const Mutex&) = delete;

  void Lock() ABSL_EXCLUSIVE_LOCK_FUNCTION() { mu_.lock(); }
  void Unlock() ABSL_UNLOCK_FUNCTION() { mu_.unlock(); }
  // Tells the analysis the caller holds the lock (where it cannot see it); checks nothing.
  void AssertHeld() const ABSL_ASSERT_EXCLUSIVE_LOCK() {}

 private:
  friend class CondVar;
  std::mutex mu_;
};

// Holds `mu` for its scope.
class ABSL_SCOPED_LOCKABLE MutexLock {
 public:
  explicit MutexLock(Mutex* mu) ABSL_EXCLUSIVE_LOCK_FUNCTION(mu) : mu_(mu) { mu_->Lock(); }
  ~MutexLock() ABSL_UNLOCK_FUNCTION() { mu_->Unlock(); }
  MutexLock(const MutexLock&) = delete;
  MutexLock& operator=(const MutexLock&) = delete;

 private:
  Mutex* const mu_;
};

class CondVar {
 public:
  // Blocks until signalled (or spuriously woken).
  void Wait(Mutex* mu) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  // As Wait, or until `deadline` / for `timeout`; true when it returned at the deadline. An
  // infinite deadline or timeout waits like Wait.
  bool WaitWithDeadline(Mutex* mu, absl::Time deadline) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  bool WaitWithTimeout(Mutex* mu, absl::Duration timeout) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu);
  void Signal() { cv_.notify_one(); }
  void SignalAll() { cv_.notify_all(); }

 private:
  std::condition_variable cv_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_MUTEX_H_
