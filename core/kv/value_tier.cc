#include "core/kv/value_tier.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<InProcessValueTier>> InProcessValueTier::Create(
    int page_size, int num_pages, std::vector<KvSectionLayout> sections) {
  KvCacheConfig config;
  config.page_size = page_size;
  config.num_pages = num_pages;
  config.sections = std::move(sections);
  absl::StatusOr<std::unique_ptr<PagedKvCache>> pages = PagedKvCache::Create(config);
  if (!pages.ok()) return pages.status();
  return std::unique_ptr<InProcessValueTier>(new InProcessValueTier(std::move(*pages)));
}

const uint8_t* InProcessValueTier::FetchHead(int section, int32_t page, int head) {
  const KvSectionLayout& l = layout(section);
  const int64_t rows = int64_t{l.page_size()} * l.dim(head) * l.element_bytes();
  bytes_fetched_.fetch_add(rows + int64_t{l.scales_per_head()} * 4, std::memory_order_relaxed);
  return pages_->Page(section, page);
}

}  // namespace pdserve
