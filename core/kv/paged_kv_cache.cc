#include "core/kv/paged_kv_cache.h"

#include <new>

#include "absl/strings/str_cat.h"
#include "core/base/system_memory.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const KvCacheConfig& config) {
  if (config.n_layers <= 0 || config.n_kv_heads <= 0 || config.head_dim <= 0 ||
      config.page_size <= 0 || config.num_pages <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv cache: layers ", config.n_layers, ", kv heads ", config.n_kv_heads,
                     ", head dim ", config.head_dim, ", page size ", config.page_size, ", pages ",
                     config.num_pages, " must all be positive"));
  }
  const double bytes = 2.0 * config.n_layers * config.num_pages * config.page_size *
                       config.n_kv_heads * config.head_dim * sizeof(float);
  const double memory = static_cast<double>(PhysicalMemoryBytes());
  if (bytes > kMaxMemoryShare * memory) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: ", bytes / 1e9, " GB requested but the machine has ", memory / 1e9,
                     " GB; reduce the context, the sequences or the pages"));
  }
  return std::unique_ptr<PagedKvCache>(new PagedKvCache(config));
}

PagedKvCache::PagedKvCache(const KvCacheConfig& config)
    : config_(config),
      page_stride_(int64_t{config.n_kv_heads} * config.page_size * config.head_dim),
      pool_floats_(page_stride_ * config.num_pages),
      storage_(static_cast<size_t>(2 * config.n_layers * pool_floats_)) {
  free_list_.reserve(config.num_pages);
  for (int32_t p = config.num_pages - 1; p >= 0; --p) free_list_.push_back(p);
}

absl::StatusOr<int32_t> PagedKvCache::AllocatePage() {
  if (free_list_.empty()) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: all ", config_.num_pages, " pages are in use"));
  }
  int32_t page = free_list_.back();
  free_list_.pop_back();
  return page;
}

void PagedKvCache::FreePage(int32_t page) { free_list_.push_back(page); }

absl::Status BlockTable::Reserve(PagedKvCache& cache, int total_tokens) {
  const int page_size = cache.config().page_size;
  const size_t needed = static_cast<size_t>((total_tokens + page_size - 1) / page_size);
  const size_t before = pages_.size();
  while (pages_.size() < needed) {
    absl::StatusOr<int32_t> page = cache.AllocatePage();
    if (!page.ok()) {
      ShrinkTo(cache, before);
      return page.status();
    }
    pages_.push_back(*page);
  }
  return absl::OkStatus();
}

void BlockTable::ShrinkTo(PagedKvCache& cache, size_t pages) {
  while (pages_.size() > pages) {
    cache.FreePage(pages_.back());
    pages_.pop_back();
  }
}

void BlockTable::Release(PagedKvCache& cache) {
  for (int32_t page : pages_) cache.FreePage(page);
  pages_.clear();
  num_tokens_ = 0;
}

}  // namespace pdserve
