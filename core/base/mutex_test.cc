#include "core/base/mutex.h"

#include <thread>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

TEST(CondVarTest, WaitReturnsOnceSignalledWithTheMutexHeld) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  int seen = 0;
  std::thread waiter([&] {
    MutexLock lock(&mu);
    while (!ready) cv.Wait(&mu);
    seen = 1;  // written under mu: the main thread reads it under mu below
  });
  {
    MutexLock lock(&mu);
    ready = true;
  }
  cv.SignalAll();
  waiter.join();
  MutexLock lock(&mu);
  EXPECT_EQ(seen, 1);
}

TEST(CondVarTest, TimedWaitsReportTheirTimeout) {
  Mutex mu;
  CondVar cv;
  MutexLock lock(&mu);
  const absl::Time start = absl::Now();
  EXPECT_TRUE(cv.WaitWithTimeout(&mu, absl::Milliseconds(20)));
  EXPECT_TRUE(cv.WaitWithDeadline(&mu, absl::Now() + absl::Milliseconds(20)));
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(40));
  EXPECT_TRUE(cv.WaitWithDeadline(&mu, absl::Now() - absl::Seconds(1)));  // already past
}

TEST(CondVarTest, ATimedWaitEndsEarlyWhenSignalled) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  std::thread signaller([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  });
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  {
    MutexLock lock(&mu);
    while (!ready) EXPECT_FALSE(cv.WaitWithDeadline(&mu, deadline));
  }
  EXPECT_LT(absl::Now(), deadline);
  signaller.join();
}

}  // namespace
}  // namespace pdserve
