#include "services/router/api_key_gate.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "proto/retry_hint.h"

namespace pdserve {

absl::Status ApiKeyLimits::Validate() const {
  if (max_streams < 0 || tokens_per_minute < 0 || tokens_per_minute > int64_t{1'000'000'000'000}) {
    return absl::InvalidArgumentError(
        absl::StrCat("API key limits: max streams ", max_streams, " and tokens per minute ",
                     tokens_per_minute, " must be ≥ 0 (0 = unlimited), tokens at most 10^12"));
  }
  return absl::OkStatus();
}

namespace {

constexpr int64_t kMilli = 1000;
constexpr int64_t kNanosPerMinute = int64_t{60} * 1000 * 1000 * 1000;

}  // namespace

ApiKeyGate::ApiKeyGate(BearerKeys keys, ApiKeyLimits limits) : open_(keys.open()), limits_(limits) {
  MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) state_[keys.digest(static_cast<int>(i))] = NewKeyState();
  keys_ = std::make_shared<const BearerKeys>(std::move(keys));
}

std::shared_ptr<ApiKeyState> ApiKeyGate::NewKeyState() const {
  auto state = std::make_shared<ApiKeyState>();
  state->bucket = limits_.tokens_per_minute * kMilli;
  state->refilled = absl::InfinitePast();
  return state;
}

std::shared_ptr<const BearerKeys> ApiKeyGate::keys() const {
  MutexLock lock(&mu_);
  return keys_;
}

absl::Status ApiKeyGate::Reload(BearerKeys keys) {
  if (open_) return absl::InvalidArgumentError("the router was started without API keys");
  if (keys.open()) {
    return absl::InvalidArgumentError("no API keys: that would let everyone in");
  }
  std::map<BearerKeys::Digest, std::shared_ptr<ApiKeyState>> state;
  MutexLock lock(&mu_);
  for (size_t i = 0; i < keys.size(); ++i) {
    const BearerKeys::Digest& digest = keys.digest(static_cast<int>(i));
    auto kept = state_.find(digest);
    state[digest] = kept != state_.end() ? kept->second : NewKeyState();
  }
  state_ = std::move(state);
  keys_ = std::make_shared<const BearerKeys>(std::move(keys));
  return absl::OkStatus();
}

absl::Status ApiKeyGate::Authenticate(std::string_view authorization) const {
  if (open() || keys()->Match(authorization).has_value()) return absl::OkStatus();
  return absl::UnauthenticatedError(
      authorization.empty() ? "no API key: send one as the header 'Authorization: Bearer KEY'"
                            : "incorrect API key provided");
}

// In integers, rounding refills down and waits up, so that waiting the Retry-After a refusal gave
// always repays the debt.
void ApiKeyGate::Refill(ApiKeyState& key, absl::Time now) const {
  const int64_t capacity = limits_.tokens_per_minute * kMilli;
  if (key.refilled != absl::InfinitePast() && now > key.refilled) {
    const __int128 nanos = absl::ToInt64Nanoseconds(now - key.refilled);
    const __int128 refill = capacity * nanos / kNanosPerMinute;
    key.bucket = static_cast<int64_t>(std::min<__int128>(capacity, key.bucket + refill));
  }
  key.refilled = std::max(key.refilled, now);
}

absl::StatusOr<ApiKeyGate::Ticket> ApiKeyGate::Admit(std::string_view authorization,
                                                     absl::Time now) {
  if (open()) return Ticket();
  const std::shared_ptr<const BearerKeys> keys = this->keys();
  const std::optional<int> key = keys->Match(authorization);
  if (!key.has_value()) return Authenticate(authorization);
  MutexLock lock(&mu_);
  const auto found = state_.find(keys->digest(*key));
  if (found == state_.end()) {  // reloaded away since it matched
    return absl::UnauthenticatedError("incorrect API key provided");
  }
  ApiKeyState& state = *found->second;
  if (limits_.max_streams > 0 && state.in_flight >= limits_.max_streams) {
    absl::Status refusal = absl::ResourceExhaustedError(absl::StrCat(
        "rate limit: this API key has ", state.in_flight, " requests in flight, its limit"));
    SetRetryHint(refusal, absl::Seconds(1));
    return refusal;
  }
  if (limits_.tokens_per_minute > 0) {
    Refill(state, now);
    if (state.bucket < 0) {
      const __int128 debt = -state.bucket;
      const __int128 rate = limits_.tokens_per_minute * kMilli;
      const absl::Duration wait =
          absl::Nanoseconds(static_cast<int64_t>((debt * kNanosPerMinute + rate - 1) / rate));
      absl::Status refusal = absl::ResourceExhaustedError(absl::StrCat(
          "rate limit: this API key spent its ", limits_.tokens_per_minute, " tokens per minute; ",
          (-state.bucket + kMilli - 1) / kMilli, " more must be repaid first"));
      SetRetryHint(refusal, absl::Ceil(wait, absl::Milliseconds(1)));
      return refusal;
    }
  }
  ++state.in_flight;
  return Ticket(this, found->second);
}

ApiKeyGate::Ticket::Ticket(Ticket&& other) noexcept
    : gate_(std::exchange(other.gate_, nullptr)), key_(std::move(other.key_)) {}

ApiKeyGate::Ticket& ApiKeyGate::Ticket::operator=(Ticket&& other) noexcept {
  if (this != &other) {
    Release();
    gate_ = std::exchange(other.gate_, nullptr);
    key_ = std::move(other.key_);
  }
  return *this;
}

ApiKeyGate::Ticket::~Ticket() { Release(); }

void ApiKeyGate::Ticket::Release() {
  if (gate_ == nullptr) return;
  MutexLock lock(&gate_->mu_);
  --key_->in_flight;
  gate_ = nullptr;
  key_.reset();
}

void ApiKeyGate::Ticket::Charge(int64_t tokens, absl::Time now) {
  if (gate_ == nullptr || gate_->limits_.tokens_per_minute == 0) return;
  MutexLock lock(&gate_->mu_);
  gate_->Refill(*key_, now);
  key_->bucket -= tokens * kMilli;
}

}  // namespace pdserve
