// PagedKvCache: one fixed pool of fp32 KV pages for all layers of a model, allocated once. A page
// index names the same slot in every layer (one allocation covers a block of P tokens through the
// whole model). Per layer the K pool is [num_pages, n_kv_heads, page_size, head_dim] floats; V has
// the same shape in its own pool. BlockTable lists the pages of one sequence in token order.
//
// Not thread-safe: the engine that owns the cache serializes allocation; kernels read and write
// disjoint rows concurrently through the raw pointers.
#ifndef PDSERVE_CORE_KV_PAGED_KV_CACHE_H_
#define PDSERVE_CORE_KV_PAGED_KV_CACHE_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve {

struct KvCacheConfig {
  int n_layers = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
  int page_size = 16;  // tokens per page
  int num_pages = 0;
};

class PagedKvCache {
 public:
  // InvalidArgument for non-positive sizes; ResourceExhausted when the pool cannot be allocated.
  static absl::StatusOr<std::unique_ptr<PagedKvCache>> Create(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }
  int64_t page_stride() const { return page_stride_; }  // floats per page, per layer, K or V
  float* k_pool(int layer) { return storage_.data() + (2 * int64_t{layer}) * pool_floats_; }
  float* v_pool(int layer) { return storage_.data() + (2 * int64_t{layer} + 1) * pool_floats_; }

  // The K (or V) vector of KV head `head` for the token in `slot` of `page`.
  float* KRow(int layer, int32_t page, int slot, int head) {
    return k_pool(layer) + RowOffset(page, slot, head);
  }
  float* VRow(int layer, int32_t page, int slot, int head) {
    return v_pool(layer) + RowOffset(page, slot, head);
  }

  int free_pages() const { return static_cast<int>(free_list_.size()); }

  // Takes a free page; ResourceExhausted when none is left.
  absl::StatusOr<int32_t> AllocatePage();
  // Returns `page` to the pool. Requires a page this cache handed out and not yet freed.
  void FreePage(int32_t page);

 private:
  explicit PagedKvCache(const KvCacheConfig& config);
  int64_t RowOffset(int32_t page, int slot, int head) const {
    return page * page_stride_ + (int64_t{head} * config_.page_size + slot) * config_.head_dim;
  }

  KvCacheConfig config_;
  int64_t page_stride_;
  int64_t pool_floats_;
  std::vector<float> storage_;
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
