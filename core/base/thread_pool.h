// A fixed pool of worker threads for data-parallel kernels. ParallelFor splits [0, n) into one
// contiguous range per thread; the calling thread runs the first range itself, so a pool of size 1
// has no workers and costs nothing, nor does a job of one range (n ≤ grain: a decode step's
// one-row norms and quantizations), which runs on the caller alone. Workers spin briefly, then
// sleep on an atomic wait.
//
// Thread-safety: one ParallelFor at a time per pool (the engine owns its pool); the body must be
// safe to run concurrently on disjoint ranges.
#ifndef PDSERVE_CORE_BASE_THREAD_POOL_H_
#define PDSERVE_CORE_BASE_THREAD_POOL_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

namespace pdserve {

class ThreadPool {
 public:
  // Body of a parallel loop: processes [begin, end) on thread `thread_index` in [0, size()).
  using RangeFn = std::function<void(int64_t begin, int64_t end, int thread_index)>;

  // `num_threads` ≥ 1 counts the calling thread.
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return num_threads_; }

  // Runs `fn` over [0, n) split into size() nearly equal ranges aligned to `grain` (the last
  // range takes the remainder); returns when every range is done.
  void ParallelFor(int64_t n, int64_t grain, const RangeFn& fn);

  // Runs `fn` over [0, n) in chunks of `chunk` indices that threads take in turn as they finish
  // (load balancing for uneven work or uneven threads); fn may run several times per thread.
  void ParallelForDynamic(int64_t n, int64_t chunk, const RangeFn& fn);

  // Runs fn(thread_index) once on every thread.
  void RunOnAll(const std::function<void(int thread_index)>& fn);

 private:
  void WorkerLoop(int thread_index);
  void RunRange(int thread_index);
  void Run(int64_t n, int64_t grain, bool dynamic, const RangeFn& fn);

  const int num_threads_;
  std::vector<std::thread> workers_;
  const RangeFn* fn_ = nullptr;  // valid while a job runs
  int64_t n_ = 0;
  int64_t grain_ = 1;
  bool dynamic_ = false;
  std::atomic<int64_t> next_{0};  // next unclaimed index of a dynamic job
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_THREAD_POOL_H_
