// PageAllocator: which of a fixed number of KV pages are free — the bookkeeping of a paged cache,
// whatever memory holds the pages (host: PagedKvCache; device: the CUDA engine's pools).
// BlockTable lists the pages of one sequence in token order.
//
// Not thread-safe: the engine that owns the pool serializes allocation.
#ifndef PDSERVE_CORE_KV_PAGE_ALLOCATOR_H_
#define PDSERVE_CORE_KV_PAGE_ALLOCATOR_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve {

class PageAllocator {
 public:
  // Pages [0, num_pages), all free; requires num_pages ≥ 0 and page_size ≥ 1.
  PageAllocator(int page_size, int num_pages);

  int page_size() const { return page_size_; }
  int num_pages() const { return num_pages_; }
  int free_pages() const { return static_cast<int>(free_list_.size()); }

  // Takes a free page; ResourceExhausted when none is left. Its bytes hold whatever the previous
  // owner left.
  absl::StatusOr<int32_t> AllocatePage();
  // Returns `page` to the pool. Requires a page this pool handed out and not yet freed.
  void FreePage(int32_t page);

 private:
  int page_size_;
  int num_pages_;
  std::vector<int32_t> free_list_;
};

// The pages of one sequence, in token order, and how many tokens they hold.
class BlockTable {
 public:
  int num_tokens() const { return num_tokens_; }
  const std::vector<int32_t>& pages() const { return pages_; }

  // Makes room for `total_tokens` tokens, allocating pages as needed; on ResourceExhausted the
  // table keeps what it had.
  absl::Status Reserve(PageAllocator& pool, int total_tokens);
  void set_num_tokens(int n) { num_tokens_ = n; }
  // Frees pages beyond the first `pages` (those Reserve added for tokens not yet written).
  // Requires pages ≥ the pages holding num_tokens().
  void ShrinkTo(PageAllocator& pool, size_t pages);
  // Frees every page and empties the table.
  void Release(PageAllocator& pool);

 private:
  std::vector<int32_t> pages_;
  int num_tokens_ = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_PAGE_ALLOCATOR_H_
