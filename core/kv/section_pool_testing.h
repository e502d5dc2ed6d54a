// Test helpers for code that reads paged KV sections: a validated layout and a byte pool of pages
// poisoned before any row is written (0xFF bytes, NaN, for f32; 0x7F, the NaN code, for e4m3), so
// that reading a slot nobody wrote shows up as NaN.
#ifndef PDSERVE_CORE_KV_SECTION_POOL_TESTING_H_
#define PDSERVE_CORE_KV_SECTION_POOL_TESTING_H_

#include <cstdint>
#include <vector>

#include "core/kv/kv_layout.h"
#include "gtest/gtest.h"

namespace pdserve {

inline KvSectionLayout Layout(int page_size, std::vector<int> dims, KvElement element,
                              KvScaleMode scales) {
  EXPECT_TRUE(KvSectionLayout::Validate(page_size, dims, element, scales).ok());
  return KvSectionLayout(page_size, std::move(dims), element, scales);
}

struct SectionPool {
  SectionPool(KvSectionLayout l, int num_pages)
      : layout(std::move(l)),
        stride((layout.bytes() + 63) / 64 * 64),
        bytes(static_cast<size_t>(stride * num_pages),
              layout.element() == KvElement::kF32 ? 0xFF : 0x7F) {}

  uint8_t* page(int32_t p) { return bytes.data() + p * stride; }
  const uint8_t* page(int32_t p) const { return bytes.data() + p * stride; }
  kernels::KvSectionView View() const { return SectionView(layout, bytes.data(), stride); }

  KvSectionLayout layout;
  int64_t stride;
  std::vector<uint8_t> bytes;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_SECTION_POOL_TESTING_H_
