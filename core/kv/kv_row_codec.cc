#include "core/kv/kv_row_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "kernels/float16_rows.h"
#include "kernels/fp8.h"

namespace pdserve {
namespace {

float AbsMax(const float* row, int n) {
  float amax = 0.0f;
  for (int i = 0; i < n; ++i) amax = std::max(amax, std::fabs(row[i]));
  return amax;
}

float* Scales(const KvSectionLayout& layout, uint8_t* section, int head) {
  return reinterpret_cast<float*>(section + layout.scale_offset(head));
}

// True when rows [0, slot) of head g hold only ±0 codes: nothing written yet pins the page's scale.
// Stops at the first non-zero code, which normal data has in its first row.
bool OnlyZeroRows(const KvSectionLayout& layout, const uint8_t* section, int head, int slot) {
  const uint8_t* codes = section + layout.row_offset(head, 0);
  const int64_t n = int64_t{slot} * layout.dim(head);
  return std::all_of(codes, codes + n, [](uint8_t code) { return (code & 0x7F) == 0; });
}

// Per-page FP8: makes the head's scale cover `amax`, re-encoding slots [0, slot) if it grows.
// It grows by a power of two: the new e4m3 grid then holds every value of the old one but those
// that fall into its subnormal range, so re-encoding is exact rather than a second rounding that
// repeated growth would compound.
float PageScaleCovering(const KvSectionLayout& layout, uint8_t* section, int head, int slot,
                        float amax) {
  float& scale = *Scales(layout, section, head);
  float wanted = kernels::E4M3ScaleFor(amax);
  if (slot == 0 || OnlyZeroRows(layout, section, head, slot)) return scale = wanted;
  if (wanted <= scale) return scale;
  if (scale > 0.0f && std::isfinite(scale)) {
    float grown = scale;
    while (grown < wanted) grown *= 2.0f;
    wanted = grown;
  }
  const int dim = layout.dim(head);
  std::vector<float> row(dim);
  for (int s = 0; s < slot; ++s) {
    uint8_t* codes = section + layout.row_offset(head, s);
    kernels::DequantizeE4M3(codes, dim, scale, row.data());
    kernels::QuantizeE4M3(row.data(), dim, wanted, codes);
  }
  return scale = wanted;
}

// CompactKvRows for per-page scales: all kept rows read out first (a page's slot 0 restarts its
// scale, which would corrupt rows not yet moved), then written in order.
void RewriteKvRows(const KvSectionLayout& layout, std::span<const int32_t> pages,
                   std::span<const int> kept, absl::FunctionRef<uint8_t*(int32_t)> page_bytes) {
  const int page_size = layout.page_size();
  int64_t width = 0;
  for (int g = 0; g < layout.n_heads(); ++g) width += layout.dim(g);
  std::vector<float> rows(kept.size() * width);
  for (size_t i = 0; i < kept.size(); ++i) {
    const uint8_t* page = page_bytes(pages[kept[i] / page_size]);
    float* row = rows.data() + i * width;
    for (int g = 0; g < layout.n_heads(); row += layout.dim(g), ++g) {
      ReadKvRow(layout, page, g, kept[i] % page_size, row);
    }
  }
  for (size_t i = 0; i < kept.size(); ++i) {
    uint8_t* page = page_bytes(pages[i / page_size]);
    const float* row = rows.data() + i * width;
    for (int g = 0; g < layout.n_heads(); row += layout.dim(g), ++g) {
      WriteKvRow(layout, page, g, static_cast<int>(i % page_size), row);
    }
  }
}

}  // namespace

void WriteKvRow(const KvSectionLayout& layout, uint8_t* section, int head, int slot,
                const float* row) {
  const int dim = layout.dim(head);
  uint8_t* dst = section + layout.row_offset(head, slot);
  switch (layout.scale_mode()) {
    case KvScaleMode::kNone:
      if (dim == 0) return;  // row may be null
      if (layout.element() == KvElement::kF16) {
        kernels::FloatsToF16Saturating(row, dim, reinterpret_cast<uint16_t*>(dst));
      } else {
        std::memcpy(dst, row, sizeof(float) * dim);
      }
      return;
    case KvScaleMode::kPerTokenHead: {
      const float scale = kernels::E4M3ScaleFor(AbsMax(row, dim));
      Scales(layout, section, head)[slot] = scale;
      kernels::QuantizeE4M3(row, dim, scale, dst);
      return;
    }
    case KvScaleMode::kPerPageHead: {
      const float scale = PageScaleCovering(layout, section, head, slot, AbsMax(row, dim));
      kernels::QuantizeE4M3(row, dim, scale, dst);
      return;
    }
  }
}

void ReadKvRow(const KvSectionLayout& layout, const uint8_t* section, int head, int slot,
               float* row) {
  const int dim = layout.dim(head);
  const uint8_t* src = section + layout.row_offset(head, slot);
  if (layout.element() == KvElement::kF32) {
    if (dim > 0) std::memcpy(row, src, sizeof(float) * dim);
    return;
  }
  if (layout.element() == KvElement::kF16) {
    kernels::F16ToFloats(reinterpret_cast<const uint16_t*>(src), dim, row);
    return;
  }
  const float* scales = reinterpret_cast<const float*>(section + layout.scale_offset(head));
  const float scale = scales[layout.scale_mode() == KvScaleMode::kPerPageHead ? 0 : slot];
  kernels::DequantizeE4M3(src, dim, scale, row);
}

void CompactKvRows(const KvSectionLayout& layout, std::span<const int32_t> pages,
                   std::span<const int> kept, absl::FunctionRef<uint8_t*(int32_t)> page_bytes) {
  const int page_size = layout.page_size();
  if (layout.scale_mode() == KvScaleMode::kPerPageHead) {
    RewriteKvRows(layout, pages, kept, page_bytes);
    return;
  }
  const bool scales = layout.scale_mode() == KvScaleMode::kPerTokenHead;
  for (int i = 0; i < static_cast<int>(kept.size()); ++i) {
    const int from = kept[i];
    if (from == i) continue;
    const uint8_t* source = page_bytes(pages[from / page_size]);
    uint8_t* target = page_bytes(pages[i / page_size]);
    const int from_slot = from % page_size, to_slot = i % page_size;
    for (int g = 0; g < layout.n_heads(); ++g) {
      std::memmove(target + layout.row_offset(g, to_slot), source + layout.row_offset(g, from_slot),
                   static_cast<size_t>(layout.dim(g)) * layout.element_bytes());
      if (scales) {
        std::memmove(target + layout.scale_offset(g) + int64_t{to_slot} * 4,
                     source + layout.scale_offset(g) + int64_t{from_slot} * 4, 4);
      }
    }
  }
}

}  // namespace pdserve
