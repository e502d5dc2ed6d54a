// PagedKvCache: one fixed pool of KV pages, allocated once. The cache holds a list of sections —
// typically the K and the V section of every cache layer, each with its own byte layout
// (core/kv/kv_layout.h: per-head widths, f32 or FP8 with scales) — and a page index names the same
// slot in every section (one allocation covers a block of page_size tokens through the whole
// model). Section s of page p occupies section_stride(s) bytes at section_pool(s) + p ·
// section_stride(s). BlockTable lists the pages of one sequence in token order.
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

namespace pdserve {

struct KvCacheConfig {
  int page_size = 16;  // tokens per page; every section's layout must agree
  int num_pages = 0;
  std::vector<KvSectionLayout> sections;
};

class PagedKvCache {
 public:
  // InvalidArgument for non-positive sizes, no sections or a section whose page size differs;
  // ResourceExhausted when the pool would not fit in memory.
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  int num_sections() const { return static_cast<int>(config_.sections.size()); }
  const KvSectionLayout& layout(int section) const { return config_.sections[section]; }
  // Bytes between consecutive pages of a section (its layout's bytes rounded up to 64).
  int64_t section_stride(int section) const { return strides_[section]; }
  uint8_t* section_pool(int section) { return pools_[section]; }
  uint8_t* Page(int section, int32_t page) { return pools_[section] + page * strides_[section]; }
  int64_t total_bytes() const { return total_bytes_; }

  int free_pages() const { return static_cast<int>(free_list_.size()); }

  // Takes a free page; ResourceExhausted when none is left. Its bytes hold whatever the previous
  // owner left.
  absl::StatusOr<int32_t> AllocatePage();
  // Returns `page` to the pool. Requires a page this cache handed out and not yet freed.
  void FreePage(int32_t page);

 private:
  explicit PagedKvCache(const KvCacheConfig& config);

  KvCacheConfig config_;
  std::vector<int64_t> strides_;
  std::vector<uint8_t*> pools_;
  int64_t total_bytes_ = 0;
  std::unique_ptr<uint8_t, decltype(&std::free)> storage_{nullptr, &std::free};
  std::vector<int32_t> free_list_;
};

// The pages of one sequence, in token order, and how many tokens they hold.
class BlockTable {
 public:
  int num_tokens() const { return num_tokens_; }
  const std::vector<int32_t>& pages() const { return pages_; }

  // Makes room for `total_tokens` tokens, allocating pages as needed; on ResourceExhausted the
  // table keeps what it had.
  absl::Status Reserve(PagedKvCache& cache, int total_tokens);
  void set_num_tokens(int n) { num_tokens_ = n; }
  // Frees pages beyond the first `pages` (those Reserve added for tokens not yet written).
  // Requires pages ≥ the pages holding num_tokens().
  void ShrinkTo(PagedKvCache& cache, size_t pages);
  // Frees every page and empties the table.
  void Release(PagedKvCache& cache);

 private:
  std::vector<int32_t> pages_;
  int num_tokens_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_PAGED_KV_CACHE_H_
