#include "core/kv/page_allocator.h"

#include "absl/strings/str_cat.h"

namespace pdserve {

PageAllocator::PageAllocator(int page_size, int num_pages)
    : page_size_(page_size), num_pages_(num_pages) {
  free_list_.reserve(num_pages);
  for (int32_t p = num_pages - 1; p >= 0; --p) free_list_.push_back(p);
}

absl::StatusOr<int32_t> PageAllocator::AllocatePage() {
  if (free_list_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: all ", num_pages_, " pages are in use"));
  }
  int32_t page = free_list_.back();
  free_list_.pop_back();
  return page;
}

void PageAllocator::FreePage(int32_t page) { free_list_.push_back(page); }

absl::Status BlockTable::Reserve(PageAllocator& pool, int total_tokens) {
  const int page_size = pool.page_size();
  const size_t needed = static_cast<size_t>((total_tokens + page_size - 1) / page_size);
  const size_t before = pages_.size();
  while (pages_.size() < needed) {
    absl::StatusOr<int32_t> page = pool.AllocatePage();
    if (!page.ok()) {
      ShrinkTo(pool, before);
      return page.status();
    }
    pages_.push_back(*page);
  }
  return absl::OkStatus();
}

void BlockTable::ShrinkTo(PageAllocator& pool, size_t pages) {
  while (pages_.size() > pages) {
    pool.FreePage(pages_.back());
    pages_.pop_back();
  }
}

void BlockTable::Release(PageAllocator& pool) {
  for (int32_t page : pages_) pool.FreePage(page);
  pages_.clear();
  num_tokens_ = 0;
}

}  // namespace pdserve
