// ApiKeyGate: who may call the router's Generate (gRPC, and the OpenAI API through it) and how
// much. A caller presents one of the configured keys as "Bearer <key>" (services/common/
// bearer_keys.h); each key may have at most `max_streams` requests in flight and spend
// `tokens_per_minute` prompt + completion tokens a minute (a token bucket holding a minute's
// worth, refilled continuously; a request is admitted while the key's bucket is not in debt and
// charged what it used when it ends, so one request may overdraw it). With no keys the gate is
// open and counts nothing. The keys can be replaced while it serves (Reload: the router rereads
// --api-key-file on SIGHUP); a key kept across a reload keeps its streams and bucket. Thread-safe.
#ifndef PDSERVE_SERVICES_ROUTER_API_KEY_GATE_H_
#define PDSERVE_SERVICES_ROUTER_API_KEY_GATE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <string_view>

#include "absl/base/thread_annotations.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"
#include "services/common/bearer_keys.h"

namespace pdserve {

struct ApiKeyLimits {
  int max_streams = 0;            // requests in flight per key; 0 = unlimited
  int64_t tokens_per_minute = 0;  // prompt + completion tokens per key per minute; 0 = unlimited

  // InvalidArgument naming a field out of range (negative, or over 10^12 tokens per minute).
  absl::Status Validate() const;
};

// One key's use: requests in flight and its token bucket (under its gate's lock).
struct ApiKeyState {
  int in_flight = 0;
  int64_t bucket = 0;  // thousandths of a token available; negative = debt
  absl::Time refilled;
};

class ApiKeyGate {
 public:
  // A request admitted under a key: holds one of its streams until destroyed or moved from.
  class Ticket {
   public:
    Ticket() = default;
    Ticket(Ticket&& other) noexcept;
    Ticket& operator=(Ticket&& other) noexcept;
    ~Ticket();

    // Spends `tokens` of the key's tokens per minute at `now`.
    void Charge(int64_t tokens, absl::Time now);

   private:
    friend class ApiKeyGate;
    Ticket(ApiKeyGate* gate, std::shared_ptr<ApiKeyState> key)
        : gate_(gate), key_(std::move(key)) {}
    void Release();

    ApiKeyGate* gate_ = nullptr;  // null: nothing held (open gate, or moved from)
    std::shared_ptr<ApiKeyState> key_;
  };

  ApiKeyGate(BearerKeys keys, ApiKeyLimits limits);

  // Whether the gate was made without keys (it stays so: Reload neither opens nor closes it).
  bool open() const { return open_; }

  // Unauthenticated when `authorization` bears none of the keys (and the gate is not open).
  absl::Status Authenticate(std::string_view authorization) const;

  // Authenticates and admits one request at `now`: Unauthenticated as above; ResourceExhausted
  // when the key has max_streams requests in flight or its token bucket is in debt, carrying a
  // retry hint (proto/retry_hint.h): when the debt is repaid, or a second for streams.
  absl::StatusOr<Ticket> Admit(std::string_view authorization, absl::Time now);

  // Replaces the keys: a key in both sets keeps its state (requests in flight, token bucket), a
  // dropped key's requests in flight run to their end, a new key starts with a full bucket.
  // InvalidArgument for an open gate, or for an empty `keys` (that would let everyone in).
  absl::Status Reload(BearerKeys keys);

 private:
  void Refill(ApiKeyState& key, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  std::shared_ptr<ApiKeyState> NewKeyState() const;
  // The keys now (matched outside the lock: in constant time over all of them).
  std::shared_ptr<const BearerKeys> keys() const;

  const bool open_;
  const ApiKeyLimits limits_;
  mutable Mutex mu_;
  std::shared_ptr<const BearerKeys> keys_ ABSL_GUARDED_BY(mu_);
  // By key digest; a Ticket holds its key's state, so a reload never miscounts a request.
  std::map<BearerKeys::Digest, std::shared_ptr<ApiKeyState>> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_API_KEY_GATE_H_
