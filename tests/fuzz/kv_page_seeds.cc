// Writes a seed corpus for kv_page_fuzzer: small valid pages covering f32 and e4m3 sections,
// per-token and per-page scales, ragged and zero head widths, full and partial pages; each page
// twice, behind the harness's mode bytes 0 (as is) and 1 (checksum rewritten).
// Usage: kv_page_seeds DIR
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "core/kv/kv_page.h"

namespace pdserve {
namespace {

// Section bytes with scale 0.5 for every valid slot and small finite elements in valid rows.
std::vector<uint8_t> Fill(const KvSectionLayout& layout, int num_tokens) {
  std::vector<uint8_t> bytes(static_cast<size_t>(layout.bytes()), 0);
  const int scales =
      layout.scale_mode() == KvScaleMode::kPerTokenHead ? num_tokens : layout.scales_per_head();
  const float half = 0.5f;
  for (int g = 0; g < layout.n_heads(); ++g) {
    for (int s = 0; s < scales; ++s) {
      std::memcpy(&bytes[layout.scale_offset(g) + int64_t{4} * s], &half, 4);
    }
    for (int64_t i = 0; i < int64_t{num_tokens} * layout.dim(g); ++i) {
      uint8_t* element = &bytes[layout.row_offset(g, 0) + i * layout.element_bytes()];
      const float value = static_cast<float>(i % 7) - 3.0f;
      if (layout.element() == KvElement::kF32) {
        std::memcpy(element, &value, 4);
      } else {
        *element = static_cast<uint8_t>(0x30 + i % 16);
      }
    }
  }
  return bytes;
}

bool WriteSeed(const std::string& path, KvSectionLayout k, KvSectionLayout v, int num_tokens) {
  KvPageHeader header;
  header.calibration_hash = 0xC0FFEE;
  header.request_id = 7;
  header.cache_layer = 1;
  header.page_index = 2;
  header.num_tokens = num_tokens;
  header.layout = {std::move(k), std::move(v)};
  const absl::StatusOr<std::string> page =
      EncodeKvPage(header, Fill(header.layout.k, num_tokens), Fill(header.layout.v, num_tokens));
  if (!page.ok()) {
    std::fprintf(stderr, "kv_page_seeds: %s\n", page.status().ToString().c_str());
    return false;
  }
  for (char mode : {'\0', '\1'}) {
    std::ofstream out(path + (mode ? "_resealed" : ""), std::ios::binary);
    out << mode << *page;
    if (!out) return false;
  }
  return true;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) {
  using pdserve::KvElement;
  using pdserve::KvScaleMode;
  using pdserve::KvSectionLayout;
  if (argc != 2) {
    std::fprintf(stderr, "usage: kv_page_seeds DIR\n");
    return 2;
  }
  const std::string dir = argv[1];
  const bool ok =
      pdserve::WriteSeed(dir + "/f32_full",
                         KvSectionLayout(2, {4, 4}, KvElement::kF32, KvScaleMode::kNone),
                         KvSectionLayout(2, {4, 4}, KvElement::kF32, KvScaleMode::kNone), 2) &&
      pdserve::WriteSeed(
          dir + "/e4m3_per_token_ragged",
          KvSectionLayout(4, {3, 0, 2}, KvElement::kE4M3, KvScaleMode::kPerTokenHead),
          KvSectionLayout(4, {1, 5}, KvElement::kE4M3, KvScaleMode::kPerTokenHead), 3) &&
      pdserve::WriteSeed(dir + "/e4m3_per_page_partial",
                         KvSectionLayout(4, {2, 6}, KvElement::kE4M3, KvScaleMode::kPerPageHead),
                         KvSectionLayout(4, {0, 3}, KvElement::kF32, KvScaleMode::kNone), 1);
  return ok ? 0 : 1;
}
