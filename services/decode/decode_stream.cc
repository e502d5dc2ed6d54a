#include "services/decode/decode_stream.h"

#include <utility>

namespace pdserve {

void DecodeStream::Push(int32_t token) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    tokens_.push_back(token);
  }
  cv_.notify_all();
}

void DecodeStream::PushLast(int32_t token, v1::FinishReason reason) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    tokens_.push_back(token);
    finished_ = true;
    reason_ = reason;
  }
  cv_.notify_all();
}

void DecodeStream::Fail(const absl::Status& status) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (finished_) return;
    finished_ = true;
    status_ = status;
  }
  cv_.notify_all();
}

DecodeStream::Taken DecodeStream::Take(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return !tokens_.empty() || finished_; });
  Taken taken;
  taken.tokens = std::move(tokens_);
  tokens_.clear();
  taken.finished = finished_;
  taken.reason = reason_;
  taken.status = status_;
  return taken;
}

void DecodeStream::Cancel() {
  std::lock_guard<std::mutex> lock(mu_);
  cancelled_ = true;
}

bool DecodeStream::cancelled() const {
  std::lock_guard<std::mutex> lock(mu_);
  return cancelled_;
}

bool DecodeStream::finished() const {
  std::lock_guard<std::mutex> lock(mu_);
  return finished_;
}

bool DecodeStream::WaitFinished(absl::Time deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  return cv_.wait_until(lock, absl::ToChronoTime(deadline), [&] { return finished_; });
}

}  // namespace pdserve
