// PagedKvCache: one fixed pool of KV pages, allocated once. The cache holds a list of sections —
// typically the K and the V section of every cache layer, each with its own byte layout
// (core/kv/kv_layout.h: per-head widths, f32 or FP8 with scales) — and a page index names the same
// slot in every section (one allocation covers a block of page_size tokens through the whole
// model). Section s of page p occupies section_stride(s) bytes at section_pool(s) + p ·
// section_stride(s). Page bookkeeping (AllocatePage, FreePage, BlockTable) is PageAllocator's
// (core/kv/page_allocator.h).
//
// Not thread-safe: the engine that owns the cache serializes allocation; kernels read and write
// disjoint rows concurrently through the raw pointers.
#ifndef PDSERVE_CORE_KV_PAGED_KV_CACHE_H_
#define PDSERVE_CORE_KV_PAGED_KV_CACHE_H_

#include <cstdint>
#include <cstdlib>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/kv/kv_layout.h"
#include "core/kv/page_allocator.h"

namespace pdserve {

struct KvCacheConfig {
  int page_size = 16;  // tokens per page; every section's layout must agree
  int num_pages = 0;
  std::vector<KvSectionLayout> sections;
};

class PagedKvCache : public PageAllocator {
 public:
  // InvalidArgument for non-positive sizes, no sections or a section whose page size differs;
  // ResourceExhausted when the pool would not fit in memory.
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  int num_sections() const { return static_cast<int>(config_.sections.size()); }
  const KvSectionLayout& layout(int section) const { return config_.sections[section]; }
  // Bytes between consecutive pages of a section laid out by `layout`: its bytes rounded up to 64.
  static int64_t StrideOf(const KvSectionLayout& layout) { return (layout.bytes() + 63) / 64 * 64; }
  int64_t section_stride(int section) const { return strides_[section]; }
  uint8_t* section_pool(int section) { return pools_[section]; }
  uint8_t* Page(int section, int32_t page) { return pools_[section] + page * strides_[section]; }
  int64_t total_bytes() const { return total_bytes_; }

 private:
  explicit PagedKvCache(const KvCacheConfig& config);

  KvCacheConfig config_;
  std::vector<int64_t> strides_;
  std::vector<uint8_t*> pools_;
  int64_t total_bytes_ = 0;
  struct Unmap {
    size_t bytes;
    void operator()(uint8_t* p) const;
  };
  // Anonymous pages: they read as zeros and become resident only once written, so a pool sized
  // for every sequence at full context costs memory only for the pages in use.
  std::unique_ptr<uint8_t, Unmap> storage_{nullptr, Unmap{0}};
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_PAGED_KV_CACHE_H_
