#include "services/kvstore/page_pool.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/kv/kv_page.h"

namespace pdserve {
namespace {

constexpr int64_t kMinSlotBytes = 4096;
// Bytes zeroed at the start of a freed slot: enough to break the page magic and header.
constexpr int64_t kScrubBytes = 64;

spdlog::logger& Log() {
  static const std::shared_ptr<spdlog::logger> logger = GetLogger("kvstore");
  return *logger;
}

}  // namespace

absl::Status PagePoolOptions::Validate() const {
  if (slot_bytes < kMinSlotBytes || slot_bytes % 64 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("slot_bytes must be >= 4096 and a multiple of 64, got ", slot_bytes));
  }
  if (num_slots < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("the pool must hold at least one slot, got ", num_slots));
  }
  if (num_slots > (int64_t{1} << 40) / slot_bytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool of ", num_slots, " slots of ", slot_bytes, " bytes is too large"));
  }
  if (default_lease <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("default lease must be > 0, got ", absl::FormatDuration(default_lease)));
  }
  if (max_lease < default_lease) {
    return absl::InvalidArgumentError(absl::StrCat("max lease (", absl::FormatDuration(max_lease),
                                                   ") must be >= the default lease (",
                                                   absl::FormatDuration(default_lease), ")"));
  }
  if (!clock) return absl::InvalidArgumentError("clock must be set");
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<PagePool>> PagePool::Create(PagePoolOptions options) {
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  const size_t bytes = static_cast<size_t>(options.slot_bytes * options.num_slots);
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (base == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map a page pool of ", bytes, " bytes: ", std::strerror(errno)));
  }
  return std::unique_ptr<PagePool>(
      new PagePool(std::move(options), static_cast<uint8_t*>(base), /*owns_memory=*/true));
}

absl::StatusOr<std::unique_ptr<PagePool>> PagePool::Create(PagePoolOptions options, uint8_t* base) {
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  if (base == nullptr || reinterpret_cast<uintptr_t>(base) % 64 != 0) {
    return absl::InvalidArgumentError("page pool memory must be non-null and 64-byte aligned");
  }
  // Memory that was not freshly mapped may hold anything: scrub every slot's header so no stale
  // page can seal into an allocation (as Release does for freed slots).
  for (int64_t slot = 0; slot < options.num_slots; ++slot) {
    std::memset(base + slot * options.slot_bytes, 0, kScrubBytes);
  }
  return std::unique_ptr<PagePool>(new PagePool(std::move(options), base, /*owns_memory=*/false));
}

PagePool::PagePool(PagePoolOptions options, uint8_t* base, bool owns_memory)
    : options_(std::move(options)), base_(base), owns_memory_(owns_memory) {
  free_slots_.reserve(static_cast<size_t>(options_.num_slots));
  // A stack popped from the back: slot 0 is handed out first.
  for (int64_t slot = options_.num_slots - 1; slot >= 0; --slot) free_slots_.push_back(slot);
}

PagePool::~PagePool() {
  if (owns_memory_) munmap(base_, static_cast<size_t>(pool_bytes()));
}

absl::StatusOr<absl::Duration> PagePool::GrantedLease(absl::Duration lease) const {
  if (lease < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("lease must be >= 0 (0 = default), got ", absl::FormatDuration(lease)));
  }
  if (lease == absl::ZeroDuration()) return options_.default_lease;
  return std::min(lease, options_.max_lease);
}

namespace {

// InvalidArgument unless `prefix` fits `page_bytes`: cache_layers equal runs of pages of one size
// each, at least as many pages per run as names.
absl::Status CheckPrefix(uint64_t request_id, std::span<const uint32_t> page_bytes,
                         const PrefixPages& prefix) {
  if (prefix.hashes.empty()) return absl::OkStatus();
  const int64_t layers = prefix.cache_layers;
  if (layers < 1 || static_cast<int64_t>(page_bytes.size()) % layers != 0) {
    return absl::InvalidArgumentError(absl::StrCat("request ", request_id, ": ", page_bytes.size(),
                                                   " pages are not runs of equally many pages for ",
                                                   layers, " cache layers"));
  }
  const int64_t pages = static_cast<int64_t>(page_bytes.size()) / layers;
  if (static_cast<int64_t>(prefix.hashes.size()) > pages) {
    return absl::InvalidArgumentError(absl::StrCat("request ", request_id, ": ",
                                                   prefix.hashes.size(), " page names for ", pages,
                                                   " pages per cache layer"));
  }
  for (int64_t i = 0; i < static_cast<int64_t>(page_bytes.size()); ++i) {
    if (page_bytes[i] != page_bytes[i / pages * pages]) {
      return absl::InvalidArgumentError(absl::StrCat(
          "request ", request_id, ": the pages of cache layer ", i / pages, " differ in size"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<PageAllocation> PagePool::Allocate(uint64_t request_id,
                                                  std::span<const uint32_t> page_bytes,
                                                  absl::Duration lease, PrefixPages prefix) {
  if (page_bytes.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("request ", request_id, ": no pages"));
  }
  if (static_cast<int64_t>(page_bytes.size()) > options_.num_slots) {
    return absl::InvalidArgumentError(absl::StrCat("request ", request_id, ": ", page_bytes.size(),
                                                   " pages, the pool has only ", options_.num_slots,
                                                   " slots"));
  }
  for (size_t i = 0; i < page_bytes.size(); ++i) {
    if (page_bytes[i] == 0 || page_bytes[i] > options_.slot_bytes) {
      return absl::InvalidArgumentError(absl::StrCat("request ", request_id, ": page ", i, " of ",
                                                     page_bytes[i], " bytes; a slot holds 1 to ",
                                                     options_.slot_bytes));
    }
  }
  PDSERVE_RETURN_IF_ERROR(CheckPrefix(request_id, page_bytes, prefix));
  PDSERVE_ASSIGN_OR_RETURN(const absl::Duration granted, GrantedLease(lease));
  const int layers = prefix.hashes.empty() ? 1 : prefix.cache_layers;
  const int pages = static_cast<int>(page_bytes.size()) / layers;

  MutexLock lock(&mu_);
  std::vector<PrefixPageHash> reused = PinPrefixLocked(prefix, page_bytes, pages);
  const int r = static_cast<int>(reused.size());
  const int64_t needed = static_cast<int64_t>(page_bytes.size()) - int64_t{r} * layers;
  EvictLocked(needed);
  const int64_t free = static_cast<int64_t>(free_slots_.size());
  if (free < needed) {
    for (const PrefixPageHash& hash : reused) UnpinLocked(hash);
    return absl::ResourceExhaustedError(absl::StrCat("request ", request_id, ": KV pool has ", free,
                                                     " free slots, needs ", needed));
  }
  PageAllocation result;
  result.allocation_id = next_allocation_id_++;
  do {
    result.lease_token = token_gen_();
  } while (result.lease_token == 0);
  result.lease = granted;
  result.reused_pages = r;
  Allocation& allocation = allocations_[result.allocation_id];
  result.slots.reserve(page_bytes.size());
  for (size_t i = 0; i < page_bytes.size(); ++i) {
    const int page = static_cast<int>(i) % pages;
    if (page < r) {
      result.slots.push_back(cached_[reused[page]].slots[i / pages]);
      continue;
    }
    const int64_t slot = free_slots_.back();
    free_slots_.pop_back();
    result.slots.push_back(slot);
    allocation.slots.push_back(slot);
  }
  for (const PrefixPageHash& hash : reused) {
    result.written_by.push_back(cached_[hash].written_by);
    result.written_epoch.push_back(cached_[hash].written_epoch);
  }
  allocation.id = result.allocation_id;
  allocation.request_id = request_id;
  allocation.lease_token = result.lease_token;
  allocation.lease = granted;
  allocation.expiry = options_.clock() + granted;
  if (!prefix.hashes.empty()) {
    allocation.cache_layers = layers;
    allocation.pages = pages;
    allocation.reused = r;
    for (int c = 0; c < layers; ++c) allocation.layer_bytes.push_back(page_bytes[c * pages]);
    allocation.publish.assign(prefix.hashes.begin() + r, prefix.hashes.end());
    allocation.pinned = std::move(reused);
  }
  by_request_[request_id].push_back(result.allocation_id);
  Log().debug("allocated {} slots for request {} (allocation {}, lease {}, {} cached pages reused)",
              needed, request_id, result.allocation_id, absl::FormatDuration(granted), r);
  return result;
}

std::vector<PrefixPageHash> PagePool::PinPrefixLocked(const PrefixPages& prefix,
                                                      std::span<const uint32_t> page_bytes,
                                                      int pages) {
  std::vector<PrefixPageHash> pinned;
  for (const PrefixPageHash& hash : prefix.hashes) {
    auto it = cached_.find(hash);
    if (it == cached_.end()) break;
    CachedPage& page = it->second;
    bool same_sizes = page.layer_bytes.size() == static_cast<size_t>(prefix.cache_layers);
    for (int c = 0; same_sizes && c < prefix.cache_layers; ++c) {
      same_sizes = page.layer_bytes[c] == page_bytes[c * pages];
    }
    if (!same_sizes) {
      ++prefix_mismatches_;
      Log().warn("cached page {} has other page sizes than a request naming it: not reused",
                 PrefixHashHex(hash));
      break;
    }
    if (page.pins++ == 0) idle_.erase(page.idle);
    pinned.push_back(hash);
  }
  prefix_hit_pages_ += static_cast<int64_t>(pinned.size());
  prefix_miss_pages_ += static_cast<int64_t>(prefix.hashes.size() - pinned.size());
  return pinned;
}

void PagePool::UnpinLocked(const PrefixPageHash& hash) {
  auto it = cached_.find(hash);
  if (it == cached_.end()) return;
  if (--it->second.pins == 0) it->second.idle = idle_.insert(idle_.end(), hash);
}

void PagePool::EvictLocked(int64_t needed) {
  while (static_cast<int64_t>(free_slots_.size()) < needed && !idle_.empty()) {
    auto it = cached_.find(idle_.front());
    idle_.pop_front();
    for (int64_t slot : it->second.slots) FreeSlotLocked(slot);
    cached_.erase(it);
    ++prefix_evictions_;
  }
}

void PagePool::PublishLocked(Allocation& allocation) {
  const int own = allocation.pages - allocation.reused;  // own pages per cache layer
  for (size_t i = 0; i < allocation.publish.size(); ++i) {
    const PrefixPageHash& hash = allocation.publish[i];
    if (cached_.contains(hash)) continue;  // published by another request first
    CachedPage page;
    for (int c = 0; c < allocation.cache_layers; ++c) {
      int64_t& slot = allocation.slots[static_cast<size_t>(c) * own + i];
      page.slots.push_back(slot);
      slot = -1;  // the cache's now
    }
    page.layer_bytes = allocation.layer_bytes;
    page.written_by = allocation.request_id;
    page.written_epoch = allocation.id;
    page.pins = 1;
    cached_.emplace(hash, std::move(page));
    allocation.pinned.push_back(hash);
  }
}

absl::Status PagePool::NotCancelled(const Allocation& allocation) {
  if (!allocation.cancelled) return absl::OkStatus();
  return absl::CancelledError(absl::StrCat("allocation ", allocation.id, " of request ",
                                           allocation.request_id,
                                           " was cancelled: its request ended; release it"));
}

absl::StatusOr<PagePool::Allocation*> PagePool::FindLocked(uint64_t allocation_id,
                                                           uint64_t lease_token) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) {
    return absl::NotFoundError(absl::StrCat("allocation ", allocation_id, " does not exist"));
  }
  if (it->second.lease_token != lease_token) {
    return absl::PermissionDeniedError(
        absl::StrCat("wrong lease token for allocation ", allocation_id));
  }
  if (it->second.expiry <= options_.clock()) {
    Log().debug("lease of allocation {} (request {}) expired", allocation_id,
                it->second.request_id);
    FreeLocked(allocation_id);
    ++lease_expiries_total_;
    return absl::NotFoundError(absl::StrCat("lease of allocation ", allocation_id, " expired"));
  }
  return &it->second;
}

absl::Status PagePool::CheckPagesLocked(const Allocation& allocation,
                                        std::span<const SealedPageRef> pages) const {
  if (pages.size() != allocation.slots.size()) {
    return absl::InvalidArgumentError(absl::StrCat("seal names ", pages.size(),
                                                   " pages; the allocation has ",
                                                   allocation.slots.size(), " slots"));
  }
  std::vector<bool> seen(allocation.slots.size(), false);
  for (size_t i = 0; i < pages.size(); ++i) {
    const SealedPageRef& ref = pages[i];
    const std::string name =
        absl::StrCat("page ", i, " (layer ", ref.cache_layer, ", index ", ref.page_index, ")");
    const auto slot_it = ref.slot_offset % options_.slot_bytes == 0
                             ? std::find(allocation.slots.begin(), allocation.slots.end(),
                                         ref.slot_offset / options_.slot_bytes)
                             : allocation.slots.end();
    if (ref.slot_offset < 0 || slot_it == allocation.slots.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": offset ", ref.slot_offset, " is not a slot of this allocation"));
    }
    const size_t position = static_cast<size_t>(slot_it - allocation.slots.begin());
    if (seen[position]) {
      return absl::InvalidArgumentError(absl::StrCat(name, ": its slot is named twice"));
    }
    seen[position] = true;
    if (ref.encoded_bytes == 0 || ref.encoded_bytes > options_.slot_bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, ": ", ref.encoded_bytes, " bytes does not fit a slot"));
    }
    const std::span<const uint8_t> bytes(base_ + ref.slot_offset, ref.encoded_bytes);
    absl::StatusOr<KvPageView> page = DecodeKvPage(bytes);
    if (!page.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat(name, " does not decode: ", page.status().message()));
    }
    const KvPageHeader& header = page->header;
    if (header.request_id != allocation.request_id) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, " belongs to request ", header.request_id, ", not ", allocation.request_id));
    }
    if (header.epoch != allocation.id) {
      return absl::InvalidArgumentError(absl::StrCat(name, " carries epoch ", header.epoch,
                                                     ", not its allocation's ", allocation.id));
    }
    if (header.cache_layer != ref.cache_layer || header.page_index != ref.page_index ||
        header.num_tokens != ref.num_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          name, ": the page holds layer ", header.cache_layer, ", index ", header.page_index, ", ",
          header.num_tokens, " tokens; the ref says ", ref.num_tokens, " tokens"));
    }
  }
  return absl::OkStatus();
}

absl::Status PagePool::Seal(uint64_t allocation_id, uint64_t lease_token,
                            std::span<const SealedPageRef> pages) {
  MutexLock lock(&mu_);
  PDSERVE_ASSIGN_OR_RETURN(Allocation * allocation, FindLocked(allocation_id, lease_token));
  PDSERVE_RETURN_IF_ERROR(NotCancelled(*allocation));
  if (allocation->sealed) {
    return absl::FailedPreconditionError(
        absl::StrCat("allocation ", allocation_id, " is already sealed"));
  }
  absl::Status checked = CheckPagesLocked(*allocation, pages);
  if (!checked.ok()) {
    return absl::Status(checked.code(),
                        absl::StrCat("request ", allocation->request_id, ", allocation ",
                                     allocation_id, ": ", checked.message()));
  }
  allocation->sealed = true;
  allocation->expiry = options_.clock() + allocation->lease;
  PublishLocked(*allocation);
  Log().debug("sealed allocation {} (request {}, {} pages)", allocation_id, allocation->request_id,
              pages.size());
  return absl::OkStatus();
}

absl::StatusOr<absl::Duration> PagePool::Renew(uint64_t allocation_id, uint64_t lease_token,
                                               absl::Duration lease) {
  PDSERVE_ASSIGN_OR_RETURN(const absl::Duration granted, GrantedLease(lease));
  MutexLock lock(&mu_);
  PDSERVE_ASSIGN_OR_RETURN(Allocation * allocation, FindLocked(allocation_id, lease_token));
  PDSERVE_RETURN_IF_ERROR(NotCancelled(*allocation));
  allocation->lease = granted;
  allocation->expiry = options_.clock() + granted;
  return granted;
}

absl::Status PagePool::Release(uint64_t allocation_id, uint64_t lease_token) {
  MutexLock lock(&mu_);
  PDSERVE_ASSIGN_OR_RETURN(Allocation * allocation, FindLocked(allocation_id, lease_token));
  Log().debug("released allocation {} (request {})", allocation_id, allocation->request_id);
  FreeLocked(allocation_id);
  ++releases_total_;
  return absl::OkStatus();
}

int PagePool::CancelRequest(uint64_t request_id) {
  MutexLock lock(&mu_);
  auto it = by_request_.find(request_id);
  if (it == by_request_.end()) return 0;
  const std::vector<uint64_t> ids = it->second;  // FreeLocked edits by_request_
  int freed = 0;
  int marked = 0;
  for (uint64_t id : ids) {
    Allocation& allocation = allocations_[id];
    if (allocation.sealed) {
      FreeLocked(id);
      ++freed;
    } else if (!allocation.cancelled) {
      allocation.cancelled = true;  // its writer may still be writing: the slots stay its own
      ++marked;
    }
  }
  cancellations_total_ += freed + marked;
  Log().debug("cancelled request {}: freed {} allocations, {} still being written", request_id,
              freed, marked);
  return freed + marked;
}

int PagePool::ExpireLeases(absl::Time now) {
  MutexLock lock(&mu_);
  std::vector<uint64_t> expired;
  for (const auto& [id, allocation] : allocations_) {
    if (allocation.expiry <= now) expired.push_back(id);
  }
  for (uint64_t id : expired) {
    Log().debug("lease of allocation {} (request {}) expired", id, allocations_[id].request_id);
    FreeLocked(id);
  }
  lease_expiries_total_ += static_cast<int64_t>(expired.size());
  return static_cast<int>(expired.size());
}

void PagePool::FreeLocked(uint64_t allocation_id) {
  auto it = allocations_.find(allocation_id);
  if (it == allocations_.end()) return;
  for (int64_t slot : it->second.slots) {
    if (slot >= 0) FreeSlotLocked(slot);
  }
  // Deepest pages first into the idle list, so that they are dropped before the pages they extend:
  // a prompt's cached run shortens from its end instead of losing its head (and with it the run).
  const std::vector<PrefixPageHash>& pinned = it->second.pinned;
  for (auto hash = pinned.rbegin(); hash != pinned.rend(); ++hash) UnpinLocked(*hash);
  auto owner = by_request_.find(it->second.request_id);
  if (owner != by_request_.end()) {
    std::erase(owner->second, allocation_id);
    if (owner->second.empty()) by_request_.erase(owner);
  }
  allocations_.erase(it);
}

void PagePool::FreeSlotLocked(int64_t slot) {
  std::memset(base_ + slot * options_.slot_bytes, 0, kScrubBytes);
  free_slots_.push_back(slot);
}

PagePoolUsage PagePool::Usage() const {
  MutexLock lock(&mu_);
  PagePoolUsage usage;
  usage.total_slots = options_.num_slots;
  usage.free_slots = static_cast<int64_t>(free_slots_.size());
  for (const auto& [id, allocation] : allocations_) {
    const int64_t slots = std::count_if(allocation.slots.begin(), allocation.slots.end(),
                                        [](int64_t slot) { return slot >= 0; });
    (allocation.sealed ? usage.sealed_slots : usage.allocated_slots) += slots;
  }
  for (const auto& [hash, page] : cached_) {
    usage.cached_slots += static_cast<int64_t>(page.slots.size());
    usage.pinned_pages += page.pins > 0 ? 1 : 0;
    if (page.pins == 0) usage.idle_cached_slots += static_cast<int64_t>(page.slots.size());
  }
  usage.cached_pages = static_cast<int64_t>(cached_.size());
  usage.prefix_hit_pages = prefix_hit_pages_;
  usage.prefix_miss_pages = prefix_miss_pages_;
  usage.prefix_mismatches = prefix_mismatches_;
  usage.prefix_evictions = prefix_evictions_;
  usage.allocations = static_cast<int64_t>(allocations_.size());
  usage.lease_expiries_total = lease_expiries_total_;
  usage.releases_total = releases_total_;
  usage.cancellations_total = cancellations_total_;
  return usage;
}

}  // namespace pdserve
