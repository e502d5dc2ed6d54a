#include "services/decode/decode_stream.h"

#include <utility>

namespace pdserve {

void DecodeStream::Push(int32_t token) {
  {
    MutexLock lock(&mu_);
    if (finished_) return;
    tokens_.push_back(token);
  }
  cv_.SignalAll();
}

void DecodeStream::PushLast(int32_t token, v1::FinishReason reason) {
  {
    MutexLock lock(&mu_);
    if (finished_) return;
    tokens_.push_back(token);
    finished_ = true;
    reason_ = reason;
  }
  cv_.SignalAll();
}

void DecodeStream::Fail(const absl::Status& status) {
  {
    MutexLock lock(&mu_);
    if (finished_) return;
    finished_ = true;
    status_ = status;
  }
  cv_.SignalAll();
}

DecodeStream::Taken DecodeStream::Take(absl::Time deadline) {
  MutexLock lock(&mu_);
  while (tokens_.empty() && !finished_ && !cv_.WaitWithDeadline(&mu_, deadline)) {
  }
  Taken taken;
  taken.tokens = std::move(tokens_);
  tokens_.clear();
  taken.finished = finished_;
  taken.reason = reason_;
  taken.status = status_;
  return taken;
}

void DecodeStream::Cancel() {
  MutexLock lock(&mu_);
  cancelled_ = true;
}

bool DecodeStream::cancelled() const {
  MutexLock lock(&mu_);
  return cancelled_;
}

bool DecodeStream::finished() const {
  MutexLock lock(&mu_);
  return finished_;
}

bool DecodeStream::WaitFinished(absl::Time deadline) {
  MutexLock lock(&mu_);
  while (!finished_ && !cv_.WaitWithDeadline(&mu_, deadline)) {
  }
  return finished_;
}

}  // namespace pdserve
