// PrefixIndex: the router's estimate of which prompt prefixes each KV store's prefix cache holds,
// for kv-aware routing (docs/services.md, "Scheduling"). It learns from prefill replies: a reply
// says that its store now holds the prompt's first `published_tokens` tokens in named pages
// (PrefillReply.published_tokens), and the index records those pages as 64-bit chained hashes of
// their token ids (page i: Xxh64 of its tokens seeded with page i − 1's hash).
//
// An estimate, never an authority: a store evicts on its own, and the index keeps at most
// `max_pages_per_store` pages per store, least recently recorded first; a reply from a new
// instance of a store (a restart empties its cache) makes the index forget that store's pages.
// The store's own SHA-256 names (core/kv/prefix_hash.h) decide what is reused, so a wrong guess
// costs a cache miss, never a wrong answer.
//
// Thread-safe.
#ifndef PDSERVE_SERVICES_ROUTER_PREFIX_INDEX_H_
#define PDSERVE_SERVICES_ROUTER_PREFIX_INDEX_H_

#include <cstdint>
#include <list>
#include <span>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "core/base/mutex.h"

namespace pdserve {

class PrefixIndex {
 public:
  // At least one page per store.
  explicit PrefixIndex(int64_t max_pages_per_store);

  // `store` (its instance id `instance`, KvStoreInfo.instance_id) holds the first
  // `published_tokens` tokens of `prompt` in pages of `page_tokens` tokens. Ignored when
  // page_tokens < 1 or published_tokens < page_tokens (nothing named: the prefix cache is off).
  void Record(const std::string& store, uint64_t instance, int page_tokens,
              std::span<const int32_t> prompt, int64_t published_tokens);

  // Per known store, the leading tokens of `prompt` it is expected to hold: its longest run of
  // recorded whole pages, never the last token (prefill always computes it). A store the index
  // has not heard of is absent (it holds nothing). The prompt is hashed once per page size.
  absl::flat_hash_map<std::string, int64_t> CachedTokens(std::span<const int32_t> prompt) const;

  // Pages recorded for `store` (0 when unknown).
  int64_t Pages(const std::string& store) const;

 private:
  struct Store {
    uint64_t instance = 0;
    int page_tokens = 0;
    std::list<uint64_t> lru;  // most recently recorded first
    absl::flat_hash_map<uint64_t, std::list<uint64_t>::iterator> pages;
  };
  const int64_t max_pages_per_store_;
  mutable Mutex mu_;
  absl::flat_hash_map<std::string, Store> stores_ ABSL_GUARDED_BY(mu_);
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_PREFIX_INDEX_H_
