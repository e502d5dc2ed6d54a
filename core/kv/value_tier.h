// ValueTier: where KCache layers keep their V pages, apart from the decoder's resident K
// (DESIGN §4 KCache). Page ids are the decoder cache's (PagedKvCache allocates; the tier mirrors
// its pages), sections are the tier's own list of V layouts. Every read a decode step makes goes
// through FetchHead, which counts the bytes it hands out: the figure KCache exists to shrink.
//
// InProcessValueTier keeps the pages in this process's memory; the kvstore service (the services
// issue) will implement the same interface over the network. Writes and fetches of distinct
// (section, page) pairs may run concurrently.
#ifndef PDSERVE_CORE_KV_VALUE_TIER_H_
#define PDSERVE_CORE_KV_VALUE_TIER_H_

#include <atomic>
#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "core/kv/kv_layout.h"
#include "core/kv/paged_kv_cache.h"

namespace pdserve {

class ValueTier {
 public:
  virtual ~ValueTier() = default;

  virtual const KvSectionLayout& layout(int section) const = 0;
  // The page's section bytes to write V rows into (core/kv/kv_row_codec.h).
  virtual uint8_t* WritablePage(int section, int32_t page) = 0;
  // The page's section bytes for reading KV head `head`'s rows and scales; counts those bytes.
  virtual const uint8_t* FetchHead(int section, int32_t page, int head) = 0;
  // Bytes handed out by FetchHead since creation.
  virtual int64_t bytes_fetched() const = 0;
};

class InProcessValueTier final : public ValueTier {
 public:
  // One section per layout, num_pages pages each.
  static absl::StatusOr<std::unique_ptr<InProcessValueTier>> Create(
      int page_size, int num_pages, std::vector<KvSectionLayout> sections);

  const KvSectionLayout& layout(int section) const override { return pages_->layout(section); }
  uint8_t* WritablePage(int section, int32_t page) override { return pages_->Page(section, page); }
  const uint8_t* FetchHead(int section, int32_t page, int head) override;
  int64_t bytes_fetched() const override { return bytes_fetched_.load(); }

  // Direct access for dense (prefill) attention in this process, not counted.
  const uint8_t* section_pool(int section) const { return pages_->section_pool(section); }
  int64_t section_stride(int section) const { return pages_->section_stride(section); }
  int64_t total_bytes() const { return pages_->total_bytes(); }

 private:
  explicit InProcessValueTier(std::unique_ptr<PagedKvCache> pages) : pages_(std::move(pages)) {}

  std::unique_ptr<PagedKvCache> pages_;  // storage only; its allocator is unused
  std::atomic<int64_t> bytes_fetched_{0};
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_VALUE_TIER_H_
