// Fault injection for fail-closed tests: damage a sealed KV page in the store the way a fault or
// an attacker would, so that a test can show readers refuse it. Used only when a KV store is
// started with --fault-tamper-sealed-pages (never in production).
#ifndef PDSERVE_SERVICES_KVSTORE_PAGE_TAMPER_H_
#define PDSERVE_SERVICES_KVSTORE_PAGE_TAMPER_H_

#include <cstdint>
#include <optional>
#include <span>
#include <string_view>

#include "absl/status/status.h"

namespace pdserve {

enum class PageTamper {
  kChecksum,  // one byte of the K section flipped: a torn or corrupted page
  kForeign,   // the header names another request, checksums made to match
  kStale,     // the header carries another epoch, checksums made to match
  kValue,     // full pages only (those a KCache decode leaves in the store and fetches by head):
              // one row byte of every V head flipped, the trailing checksum made to match, so
              // only the V head checksums disagree
};

// "checksum", "foreign", "stale", "value"; nullopt for anything else.
std::optional<PageTamper> ParsePageTamper(std::string_view name);

// Damages the encoded page `page` (a page that DecodeKvPage accepts) in place. InvalidArgument
// when it does not decode.
absl::Status TamperPage(std::span<uint8_t> page, PageTamper how);

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_KVSTORE_PAGE_TAMPER_H_
