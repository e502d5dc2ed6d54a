// libFuzzer target for DecodeKvPage on arbitrary bytes. Beyond "no crash, no out-of-bounds read"
// (ASan, UBSan) it checks that every accepted page is canonical: re-encoding the decoded header
// and sections reproduces the page exactly. Built and run by tests/fuzz/kv_page_fuzz.sh.
//
// Input: a mode byte, then the page. With mode bit 0 set the harness first rewrites the page's
// checksums (the V head checksums and the head checksum where the header says they are, then the
// trailing one) to match, so that mutations reach the content checks behind them instead of all
// ending as DataLoss.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <span>
#include <string>
#include <vector>

#include "core/base/hash.h"
#include "core/kv/kv_page.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  // An exact-size copy, so that ASan flags a read one byte past the page.
  std::vector<uint8_t> page(data + 1, data + size);
  constexpr size_t kChecksumBytes = sizeof(uint64_t);
  if ((data[0] & 1) && page.size() >= kChecksumBytes) {
    const absl::StatusOr<pdserve::KvPageHeader> header = pdserve::DecodeKvPageHeader(page);
    if (header.ok()) {
      const pdserve::KvLayerLayout& layout = header->layout;
      const size_t v_offset = static_cast<size_t>(pdserve::KvPageVOffset(layout));
      if (v_offset + static_cast<size_t>(layout.v.bytes()) <= page.size()) {
        for (int g = 0; g < layout.v.n_heads(); ++g) {
          const uint64_t checksum = pdserve::KvHeadChecksum(layout.v, g, page.data() + v_offset);
          std::memcpy(page.data() + pdserve::KvPageVHeadChecksumsOffset(layout) + 8 * g, &checksum,
                      kChecksumBytes);
        }
      }
      const size_t head = v_offset - kChecksumBytes;
      if (head + kChecksumBytes <= page.size()) {
        const uint64_t checksum = pdserve::Xxh64(std::span(page).first(head));
        std::memcpy(page.data() + head, &checksum, kChecksumBytes);
      }
    }
    const size_t body = page.size() - kChecksumBytes;
    const uint64_t checksum = pdserve::Xxh64(std::span(page).first(body));
    std::memcpy(page.data() + body, &checksum, kChecksumBytes);
  }
  const absl::StatusOr<pdserve::KvPageView> view = pdserve::DecodeKvPage(page);
  if (!view.ok()) return 0;
  const absl::StatusOr<std::string> again = pdserve::EncodeKvPage(view->header, view->k, view->v);
  if (!again.ok() || again->size() != page.size() ||
      std::memcmp(again->data(), page.data(), page.size()) != 0) {
    std::abort();
  }
  return 0;
}
