#include "tools/loadgen/runner.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <deque>
#include <memory>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"
#include "tools/loadgen/report.h"

namespace pdserve::loadgen {
namespace {

using Clock = std::chrono::steady_clock;

// State shared by the request threads, the waiting caller and the progress line.
class RunState {
 public:
  RunState(size_t total, const RunOptions& options)
      : total_(total), options_(options), start_(Clock::now()) {
    for (size_t i = 0; i < total; ++i) cancellations_.push_back(std::make_unique<Cancellation>());
  }

  double Now() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }
  Clock::time_point start() const { return start_; }
  bool Expired() const { return options_.duration_s > 0 && Now() >= options_.duration_s; }
  Cancellation& cancellation(size_t i) { return *cancellations_[i]; }

  void Sent() {
    MutexLock lock(&mutex_);
    ++sent_;
  }
  void Done(const RequestRecord& r) {
    MutexLock lock(&mutex_);
    ++done_;
    if (!r.ok() && !r.abandoned) ++errors_;
    if (!r.token_s.empty()) ttft_.push_back(r.ttft());
    recent_.push_back(Now());
  }
  // One unit of work (an open-loop request thread, or a closed-loop client) has ended.
  void Finish() {
    MutexLock lock(&mutex_);
    ++finished_;
    finished_cv_.SignalAll();
  }
  // Blocks until `target` units have finished, cancelling every request still running once the
  // duration limit passes.
  void WaitAll(size_t target) {
    if (options_.duration_s > 0) {
      const absl::Time limit = absl::Now() + absl::Seconds(options_.duration_s - Now());
      bool timed_out;
      {
        MutexLock lock(&mutex_);
        while (finished_ < target && !finished_cv_.WaitWithDeadline(&mutex_, limit)) {
        }
        timed_out = finished_ < target;
      }
      if (timed_out) {
        for (auto& c : cancellations_) c->Cancel();
      }
    }
    MutexLock lock(&mutex_);
    while (finished_ < target) finished_cv_.Wait(&mutex_);
  }
  // The progress line, redrawn until `stop`.
  void Progress(std::atomic<bool>& stop) {
    while (!stop.load()) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      std::string line;
      {
        MutexLock lock(&mutex_);
        const double now = Now();
        while (!recent_.empty() && recent_.front() < now - 5) recent_.pop_front();
        const double window = std::min(now, 5.0);
        const double p50 = Percentile(ttft_, 50);
        line = absl::StrCat(
            "\rloadgen: sent ", sent_, "/", total_, "  done ", done_, "  errors ", errors_,
            "  rate ", absl::StrFormat("%.2f", window > 0 ? recent_.size() / window : 0),
            " req/s  TTFT p50 ",
            ttft_.empty() ? std::string("-") : absl::StrFormat("%.1f ms", p50 * 1e3), "    ");
      }
      std::fputs(line.c_str(), options_.progress);
      std::fflush(options_.progress);
    }
    std::fputs("\n", options_.progress);
  }

 private:
  const size_t total_;
  const RunOptions options_;
  const Clock::time_point start_;
  std::vector<std::unique_ptr<Cancellation>> cancellations_;
  Mutex mutex_;
  size_t sent_ ABSL_GUARDED_BY(mutex_) = 0;
  size_t done_ ABSL_GUARDED_BY(mutex_) = 0;
  size_t errors_ ABSL_GUARDED_BY(mutex_) = 0;
  size_t finished_ ABSL_GUARDED_BY(mutex_) = 0;
  CondVar finished_cv_;  // signalled when finished_ grows
  std::vector<double> ttft_ ABSL_GUARDED_BY(mutex_);
  std::deque<double> recent_ ABSL_GUARDED_BY(mutex_);  // completion times, last 5 s
};

void RunOne(Backend& backend, const RequestSpec& spec, const RunOptions& options, RunState& state,
            RequestRecord& r) {
  r.sent = true;
  r.send_s = state.Now();
  state.Sent();
  r.token_s.reserve(static_cast<size_t>(spec.output_tokens));
  BackendRequest request{&spec.prompt, spec.output_tokens, options.timeout_s, options.retry};
  BackendResult result = backend.Send(request, state.cancellation(static_cast<size_t>(spec.index)),
                                      [&] { r.token_s.push_back(state.Now()); });
  r.done_s = state.Now();
  r.output_tokens = result.output_tokens;
  r.code = result.code;
  r.error = result.message;
  r.retries = result.retries;
  r.queue_s = result.queue_s;
  r.cached_tokens = result.cached_tokens;
  if (r.code != kCodeOk && result.cancelled) {
    r.abandoned = true;
  } else if (r.code == kCodeOk && r.token_s.empty()) {
    r.code = "NO_TOKENS";
    r.error = "the stream carried no token";
  } else if (r.code == kCodeOk && r.output_tokens < r.requested_tokens) {
    r.code = kCodeShortOutput;
    r.error = absl::StrCat(r.output_tokens, " of ", r.requested_tokens, " tokens");
  }
  state.Done(r);
}

}  // namespace

std::vector<RequestRecord> RunWorkload(Backend& backend, const std::vector<RequestSpec>& specs,
                                       const RunOptions& options) {
  std::vector<RequestRecord> records(specs.size());
  for (size_t i = 0; i < specs.size(); ++i) {
    RequestRecord& r = records[i];
    r.id = specs[i].index;
    r.warmup = specs[i].warmup;
    r.scheduled_s = specs[i].arrival_s;
    r.prompt_tokens = static_cast<int>(specs[i].prompt.size());
    r.requested_tokens = specs[i].output_tokens;
  }
  // Specs are indexed by position (RunOne uses spec.index for the cancellation slot).
  std::vector<RequestSpec> indexed = specs;
  for (size_t i = 0; i < indexed.size(); ++i) indexed[i].index = static_cast<int>(i);

  RunState state(specs.size(), options);
  std::atomic<bool> stop_progress{false};
  std::thread progress;
  if (options.progress != nullptr) progress = std::thread([&] { state.Progress(stop_progress); });

  // Units of work: a conversation's turns in order, or one lone request.
  std::vector<std::vector<size_t>> units;
  for (size_t i = 0; i < indexed.size(); ++i) {
    const bool same = i > 0 && indexed[i].conversation >= 0 &&
                      indexed[i].conversation == indexed[i - 1].conversation;
    if (same) {
      units.back().push_back(i);
    } else {
      units.push_back({i});
    }
  }
  auto run_unit = [&](const std::vector<size_t>& unit) {
    for (size_t k = 0; k < unit.size() && !state.Expired(); ++k) {
      if (k > 0) {  // the user reads the answer and types the next message
        std::this_thread::sleep_for(std::chrono::duration<double>(options.think_time_s));
        if (state.Expired()) break;
        records[unit[k]].scheduled_s = state.Now();
      }
      RunOne(backend, indexed[unit[k]], options, state, records[unit[k]]);
    }
  };

  std::vector<std::thread> threads;
  size_t launched = 0;
  if (options.concurrency > 0) {
    std::atomic<size_t> next{0};
    for (int c = 0; c < options.concurrency; ++c) {
      threads.emplace_back([&] {
        for (size_t u = next++; u < units.size() && !state.Expired(); u = next++) {
          run_unit(units[u]);
        }
        state.Finish();
      });
    }
    state.WaitAll(static_cast<size_t>(options.concurrency));
    for (std::thread& t : threads) t.join();
  } else {
    std::vector<size_t> order(units.size());
    std::iota(order.begin(), order.end(), 0);
    auto arrival = [&](size_t u) { return indexed[units[u].front()].arrival_s; };
    std::stable_sort(order.begin(), order.end(),
                     [&](size_t a, size_t b) { return arrival(a) < arrival(b); });
    for (size_t u : order) {
      const Clock::time_point when =
          state.start() + std::chrono::microseconds(static_cast<int64_t>(arrival(u) * 1e6));
      if (options.duration_s > 0 && arrival(u) >= options.duration_s) break;
      std::this_thread::sleep_until(when);
      if (state.Expired()) break;
      threads.emplace_back([&, u] {
        run_unit(units[u]);
        state.Finish();
      });
      ++launched;
    }
    state.WaitAll(launched);
    for (std::thread& t : threads) t.join();
  }
  stop_progress = true;
  if (progress.joinable()) progress.join();
  return records;
}

}  // namespace pdserve::loadgen
