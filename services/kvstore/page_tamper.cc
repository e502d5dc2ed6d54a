#include "services/kvstore/page_tamper.h"

#include <cstring>
#include <string>

#include "absl/strings/str_cat.h"
#include "core/base/hash.h"
#include "core/kv/kv_page.h"

namespace pdserve {

std::optional<PageTamper> ParsePageTamper(std::string_view name) {
  if (name == "checksum") return PageTamper::kChecksum;
  if (name == "foreign") return PageTamper::kForeign;
  if (name == "stale") return PageTamper::kStale;
  if (name == "value") return PageTamper::kValue;
  return std::nullopt;
}

absl::Status TamperPage(std::span<uint8_t> page, PageTamper how) {
  absl::StatusOr<KvPageView> view = DecodeKvPage(page);
  if (!view.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("tamper: not a valid page: ", view.status().message()));
  }
  if (how == PageTamper::kChecksum) {
    page[static_cast<size_t>(KvPageKOffset(view->header.layout))] ^= 0x01;
    return absl::OkStatus();
  }
  if (how == PageTamper::kValue) {
    const KvSectionLayout& v = view->header.layout.v;
    if (view->header.num_tokens < v.page_size()) return absl::OkStatus();
    const size_t v_offset = static_cast<size_t>(KvPageVOffset(view->header.layout));
    for (int g = 0; g < v.n_heads(); ++g) {
      if (v.dim(g) > 0) page[v_offset + static_cast<size_t>(v.row_offset(g, 0))] ^= 0x01;
    }
    const size_t body = page.size() - sizeof(uint64_t);
    const uint64_t checksum = Xxh64(page.first(body));
    std::memcpy(page.data() + body, &checksum, sizeof(checksum));
    return absl::OkStatus();
  }
  KvPageHeader header = view->header;
  if (how == PageTamper::kForeign) header.request_id ^= 0x5a5a;
  if (how == PageTamper::kStale) header.epoch += 1;
  const std::string k(view->k.begin(), view->k.end());
  const std::string v(view->v.begin(), view->v.end());
  absl::StatusOr<std::string> encoded =
      EncodeKvPage(header, {reinterpret_cast<const uint8_t*>(k.data()), k.size()},
                   {reinterpret_cast<const uint8_t*>(v.data()), v.size()});
  if (!encoded.ok()) return encoded.status();
  if (encoded->size() != page.size()) {
    return absl::InternalError("tamper: the re-encoded page changed size");
  }
  std::memcpy(page.data(), encoded->data(), page.size());
  return absl::OkStatus();
}

}  // namespace pdserve
