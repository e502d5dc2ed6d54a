#include "services/common/admission_queue.h"

#include <atomic>
#include <optional>
#include <thread>
#include <vector>

#include "core/base/mutex.h"
#include "gtest/gtest.h"
#include "proto/retry_hint.h"

namespace pdserve {
namespace {

const std::function<bool()> kNeverCancelled = [] { return false; };

AdmissionQueue::Options Limits(int active, int queued, int64_t bytes = int64_t{1} << 30) {
  AdmissionQueue::Options o;
  o.name = "test";
  o.max_active = active;
  o.max_queued = queued;
  o.max_queued_bytes = bytes;
  o.cancel_poll = absl::Milliseconds(5);
  return o;
}

// Polls `done` until it holds (10 s at most): waits for other threads to reach a state, it does
// not order them.
bool Eventually(const std::function<bool()>& done) {
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (!done()) {
    if (absl::Now() > give_up) return false;
    absl::SleepFor(absl::Milliseconds(1));
  }
  return true;
}

TEST(AdmissionQueueTest, AdmitsAtOnceUpToTheActiveLimit) {
  AdmissionQueue queue(Limits(2, 4));
  absl::StatusOr<AdmissionQueue::Ticket> a =
      queue.Admit(10, absl::InfiniteFuture(), kNeverCancelled);
  absl::StatusOr<AdmissionQueue::Ticket> b =
      queue.Admit(10, absl::InfiniteFuture(), kNeverCancelled);
  ASSERT_TRUE(a.ok() && b.ok());
  EXPECT_EQ(a->waited(), absl::ZeroDuration());
  EXPECT_EQ(queue.active(), 2);
  EXPECT_EQ(queue.queued(), 0);
  *a = AdmissionQueue::Ticket();  // released
  EXPECT_EQ(queue.active(), 1);
}

TEST(AdmissionQueueTest, WaitersAreAdmittedInArrivalOrder) {
  AdmissionQueue queue(Limits(1, 8));
  std::optional<absl::StatusOr<AdmissionQueue::Ticket>> first;
  first.emplace(queue.Admit(1, absl::InfiniteFuture(), kNeverCancelled));
  ASSERT_TRUE(first->ok());
  Mutex mu;
  std::vector<int> order;
  std::vector<std::thread> threads;
  for (int i = 0; i < 5; ++i) {
    threads.emplace_back([&, i] {
      absl::StatusOr<AdmissionQueue::Ticket> t =
          queue.Admit(100 + i, absl::InfiniteFuture(), kNeverCancelled);
      ASSERT_TRUE(t.ok()) << t.status();
      MutexLock lock(&mu);
      order.push_back(i);
    });  // the ticket is released as the thread ends, admitting the next waiter
    ASSERT_TRUE(Eventually([&] { return queue.queued() == i + 1; }));
  }
  EXPECT_EQ(queue.queued_bytes(), 100 + 101 + 102 + 103 + 104);
  first.reset();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(queue.active(), 0);
  EXPECT_EQ(queue.queued(), 0);
  EXPECT_EQ(queue.queued_bytes(), 0);
}

TEST(AdmissionQueueTest, BeyondTheQueueBoundRequestsAreRefusedWithARetryHint) {
  AdmissionQueue queue(Limits(1, 1));
  absl::StatusOr<AdmissionQueue::Ticket> running =
      queue.Admit(1, absl::InfiniteFuture(), kNeverCancelled);
  ASSERT_TRUE(running.ok());
  std::atomic<bool> stop{false};
  std::thread waiter([&] {
    absl::StatusOr<AdmissionQueue::Ticket> t =
        queue.Admit(1, absl::InfiniteFuture(), [&] { return stop.load(); });
    EXPECT_EQ(t.status().code(), absl::StatusCode::kCancelled);
  });
  ASSERT_TRUE(Eventually([&] { return queue.queued() == 1; }));
  absl::StatusOr<AdmissionQueue::Ticket> refused =
      queue.Admit(1, absl::InfiniteFuture(), kNeverCancelled);
  EXPECT_EQ(refused.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("1 queued"), std::string::npos) << refused.status();
  EXPECT_EQ(RetryHint(refused.status()), absl::Seconds(1));
  EXPECT_EQ(RetryHint(absl::ResourceExhaustedError("other")), std::nullopt);
  stop = true;
  waiter.join();
  EXPECT_EQ(queue.queued(), 0);
}

TEST(AdmissionQueueTest, TheByteBoundRefusesARequestTooLargeToHold) {
  AdmissionQueue queue(Limits(1, 100, 1000));
  absl::StatusOr<AdmissionQueue::Ticket> running =
      queue.Admit(5000, absl::InfiniteFuture(), kNeverCancelled);  // running: not counted
  ASSERT_TRUE(running.ok());
  absl::StatusOr<AdmissionQueue::Ticket> big =
      queue.Admit(1001, absl::InfiniteFuture(), kNeverCancelled);
  EXPECT_EQ(big.status().code(), absl::StatusCode::kResourceExhausted);
  EXPECT_EQ(queue.queued_bytes(), 0);
}

TEST(AdmissionQueueTest, AWaiterLeavesAtItsDeadlineAndTheNextMovesUp) {
  AdmissionQueue queue(Limits(1, 4));
  std::optional<absl::StatusOr<AdmissionQueue::Ticket>> running;
  running.emplace(queue.Admit(1, absl::InfiniteFuture(), kNeverCancelled));
  absl::StatusOr<AdmissionQueue::Ticket> late;
  std::thread first(
      [&] { late = queue.Admit(7, absl::Now() + absl::Milliseconds(30), kNeverCancelled); });
  ASSERT_TRUE(Eventually([&] { return queue.queued() == 1; }));
  std::atomic<bool> second_admitted{false};
  std::thread second([&] {
    absl::StatusOr<AdmissionQueue::Ticket> t =
        queue.Admit(1, absl::InfiniteFuture(), kNeverCancelled);
    EXPECT_TRUE(t.ok());
    EXPECT_GT(t->waited(), absl::ZeroDuration());
    second_admitted = true;
  });
  first.join();
  EXPECT_EQ(late.status().code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(late.status().message().find("in the test queue"), std::string::npos) << late.status();
  EXPECT_EQ(queue.queued(), 1);  // the second waiter, still behind the running request
  EXPECT_FALSE(second_admitted.load());
  running.reset();
  second.join();
  EXPECT_TRUE(second_admitted.load());
  EXPECT_EQ(queue.active(), 0);
}

TEST(AdmissionQueueTest, ManyThreadsNeverExceedTheActiveLimit) {
  AdmissionQueue queue(Limits(3, 64));
  std::atomic<int> running{0}, peak{0}, done{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 32; ++i) {
    threads.emplace_back([&] {
      for (int k = 0; k < 20; ++k) {
        absl::StatusOr<AdmissionQueue::Ticket> t =
            queue.Admit(1, absl::InfiniteFuture(), kNeverCancelled);
        ASSERT_TRUE(t.ok()) << t.status();
        const int now = ++running;
        int seen = peak.load();
        while (now > seen && !peak.compare_exchange_weak(seen, now)) {
        }
        --running;
        ++done;
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(done.load(), 32 * 20);
  EXPECT_LE(peak.load(), 3);
  EXPECT_EQ(queue.active(), 0);
  EXPECT_EQ(queue.queued(), 0);
}

TEST(AdmissionQueueTest, ValidateNamesTheBadOption) {
  EXPECT_TRUE(AdmissionQueue::Validate(Limits(1, 0)).ok());
  EXPECT_NE(AdmissionQueue::Validate(Limits(0, 1)).message().find("max_active"), std::string::npos);
  EXPECT_NE(AdmissionQueue::Validate(Limits(1, -1)).message().find("max_queued"),
            std::string::npos);
}

}  // namespace
}  // namespace pdserve
