// The router's retry hint, part of pdserve's wire protocol: when it refuses a request for overload
// (RESOURCE_EXHAUSTED) it says how long the client should wait before trying again. On gRPC the
// hint is the trailing metadata kRetryAfterMsTrailer (whole milliseconds, decimal); on HTTP the
// Retry-After header (whole seconds). In process it rides in the absl::Status payload of the same
// name, so that it survives being passed up as a status.
#ifndef PDSERVE_PROTO_RETRY_HINT_H_
#define PDSERVE_PROTO_RETRY_HINT_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/cord.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace pdserve {

inline constexpr char kRetryAfterMsTrailer[] = "retry-after-ms";

// The hint `milliseconds` ("250") parsed, or nullopt when it is not a non-negative integer.
inline std::optional<absl::Duration> ParseRetryAfterMs(absl::string_view milliseconds) {
  int64_t ms = 0;
  if (!absl::SimpleAtoi(milliseconds, &ms) || ms < 0) return std::nullopt;
  return absl::Milliseconds(ms);
}

inline std::string FormatRetryAfterMs(absl::Duration wait) {
  return absl::StrCat(absl::ToInt64Milliseconds(wait));
}

inline void SetRetryHint(absl::Status& status, absl::Duration wait) {
  status.SetPayload(kRetryAfterMsTrailer, absl::Cord(FormatRetryAfterMs(wait)));
}

// The hint a finished call's server sent in its trailing metadata, or nullopt. `context` is the
// call's grpc::ClientContext (a template parameter so that this header needs no gRPC).
template <typename ClientContext>
std::optional<absl::Duration> RetryHintFromCall(const ClientContext& context) {
  const auto& trailers = context.GetServerTrailingMetadata();
  const auto it = trailers.find(kRetryAfterMsTrailer);
  if (it == trailers.end()) return std::nullopt;
  return ParseRetryAfterMs(absl::string_view(it->second.data(), it->second.size()));
}

// The hint a status carries, or nullopt.
inline std::optional<absl::Duration> RetryHint(const absl::Status& status) {
  const auto payload = status.GetPayload(kRetryAfterMsTrailer);
  if (!payload.has_value()) return std::nullopt;
  return ParseRetryAfterMs(std::string(*payload));
}

}  // namespace pdserve

#endif  // PDSERVE_PROTO_RETRY_HINT_H_
