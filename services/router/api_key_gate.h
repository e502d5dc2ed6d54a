// ApiKeyGate: who may call the router's Generate (gRPC, and the OpenAI API through it) and how
// much. A caller presents one of the configured keys as "Bearer <key>" (services/common/
// bearer_keys.h); each key may have at most `max_streams` requests in flight and spend
// `tokens_per_minute` prompt + completion tokens a minute (a token bucket holding a minute's
// worth, refilled continuously; a request is admitted while the key's bucket is not in debt and
// charged what it used when it ends, so one request may overdraw it). With no keys the gate is
// open and counts nothing. Thread-safe.
#ifndef PDSERVE_SERVICES_ROUTER_API_KEY_GATE_H_
#define PDSERVE_SERVICES_ROUTER_API_KEY_GATE_H_

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

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
    Ticket(ApiKeyGate* gate, int key) : gate_(gate), key_(key) {}
    void Release();

    ApiKeyGate* gate_ = nullptr;  // null: nothing held (open gate, or moved from)
    int key_ = -1;
  };

  ApiKeyGate(BearerKeys keys, ApiKeyLimits limits);

  bool open() const { return keys_.open(); }

  // Unauthenticated when `authorization` bears none of the keys (and the gate is not open).
  absl::Status Authenticate(std::string_view authorization) const;

  // Authenticates and admits one request at `now`: Unauthenticated as above; ResourceExhausted
  // when the key has max_streams requests in flight or its token bucket is in debt, carrying a
  // retry hint (proto/retry_hint.h): when the debt is repaid, or a second for streams.
  absl::StatusOr<Ticket> Admit(std::string_view authorization, absl::Time now);

 private:
  struct KeyState {
    int in_flight = 0;
    int64_t bucket = 0;  // thousandths of a token available; negative = debt
    absl::Time refilled;
  };
  void Refill(KeyState& key, absl::Time now) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const BearerKeys keys_;
  const ApiKeyLimits limits_;
  Mutex mu_;
  std::vector<KeyState> state_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_API_KEY_GATE_H_
