// ThreadPool: ParallelFor covers [0, n) exactly once with ordered, grain-aligned, balanced ranges
// (one per thread) for many n/grain/thread combinations; RunOnAll runs every thread index once on
// distinct threads; a job of one range runs on the caller; many consecutive calls, calls after the
// workers fell asleep, and real concurrency between threads.
#include "core/base/thread_pool.h"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

struct Range {
  int64_t begin = -1;
  int64_t end = -1;
  int calls = 0;
};

// Runs one ParallelFor and checks every property of the split it made.
void CheckParallelFor(ThreadPool& pool, int64_t n, int64_t grain) {
  SCOPED_TRACE(testing::Message() << "threads " << pool.size() << " n " << n << " grain " << grain);
  std::vector<std::atomic<int>> hits(static_cast<size_t>(std::max<int64_t>(n, 0)));
  for (auto& h : hits) h.store(0);
  std::vector<Range> ranges(pool.size());
  std::atomic<int> bad_thread{0};
  pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end, int thread) {
    if (thread < 0 || thread >= pool.size()) {
      bad_thread.fetch_add(1);
      return;
    }
    ranges[thread].begin = begin;  // each thread writes only its own slot
    ranges[thread].end = end;
    ++ranges[thread].calls;
    for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1, std::memory_order_relaxed);
  });
  ASSERT_EQ(bad_thread.load(), 0);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << i;

  // Non-empty ranges only, at most one per thread, in thread order, aligned to the grain.
  const int64_t g = std::max<int64_t>(grain, 1);
  const int64_t chunks = n > 0 ? (n + g - 1) / g : 0;
  int64_t next = 0, min_chunks = INT64_MAX, max_chunks = 0;
  for (int t = 0; t < pool.size(); ++t) {
    const Range& r = ranges[t];
    ASSERT_LE(r.calls, 1) << "thread " << t;
    if (r.calls == 0) {
      min_chunks = 0;
      continue;
    }
    ASSERT_LT(r.begin, r.end) << "thread " << t << " got an empty range";
    EXPECT_EQ(r.begin, next) << "thread " << t << " range out of order";
    EXPECT_EQ(r.begin % g, 0) << "thread " << t << " begin not aligned";
    const int64_t range_chunks = (r.end - r.begin + g - 1) / g;
    min_chunks = std::min(min_chunks, range_chunks);
    max_chunks = std::max(max_chunks, range_chunks);
    next = r.end;
  }
  EXPECT_EQ(next, std::max<int64_t>(n, 0));
  if (chunks >= pool.size()) {
    EXPECT_LE(max_chunks - min_chunks, 1) << "ranges are unbalanced";
  }
}

TEST(ThreadPoolTest, ParallelForCoversEveryIndexOnce) {
  for (int threads : {1, 2, 3, 4, 7, 8}) {
    ThreadPool pool(threads);
    ASSERT_EQ(pool.size(), threads);
    for (int64_t n : {0, 1, 2, 3, 5, 7, 8, 9, 16, 63, 64, 65, 100, 1000, 1023, 4097}) {
      for (int64_t grain : {1, 2, 3, 4, 16, 64, 1000, 5000}) CheckParallelFor(pool, n, grain);
    }
  }
}

TEST(ThreadPoolTest, ParallelForDynamicCoversEveryIndexOnceInChunks) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 5, 64, 1000, 4097}) {
      for (int64_t chunk : {1, 3, 64, 5000}) {
        std::vector<std::atomic<int>> hits(std::max<int64_t>(n, 1));
        std::atomic<bool> bad_range{false};
        pool.ParallelForDynamic(n, chunk, [&](int64_t begin, int64_t end, int thread) {
          if (begin % chunk != 0 || end - begin > chunk || thread < 0 || thread >= threads) {
            bad_range = true;
          }
          for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
        });
        EXPECT_FALSE(bad_range) << threads << " " << n << " " << chunk;
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << i;
      }
    }
  }
}

TEST(ThreadPoolTest, FewerItemsThanThreads) {
  ThreadPool pool(8);
  for (int64_t n : {1, 2, 3, 7}) CheckParallelFor(pool, n, 1);
  // A grain larger than n leaves a single range.
  CheckParallelFor(pool, 5, 16);
}

// A job of one range (n ≤ grain) runs on the calling thread as thread 0, for both splits.
TEST(ThreadPoolTest, OneRangeRunsOnTheCaller) {
  ThreadPool pool(4);
  const std::thread::id caller = std::this_thread::get_id();
  for (int64_t n : {1, 7, 16}) {
    for (bool dynamic : {false, true}) {
      int calls = 0;
      std::thread::id ran_on;
      const ThreadPool::RangeFn fn = [&](int64_t begin, int64_t end, int thread) {
        ++calls;  // only the caller runs: no race
        ran_on = std::this_thread::get_id();
        EXPECT_EQ(begin, 0);
        EXPECT_EQ(end, n);
        EXPECT_EQ(thread, 0);
      };
      dynamic ? pool.ParallelForDynamic(n, 16, fn) : pool.ParallelFor(n, 16, fn);
      EXPECT_EQ(calls, 1) << n << (dynamic ? " dynamic" : " static");
      EXPECT_EQ(ran_on, caller) << n << (dynamic ? " dynamic" : " static");
    }
  }
}

TEST(ThreadPoolTest, NonPositiveGrainAndNAreHandled) {
  ThreadPool pool(3);
  CheckParallelFor(pool, 10, 0);
  CheckParallelFor(pool, 10, -4);
  int calls = 0;
  pool.ParallelFor(0, 1, [&](int64_t, int64_t, int) { ++calls; });
  pool.ParallelFor(-5, 1, [&](int64_t, int64_t, int) { ++calls; });
  EXPECT_EQ(calls, 0);
}

TEST(ThreadPoolTest, SizeIsAtLeastOne) {
  EXPECT_EQ(ThreadPool(0).size(), 1);
  EXPECT_EQ(ThreadPool(-2).size(), 1);
  ThreadPool pool(0);
  int64_t covered = 0;
  pool.ParallelFor(10, 1, [&](int64_t begin, int64_t end, int thread) {
    EXPECT_EQ(thread, 0);
    covered += end - begin;
  });
  EXPECT_EQ(covered, 10);
}

TEST(ThreadPoolTest, RunOnAllRunsEachThreadIndexOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int round = 0; round < 20; ++round) {
      std::vector<std::atomic<int>> calls(threads);
      for (auto& c : calls) c.store(0);
      std::mutex mu;
      std::set<std::thread::id> ids;
      std::thread::id first_id;
      pool.RunOnAll([&](int index) {
        ASSERT_GE(index, 0);
        ASSERT_LT(index, threads);
        calls[index].fetch_add(1);
        std::lock_guard<std::mutex> lock(mu);
        ids.insert(std::this_thread::get_id());
        if (index == 0) first_id = std::this_thread::get_id();
      });
      for (int i = 0; i < threads; ++i) ASSERT_EQ(calls[i].load(), 1) << "index " << i;
      EXPECT_EQ(ids.size(), static_cast<size_t>(threads)) << "indices must run on distinct threads";
      EXPECT_EQ(first_id, std::this_thread::get_id()) << "index 0 runs on the calling thread";
    }
  }
}

TEST(ThreadPoolTest, ManyConsecutiveCalls) {
  ThreadPool pool(3);
  constexpr int kCalls = 2000;
  std::vector<int64_t> data(1000, 0);
  for (int call = 0; call < kCalls; ++call) {
    const int64_t n = 1 + call % 1000;
    pool.ParallelFor(n, 1 + call % 7, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) ++data[i];
    });
  }
  // Index i is covered by every call with n > i.
  for (int64_t i = 0; i < 1000; ++i) {
    int64_t want = 0;
    for (int call = 0; call < kCalls; ++call) want += (1 + call % 1000) > i ? 1 : 0;
    ASSERT_EQ(data[i], want) << "index " << i;
  }
}

// Calls spaced out so workers stop spinning and sleep; every call must still wake them.
TEST(ThreadPoolTest, WakesSleepingWorkers) {
  ThreadPool pool(3);
  for (int round = 0; round < 10; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::atomic<int64_t> sum{0};
    pool.ParallelFor(300, 1, [&](int64_t begin, int64_t end, int) {
      for (int64_t i = begin; i < end; ++i) sum.fetch_add(i);
    });
    ASSERT_EQ(sum.load(), 299 * 300 / 2) << "round " << round;
  }
}

// Every range really runs concurrently: each waits (with a generous timeout) for all the others.
TEST(ThreadPoolTest, RangesRunConcurrently) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::atomic<int> arrived{0};
    std::atomic<bool> all_met{true};
    pool.RunOnAll([&](int) {
      arrived.fetch_add(1);
      auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      while (arrived.load() < threads) {
        if (std::chrono::steady_clock::now() > deadline) {
          all_met = false;
          return;
        }
        std::this_thread::yield();
      }
    });
    EXPECT_TRUE(all_met.load()) << "threads " << threads;
  }
}

TEST(ThreadPoolTest, ConstructAndDestroyRepeatedly) {
  for (int i = 0; i < 50; ++i) {
    ThreadPool idle(1 + i % 4);  // destroyed without ever running a job
  }
  for (int i = 0; i < 50; ++i) {
    ThreadPool pool(1 + i % 4);
    std::atomic<int> count{0};
    pool.ParallelFor(17, 2, [&](int64_t begin, int64_t end, int) {
      count.fetch_add(static_cast<int>(end - begin));
    });
    EXPECT_EQ(count.load(), 17);
  }
}

}  // namespace
}  // namespace pdserve
