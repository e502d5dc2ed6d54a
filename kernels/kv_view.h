// KvSectionView / PagedKvView: how the attention kernels read a sequence's cached keys and values.
// The cache owns the memory and its layout (core/kv/kv_layout.h); a view is raw pointers into it.
//
// Page p of the sequence starts its section at pool + pages[p] · page_stride bytes. Within it KV
// head g's rows are [page_size, dim(g)] elements from head_offset(g): f32, IEEE f16 (CPU kernels
// only; the CUDA engine refuses an f16 cache), or FP8 e4m3 codes whose
// value is E4M3ToFloat(code) · scale, with scales_per_head floats per head at the section start
// (head g's at float index g · scales_per_head; per token: slot-indexed; per page: one).
// The CUDA kernels (kernels/cuda/) take the same views with every pointer in device memory.
#ifndef PDSERVE_KERNELS_KV_VIEW_H_
#define PDSERVE_KERNELS_KV_VIEW_H_

#include <cstdint>

#include "kernels/host_device.h"

namespace pdserve::kernels {

struct KvSectionView {
  const uint8_t* pool = nullptr;
  int64_t page_stride = 0;  // bytes between consecutive pages
  // Per-head widths and byte offsets; when null every head is uniform_dim wide, head g at element
  // g · page_size · uniform_dim.
  const int* dims = nullptr;
  const int64_t* head_offsets = nullptr;
  int uniform_dim = 0;
  bool e4m3 = false;
  bool f16 = false;
  int scales_per_head = 0;  // 0 (f32), page_size (per token) or 1 (per page)

  PDSERVE_HOST_DEVICE int dim(int g) const { return dims ? dims[g] : uniform_dim; }
  PDSERVE_HOST_DEVICE int element_bytes() const { return e4m3 ? 1 : f16 ? 2 : 4; }
  PDSERVE_HOST_DEVICE int64_t head_offset(int g, int page_size) const {
    return head_offsets ? head_offsets[g] : int64_t{g} * page_size * uniform_dim * element_bytes();
  }
  PDSERVE_HOST_DEVICE const uint8_t* page(int32_t page_id) const {
    return pool + page_id * page_stride;
  }
};

struct PagedKvView {
  KvSectionView k;
  KvSectionView v;
  const int32_t* pages = nullptr;  // the sequence's pages in token order
  int page_size = 0;
};

// The plain layout: f32 [pages, n_kv_heads, page_size, head_dim] for K and V alike, page_stride
// floats apart.
inline PagedKvView PlainPagedKv(const float* k, const float* v, const int32_t* pages, int page_size,
                                int64_t page_stride_floats, int head_dim) {
  PagedKvView view;
  view.k.pool = reinterpret_cast<const uint8_t*>(k);
  view.v.pool = reinterpret_cast<const uint8_t*>(v);
  view.k.page_stride = view.v.page_stride = page_stride_floats * 4;
  view.k.uniform_dim = view.v.uniform_dim = head_dim;
  view.pages = pages;
  view.page_size = page_size;
  return view;
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_KV_VIEW_H_
