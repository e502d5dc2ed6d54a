// BearerKeys: the secrets an HTTP route or RPC accepts in "Authorization: Bearer <key>" (API keys,
// the /metrics token). Only their SHA-256 digests are kept, and a presented key is compared with
// every one in constant time (CRYPTO_memcmp, no early exit), so neither a memory dump nor the
// time of a refusal tells anything about a key. Keys are never logged. Immutable; thread-safe.
#ifndef PDSERVE_SERVICES_COMMON_BEARER_KEYS_H_
#define PDSERVE_SERVICES_COMMON_BEARER_KEYS_H_

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve {

class BearerKeys {
 public:
  // No keys: every caller is let in (Match is never called on an open set).
  BearerKeys() = default;
  // `keys`, each 8 to 512 printable ASCII characters without spaces; duplicates refused.
  // InvalidArgument naming the key's position (never its text) otherwise.
  static absl::StatusOr<BearerKeys> Create(const std::vector<std::string>& keys);
  // The keys in `path` (one per line; blank lines and lines starting with '#' skipped) followed by
  // `keys`. NotFound naming the file when it cannot be read.
  static absl::StatusOr<BearerKeys> FromFlags(const std::vector<std::string>& keys,
                                              const std::string& path);

  using Digest = std::array<uint8_t, 32>;

  bool open() const { return digests_.empty(); }
  size_t size() const { return digests_.size(); }
  // The SHA-256 of key `i` (0 ≤ i < size()): what identifies a key across reloads.
  const Digest& digest(int i) const { return digests_[static_cast<size_t>(i)]; }

  // The index of the key that `authorization` (an Authorization header's value, or gRPC's
  // "authorization" metadata) bears as "Bearer <key>"; nullopt when it bears none of them.
  std::optional<int> Match(std::string_view authorization) const;

 private:
  static Digest Sha256(std::string_view text);

  std::vector<Digest> digests_;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_COMMON_BEARER_KEYS_H_
