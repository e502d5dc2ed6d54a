#include "core/kv/paged_kv_cache.h"

#include <sys/mman.h>

#include "absl/strings/str_cat.h"
#include "core/base/system_memory.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<PagedKvCache>> PagedKvCache::Create(const KvCacheConfig& config) {
  if (config.page_size <= 0 || config.num_pages <= 0 || config.sections.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("kv cache: page size ", config.page_size, ", pages ", config.num_pages,
                     " and sections ", config.sections.size(), " must all be positive"));
  }
  double bytes = 0.0;
  for (size_t s = 0; s < config.sections.size(); ++s) {
    if (config.sections[s].page_size() != config.page_size) {
      return absl::InvalidArgumentError(
          absl::StrCat("kv cache: section ", s, " has pages of ", config.sections[s].page_size(),
                       " tokens; the cache's are ", config.page_size));
    }
    bytes += static_cast<double>(StrideOf(config.sections[s])) * config.num_pages;
  }
  const double memory = static_cast<double>(PhysicalMemoryBytes());
  if (bytes > kMaxMemoryShare * memory) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: ", bytes / 1e9, " GB requested but the machine has ", memory / 1e9,
                     " GB; reduce the context, the sequences or the pages"));
  }
  auto cache = std::unique_ptr<PagedKvCache>(new PagedKvCache(config));
  if (cache->total_bytes_ > 0 && cache->storage_ == nullptr) {
    return absl::ResourceExhaustedError(
        absl::StrCat("kv cache: could not allocate ", bytes / 1e9, " GB"));
  }
  return cache;
}

void PagedKvCache::Unmap::operator()(uint8_t* p) const {
  if (p != nullptr) ::munmap(p, bytes);
}

PagedKvCache::PagedKvCache(const KvCacheConfig& config)
    : PageAllocator(config.page_size, config.num_pages), config_(config) {
  for (const KvSectionLayout& layout : config.sections) {
    strides_.push_back(StrideOf(layout));
    total_bytes_ += strides_.back() * config.num_pages;
  }
  if (total_bytes_ > 0) {
    const size_t bytes = static_cast<size_t>(total_bytes_);
    void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p != MAP_FAILED) {
      // Decode walks every page of every sequence, a pool of up to gigabytes, each step: on 4 KiB
      // pages most of those runs start with a TLB miss. Advice only; failure leaves normal pages.
      ::madvise(p, bytes, MADV_HUGEPAGE);
      storage_ = {static_cast<uint8_t*>(p), Unmap{bytes}};
    }
  }
  int64_t offset = 0;
  for (int64_t stride : strides_) {
    pools_.push_back(storage_.get() + offset);
    offset += stride * config.num_pages;
  }
}

}  // namespace pdserve
