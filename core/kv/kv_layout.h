// KvLayerLayout: how one cache layer (a model layer, or an AcrossKV group of layers sharing one
// cache) stores a page of `page_size` tokens for all its KV heads. K and V are separate sections
// with the same structure, so they can live in different tiers (KCache keeps V elsewhere):
//
//   section = [scales: float per (head, scale slot)] [head 0 elements] [head 1 elements] ...
//   head g elements = [page_size, dims[g]] row-major, one row per token slot
//
// Heads may have different widths (ZACK ranks). Elements are f32, IEEE f16 or FP8 e4m3 codes.
// FP8 needs scales: one per token per head (slot-indexed, the default) or one per page per head;
// value = float(code) · scale. f32 and f16 sections have no scales. All offsets are bytes from the
// section start; the scales block and every f32 head block are 4-byte aligned, f16 blocks 2-byte.
#ifndef PDSERVE_CORE_KV_KV_LAYOUT_H_
#define PDSERVE_CORE_KV_KV_LAYOUT_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "kernels/kv_view.h"

namespace pdserve {

enum class KvElement : uint8_t { kF32 = 0, kE4M3 = 1, kF16 = 2 };
enum class KvScaleMode : uint8_t { kNone = 0, kPerTokenHead = 1, kPerPageHead = 2 };

const char* KvElementName(KvElement element);
const char* KvScaleModeName(KvScaleMode mode);

// The layout of one section (K or V) of a page.
class KvSectionLayout {
 public:
  KvSectionLayout() = default;
  // Requires Validate(page_size, dims, element, scales).ok().
  KvSectionLayout(int page_size, std::vector<int> dims, KvElement element, KvScaleMode scales);

  // InvalidArgument unless page_size ≥ 1, 1 ≤ heads, every dim in [0, 4096] (0 = a head dropped
  // entirely), scales ⇔ e4m3.
  static absl::Status Validate(int page_size, const std::vector<int>& dims, KvElement element,
                               KvScaleMode scales);

  int page_size() const { return page_size_; }
  int n_heads() const { return static_cast<int>(dims_.size()); }
  const std::vector<int>& dims() const { return dims_; }
  int dim(int head) const { return dims_[head]; }
  KvElement element() const { return element_; }
  KvScaleMode scale_mode() const { return scales_; }
  int element_bytes() const;
  // Scales stored per head: page_size, 1 or 0.
  int scales_per_head() const;

  // Byte offset of head g's first element; of its first scale (scales are floats).
  int64_t head_offset(int head) const { return head_offsets_[head]; }
  const std::vector<int64_t>& head_offsets() const { return head_offsets_; }
  int64_t scale_offset(int head) const { return int64_t{head} * scales_per_head() * 4; }
  // Offset of the row of token `slot` of head g.
  int64_t row_offset(int head, int slot) const {
    return head_offsets_[head] + int64_t{slot} * dims_[head] * element_bytes();
  }
  int64_t bytes() const { return bytes_; }  // the whole section

  bool operator==(const KvSectionLayout& other) const {
    return page_size_ == other.page_size_ && dims_ == other.dims_ && element_ == other.element_ &&
           scales_ == other.scales_;
  }

 private:
  int page_size_ = 0;
  std::vector<int> dims_;
  KvElement element_ = KvElement::kF32;
  KvScaleMode scales_ = KvScaleMode::kNone;
  std::vector<int64_t> head_offsets_;
  int64_t bytes_ = 0;
};

// K and V sections of one cache layer.
struct KvLayerLayout {
  KvSectionLayout k;
  KvSectionLayout v;

  int64_t page_bytes() const { return k.bytes() + v.bytes(); }
  // Bytes per cached token, page overheads (per-page scales) amortized over page_size.
  double bytes_per_token() const {
    return static_cast<double>(page_bytes()) / static_cast<double>(k.page_size());
  }
  bool operator==(const KvLayerLayout& other) const { return k == other.k && v == other.v; }
};

// How the attention kernels read a section laid out by `layout` whose page p starts at
// pool + p · page_stride. The view points into `layout`, which must outlive it.
kernels::KvSectionView SectionView(const KvSectionLayout& layout, const uint8_t* pool,
                                   int64_t page_stride);

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_KV_LAYOUT_H_
