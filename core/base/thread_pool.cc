#include "core/base/thread_pool.h"

#include <immintrin.h>

#include <algorithm>

namespace pdserve {
namespace {

// Spins before sleeping on a futex: long enough to bridge the gap between the kernels of one
// forward pass, short enough not to steal a core from other processes on a loaded machine.
constexpr int kSpinIterations = 4000;

// [begin, end) of range `index` out of `parts` over [0, n), boundaries aligned to `grain`.
std::pair<int64_t, int64_t> SplitRange(int64_t n, int64_t grain, int parts, int index) {
  int64_t chunks = (n + grain - 1) / grain;
  int64_t per = chunks / parts;
  int64_t extra = chunks % parts;
  int64_t first = index * per + std::min<int64_t>(index, extra);
  int64_t count = per + (index < extra ? 1 : 0);
  return {std::min(n, first * grain), std::min(n, (first + count) * grain)};
}

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  stop_.store(true, std::memory_order_release);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  for (std::thread& t : workers_) {
    t.join();
  }
}

void ThreadPool::RunRange(int thread_index) {
  if (dynamic_) {
    for (int64_t begin; (begin = next_.fetch_add(grain_, std::memory_order_relaxed)) < n_;) {
      (*fn_)(begin, std::min(n_, begin + grain_), thread_index);
    }
    return;
  }
  auto [begin, end] = SplitRange(n_, grain_, num_threads_, thread_index);
  if (begin < end) {
    (*fn_)(begin, end, thread_index);
  }
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain, const RangeFn& fn) {
  Run(n, grain, /*dynamic=*/false, fn);
}

void ThreadPool::ParallelForDynamic(int64_t n, int64_t chunk, const RangeFn& fn) {
  Run(n, chunk, /*dynamic=*/true, fn);
}

void ThreadPool::Run(int64_t n, int64_t grain, bool dynamic, const RangeFn& fn) {
  if (n <= 0) {
    return;
  }
  fn_ = &fn;
  n_ = n;
  grain_ = std::max<int64_t>(1, grain);
  dynamic_ = dynamic;
  next_.store(0, std::memory_order_relaxed);
  if (num_threads_ == 1 || n <= grain_) {  // one range: no worker to wake or wait for
    RunRange(0);
    fn_ = nullptr;
    return;
  }
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_acq_rel);
  generation_.notify_all();
  RunRange(0);
  for (int spin = 0; spin < kSpinIterations && pending_.load(std::memory_order_acquire) != 0;
       ++spin) {
    _mm_pause();
  }
  for (int left; (left = pending_.load(std::memory_order_acquire)) != 0;) {
    pending_.wait(left, std::memory_order_acquire);
  }
  fn_ = nullptr;
}

void ThreadPool::RunOnAll(const std::function<void(int thread_index)>& fn) {
  ParallelFor(num_threads_, 1, [&fn](int64_t begin, int64_t end, int) {
    for (int64_t i = begin; i < end; ++i) {
      fn(static_cast<int>(i));
    }
  });
}

void ThreadPool::WorkerLoop(int thread_index) {
  uint64_t seen = 0;
  while (true) {
    uint64_t current = generation_.load(std::memory_order_acquire);
    for (int spin = 0; current == seen && spin < kSpinIterations; ++spin) {
      _mm_pause();
      current = generation_.load(std::memory_order_acquire);
    }
    if (current == seen) {
      generation_.wait(seen, std::memory_order_acquire);
      continue;
    }
    seen = current;
    if (stop_.load(std::memory_order_acquire)) {
      return;
    }
    RunRange(thread_index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      pending_.notify_one();
    }
  }
}

}  // namespace pdserve
