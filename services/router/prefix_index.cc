#include "services/router/prefix_index.h"

#include <algorithm>
#include <vector>

#include "core/base/hash.h"
#include "core/kv/prefix_hash.h"

namespace pdserve {
namespace {

// The chained hashes of the first `pages` whole pages of `prompt`.
std::vector<uint64_t> PageHashes(std::span<const int32_t> prompt, int page_tokens, int64_t pages) {
  std::vector<uint64_t> hashes;
  hashes.reserve(static_cast<size_t>(pages));
  uint64_t previous = 0;
  for (int64_t p = 0; p < pages; ++p) {
    const std::span<const int32_t> page = prompt.subspan(p * page_tokens, page_tokens);
    previous = Xxh64({reinterpret_cast<const uint8_t*>(page.data()), page.size_bytes()}, previous);
    hashes.push_back(previous);
  }
  return hashes;
}

}  // namespace

PrefixIndex::PrefixIndex(int64_t max_pages_per_store)
    : max_pages_per_store_(std::max<int64_t>(1, max_pages_per_store)) {}

void PrefixIndex::Record(const std::string& store, uint64_t instance, int page_tokens,
                         std::span<const int32_t> prompt, int64_t published_tokens) {
  if (page_tokens < 1) return;
  const int64_t pages =
      std::min<int64_t>(published_tokens, static_cast<int64_t>(prompt.size())) / page_tokens;
  if (pages < 1) return;
  const std::vector<uint64_t> hashes = PageHashes(prompt, page_tokens, pages);
  MutexLock lock(&mu_);
  Store& s = stores_[store];
  if (s.instance != instance || s.page_tokens != page_tokens) {
    s = Store();  // another instance (a restart empties the cache) or another page size
    s.instance = instance;
    s.page_tokens = page_tokens;
  }
  // Deepest first, so that a prompt's first pages end up most recent: they are evicted last, as
  // the store drops a prompt's deepest pages before the pages they extend.
  for (auto hash = hashes.rbegin(); hash != hashes.rend(); ++hash) {
    auto found = s.pages.find(*hash);
    if (found != s.pages.end()) {
      s.lru.splice(s.lru.begin(), s.lru, found->second);
      continue;
    }
    s.lru.push_front(*hash);
    s.pages.emplace(*hash, s.lru.begin());
    if (static_cast<int64_t>(s.lru.size()) > max_pages_per_store_) {
      s.pages.erase(s.lru.back());
      s.lru.pop_back();
    }
  }
}

absl::flat_hash_map<std::string, int64_t> PrefixIndex::CachedTokens(
    std::span<const int32_t> prompt) const {
  absl::flat_hash_map<int, std::vector<uint64_t>> hashes;  // by page size
  absl::flat_hash_map<std::string, int64_t> cached;
  MutexLock lock(&mu_);
  for (const auto& [address, store] : stores_) {
    std::vector<uint64_t>& named = hashes[store.page_tokens];
    if (named.empty()) {  // the pages the prefill worker names
      named = PageHashes(prompt, store.page_tokens,
                         NamedPrefixTokens(static_cast<int64_t>(prompt.size()), store.page_tokens) /
                             store.page_tokens);
    }
    int64_t held = 0;
    while (held < static_cast<int64_t>(named.size()) && store.pages.contains(named[held])) ++held;
    cached[address] = held * store.page_tokens;
  }
  return cached;
}

int64_t PrefixIndex::Pages(const std::string& store) const {
  MutexLock lock(&mu_);
  auto found = stores_.find(store);
  return found == stores_.end() ? 0 : static_cast<int64_t>(found->second.lru.size());
}

}  // namespace pdserve
