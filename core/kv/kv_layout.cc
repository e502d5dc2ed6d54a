#include "core/kv/kv_layout.h"

#include "absl/strings/str_cat.h"

namespace pdserve {

const char* KvElementName(KvElement element) {
  switch (element) {
    case KvElement::kF32:
      return "f32";
    case KvElement::kE4M3:
      return "e4m3";
    case KvElement::kF16:
      return "f16";
  }
  return "unknown";
}

const char* KvScaleModeName(KvScaleMode mode) {
  switch (mode) {
    case KvScaleMode::kNone:
      return "none";
    case KvScaleMode::kPerTokenHead:
      return "per-token";
    case KvScaleMode::kPerPageHead:
      return "per-page";
  }
  return "unknown";
}

absl::Status KvSectionLayout::Validate(int page_size, const std::vector<int>& dims,
                                       KvElement element, KvScaleMode scales) {
  if (page_size < 1 || page_size > 65536) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout: page size ", page_size, " not in [1, 65536]"));
  }
  if (dims.empty() || dims.size() > 1024) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout: ", dims.size(), " heads; expected 1 to 1024"));
  }
  for (size_t g = 0; g < dims.size(); ++g) {
    if (dims[g] < 0 || dims[g] > 4096) {
      return absl::InvalidArgumentError(
          absl::StrCat("KV layout: head ", g, " width ", dims[g], " not in [0, 4096]"));
    }
  }
  if (element != KvElement::kF32 && element != KvElement::kE4M3 && element != KvElement::kF16) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout: unknown element type ", static_cast<int>(element)));
  }
  if (scales != KvScaleMode::kNone && scales != KvScaleMode::kPerTokenHead &&
      scales != KvScaleMode::kPerPageHead) {
    return absl::InvalidArgumentError(
        absl::StrCat("KV layout: unknown scale mode ", static_cast<int>(scales)));
  }
  if ((element == KvElement::kE4M3) == (scales == KvScaleMode::kNone)) {
    return absl::InvalidArgumentError(absl::StrCat("KV layout: ", KvElementName(element),
                                                   " elements with ", KvScaleModeName(scales),
                                                   " scales; e4m3 needs some, f32 and f16 none"));
  }
  return absl::OkStatus();
}

KvSectionLayout::KvSectionLayout(int page_size, std::vector<int> dims, KvElement element,
                                 KvScaleMode scales)
    : page_size_(page_size), dims_(std::move(dims)), element_(element), scales_(scales) {
  int64_t offset = int64_t{n_heads()} * scales_per_head() * 4;
  for (int g = 0; g < n_heads(); ++g) {
    head_offsets_.push_back(offset);
    offset += int64_t{page_size_} * dims_[g] * element_bytes();
  }
  bytes_ = (offset + 3) / 4 * 4;
}

int KvSectionLayout::element_bytes() const {
  switch (element_) {
    case KvElement::kF32:
      return 4;
    case KvElement::kF16:
      return 2;
    case KvElement::kE4M3:
      return 1;
  }
  return 4;
}

int KvSectionLayout::scales_per_head() const {
  switch (scales_) {
    case KvScaleMode::kNone:
      return 0;
    case KvScaleMode::kPerTokenHead:
      return page_size_;
    case KvScaleMode::kPerPageHead:
      return 1;
  }
  return 0;
}

kernels::KvSectionView SectionView(const KvSectionLayout& layout, const uint8_t* pool,
                                   int64_t page_stride) {
  kernels::KvSectionView view;
  view.pool = pool;
  view.page_stride = page_stride;
  view.dims = layout.dims().data();
  view.head_offsets = layout.head_offsets().data();
  view.e4m3 = layout.element() == KvElement::kE4M3;
  view.f16 = layout.element() == KvElement::kF16;
  view.scales_per_head = layout.scales_per_head();
  return view;
}

}  // namespace pdserve
