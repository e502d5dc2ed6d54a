// PagePool: the KV store's host-memory page pool (DESIGN §2, §4 "KV pages", §6). One contiguous,
// allocation of `num_slots` slots of `slot_bytes` each, made once at creation (its own page-aligned
// mapping, or memory the caller provides, e.g. from Transport::Allocate); each slot holds one
// encoded KV page (core/kv/kv_page.h). Pure logic: no gRPC, no transport (the service allocates
// the pool's memory through the transport and hands it to the pool).
//
// Life of an allocation (one request owns it; the capability is its lease token):
//   Allocate → allocated (peers write the slots one-sided: "written" is not observed here)
//            → Seal (every page decodes and matches its PageRef) → sealed (peers read)
//            → freed by Release, CancelRequest(request_id), or lease expiry.
// CancelRequest frees a sealed allocation at once, but only marks an unsealed one cancelled: its
// writer may still be putting pages into its slots, which must not reach the slots' next owner,
// so they stay the cancelled allocation's until its writer releases it or its lease runs out
// (Seal and Renew then answer Cancelled).
// Seal restarts the lease at its last granted length (the sealed pages' holder has a whole lease
// to hand them on); Renew extends it in either state. Every call after Allocate presents the
// allocation id and token: an unknown or already-freed allocation is NotFound, a wrong token
// PermissionDenied. An allocation whose lease has run out is freed when the next call touches it
// (NotFound) or by ExpireLeases, whichever comes first. Freed slots have their first bytes zeroed,
// so a stale page never seals into a new allocation.
//
// Prefix cache: an allocation may name the full pages of its prompt (PrefixPageHash, chained over
// the tokens and the model/profile identity: core/kv/prefix_hash.h). Allocate then reuses the
// longest run of leading pages already cached under those names — the same slots, shared
// read-only, one per cache layer — and reserves slots only for the rest; Seal publishes the
// allocation's own named pages under their names (unless another request published the name
// first). A cached page is pinned while any allocation that reads or published it lives; unpinned,
// it stays until Allocate needs its slots, least recently unpinned first (an allocation unpins its
// deepest pages first, so a prompt's cached run shortens from its end). Cached and request pages
// share the one pool. A name whose cached page has another encoded size than the requester's (a
// collision, or a bug) is not reused: counted, and the run of reused pages ends there.
//
// Remote access: the transport cannot enforce per-slot rights (the rkey covers the whole pool,
// see ucx_transport.h), so the pool enforces them at the control plane: slot addresses are only
// handed to the allocation's owner, and a page is only meant to be read once sealed.
//
// Thread safety: all methods may be called from any thread (one mutex). The slot memory itself is
// written and read by remote peers without the pool's involvement.
#ifndef PDSERVE_SERVICES_KVSTORE_PAGE_POOL_H_
#define PDSERVE_SERVICES_KVSTORE_PAGE_POOL_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <list>
#include <memory>
#include <span>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/random/random.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"
#include "core/kv/prefix_hash.h"

namespace pdserve {

struct PagePoolOptions {
  int64_t slot_bytes = 128 << 10;  // ≥ 4 KiB, a multiple of 64: the largest page a slot holds
  int64_t num_slots = 2048;        // ≥ 1
  absl::Duration default_lease = absl::Seconds(10);  // > 0: what a lease of 0 means
  absl::Duration max_lease = absl::Seconds(60);      // ≥ default_lease: longer leases are capped
  std::function<absl::Time()> clock = [] { return absl::Now(); };  // injectable for tests

  // InvalidArgument naming the field that is out of range.
  absl::Status Validate() const;
};

// The prompt pages an allocation names for the prefix cache. page_bytes is then cache-layer major:
// cache_layers runs of equally many pages, page p of cache layer c at c · pages + p.
struct PrefixPages {
  std::span<const PrefixPageHash> hashes;  // names of pages 0, 1, ... (full pages only)
  int cache_layers = 0;                    // ≥ 1 when hashes is not empty
};

struct PageAllocation {
  // Also the epoch of its own pages: their headers must carry it (KvPageHeader::epoch), so that a
  // page read back from a slot that was freed and handed to a later allocation is seen as stale.
  uint64_t allocation_id = 0;
  uint64_t lease_token = 0;    // random, nonzero; the capability for every later call
  std::vector<int64_t> slots;  // slot of page i, in the order of the requested page_bytes
  absl::Duration lease;        // as granted (default applied, capped at max_lease)
  // Pages [0, reused_pages) of every cache layer are cached pages: sealed already, shared, to be
  // read and never written; their slots are not the allocation's to seal. Their pages' headers
  // carry the request that wrote them, written_by[p], and its allocation's epoch, written_epoch[p].
  int reused_pages = 0;
  std::vector<uint64_t> written_by;
  std::vector<uint64_t> written_epoch;
};

// One written page as the owner describes it at Seal (a PageRef with its slot resolved).
struct SealedPageRef {
  int64_t slot_offset = 0;     // byte offset of the page from base(): a slot start
  uint32_t encoded_bytes = 0;  // the page is the slot's first encoded_bytes bytes
  int32_t cache_layer = 0;
  int32_t page_index = 0;
  int32_t num_tokens = 0;
};

struct PagePoolUsage {
  int64_t total_slots = 0;
  int64_t free_slots = 0;
  int64_t allocated_slots = 0;  // allocated, not yet sealed
  int64_t sealed_slots = 0;
  int64_t allocations = 0;
  int64_t lease_expiries_total = 0;  // allocations freed because their lease ran out
  int64_t releases_total = 0;        // allocations freed by Release
  int64_t cancellations_total = 0;   // allocations CancelRequest freed or marked cancelled
  // Prefix cache.
  int64_t cached_slots = 0;       // slots of cached pages (pinned or not)
  int64_t idle_cached_slots = 0;  // of which unpinned: Allocate takes them when it must
  int64_t cached_pages = 0;       // names cached (each holds one slot per cache layer)
  int64_t pinned_pages = 0;       // cached pages some live allocation reads or published
  int64_t prefix_hit_pages = 0;   // named pages Allocate reused
  int64_t prefix_miss_pages = 0;  // named pages Allocate found no (usable) cached page for
  int64_t prefix_mismatches = 0;  // names found with a page of another size: refused
  int64_t prefix_evictions = 0;   // cached pages dropped to make room
};

class PagePool {
 public:
  // Validates `options` and maps the slot memory (page aligned). ResourceExhausted when the
  // memory cannot be had.
  static absl::StatusOr<std::unique_ptr<PagePool>> Create(PagePoolOptions options);
  // Validates `options` and uses [base, base + slot_bytes * num_slots) as the slot memory: the
  // caller owns it (e.g. a MemoryRegion from Transport::Allocate) and keeps it alive and mapped
  // until the pool is destroyed. The start of every slot is zeroed (see Release). InvalidArgument
  // for a null or not 64-byte aligned base.
  static absl::StatusOr<std::unique_ptr<PagePool>> Create(PagePoolOptions options, uint8_t* base);
  ~PagePool();  // unmaps the slot memory only if the pool mapped it
  PagePool(const PagePool&) = delete;
  PagePool& operator=(const PagePool&) = delete;

  uint8_t* base() const { return base_; }
  int64_t slot_bytes() const { return options_.slot_bytes; }
  int64_t num_slots() const { return options_.num_slots; }
  int64_t pool_bytes() const { return options_.slot_bytes * options_.num_slots; }
  const PagePoolOptions& options() const { return options_; }

  // Reserves one slot per entry of `page_bytes` for `request_id`, all or nothing, reusing cached
  // pages for the longest cached run of `prefix`'s names (see the prefix cache above), and
  // dropping unpinned cached pages when free slots run short. `lease` of zero means the default;
  // longer than max_lease is capped. InvalidArgument for no pages, a page of 0 bytes or larger
  // than a slot, more pages than the pool has slots, a negative lease, or names that do not fit
  // page_bytes (more names than pages per cache layer, page_bytes not cache_layers equal runs);
  // ResourceExhausted (naming free and needed slots) when too few slots are free even so.
  absl::StatusOr<PageAllocation> Allocate(uint64_t request_id, std::span<const uint32_t> page_bytes,
                                          absl::Duration lease, PrefixPages prefix = {});

  // Checks every page and marks the allocation sealed, then publishes its named pages. `pages`
  // must name each slot of the allocation exactly once (reused cached pages are not its slots);
  // each page must pass DecodeKvPage and its header must carry the allocation's request_id and
  // epoch (its id) and the ref's cache_layer, page_index and num_tokens. InvalidArgument naming the
  // page otherwise (the allocation stays unsealed and may be sealed again); FailedPrecondition when
  // already sealed. Sealed, the lease restarts: now + the lease last granted.
  absl::Status Seal(uint64_t allocation_id, uint64_t lease_token,
                    std::span<const SealedPageRef> pages);

  // Extends the lease to now + `lease` (zero = default, capped at max_lease); returns the lease
  // granted. InvalidArgument for a negative lease.
  absl::StatusOr<absl::Duration> Renew(uint64_t allocation_id, uint64_t lease_token,
                                       absl::Duration lease);

  // Frees the allocation (allocated or sealed).
  absl::Status Release(uint64_t allocation_id, uint64_t lease_token);

  // Frees every sealed allocation of `request_id` and marks the unsealed ones cancelled (see
  // above); returns how many it touched (0 when it has none not yet cancelled).
  int CancelRequest(uint64_t request_id);

  // Frees every allocation whose lease ended at or before `now`; returns how many.
  int ExpireLeases(absl::Time now);

  PagePoolUsage Usage() const;

 private:
  struct Allocation {
    uint64_t id = 0;  // also the epoch of its pages
    uint64_t request_id = 0;
    uint64_t lease_token = 0;
    std::vector<int64_t> slots;  // its own; page i's at i (or -1 once published to the cache)
    absl::Time expiry;
    absl::Duration lease;  // as last granted (Allocate, Renew)
    bool sealed = false;
    bool cancelled = false;  // by CancelRequest while unsealed: Seal and Renew refuse
    // Prefix cache: its pages are cache_layers runs of `pages`; pages [0, reused) are the cached
    // pages `pinned` names first; publish[i] names its own page reused + i.
    int cache_layers = 0;
    int pages = 0;
    int reused = 0;
    std::vector<uint32_t> layer_bytes;  // encoded size of a page, per cache layer
    std::vector<PrefixPageHash> publish;
    std::vector<PrefixPageHash> pinned;  // cached pages it holds: reused, then published
  };
  struct CachedPage {
    std::vector<int64_t> slots;         // per cache layer
    std::vector<uint32_t> layer_bytes;  // per cache layer
    uint64_t written_by = 0;            // the request whose pages these are
    uint64_t written_epoch = 0;         // and its allocation's epoch
    int pins = 0;
    std::list<PrefixPageHash>::iterator idle;  // in idle_ when pins == 0
  };
  struct HashOf {
    size_t operator()(const PrefixPageHash& hash) const {
      size_t value;
      std::memcpy(&value, hash.data(), sizeof(value));
      return value;
    }
  };

  PagePool(PagePoolOptions options, uint8_t* base, bool owns_memory);
  absl::StatusOr<absl::Duration> GrantedLease(absl::Duration lease) const;
  // The live allocation `allocation_id` whose token is `lease_token`; frees it first if its
  // lease has run out.
  absl::StatusOr<Allocation*> FindLocked(uint64_t allocation_id, uint64_t lease_token)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Cancelled for an allocation CancelRequest marked.
  static absl::Status NotCancelled(const Allocation& allocation);
  absl::Status CheckPagesLocked(const Allocation& allocation,
                                std::span<const SealedPageRef> pages) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeLocked(uint64_t allocation_id) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void FreeSlotLocked(int64_t slot) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The leading pages of `prefix` cached with `page_bytes`' sizes, pinned; counts hits, misses
  // and mismatches.
  std::vector<PrefixPageHash> PinPrefixLocked(const PrefixPages& prefix,
                                              std::span<const uint32_t> page_bytes, int pages)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void UnpinLocked(const PrefixPageHash& hash) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Drops idle cached pages, least recently used first, until `needed` slots are free or none
  // is idle.
  void EvictLocked(int64_t needed) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Moves the allocation's named own pages into the cache, pinned by it.
  void PublishLocked(Allocation& allocation) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const PagePoolOptions options_;
  uint8_t* const base_;
  const bool owns_memory_;  // base_ is our mmap

  mutable Mutex mu_;
  std::vector<int64_t> free_slots_ ABSL_GUARDED_BY(mu_);  // a stack
  absl::flat_hash_map<uint64_t, Allocation> allocations_ ABSL_GUARDED_BY(mu_);
  absl::flat_hash_map<uint64_t, std::vector<uint64_t>> by_request_ ABSL_GUARDED_BY(mu_);
  uint64_t next_allocation_id_ ABSL_GUARDED_BY(mu_) = 1;
  absl::BitGen token_gen_ ABSL_GUARDED_BY(mu_);
  int64_t lease_expiries_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t releases_total_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t cancellations_total_ ABSL_GUARDED_BY(mu_) = 0;
  absl::flat_hash_map<PrefixPageHash, CachedPage, HashOf> cached_ ABSL_GUARDED_BY(mu_);
  std::list<PrefixPageHash> idle_ ABSL_GUARDED_BY(mu_);  // unpinned, least recently used first
  int64_t prefix_hit_pages_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefix_miss_pages_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefix_mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t prefix_evictions_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_KVSTORE_PAGE_POOL_H_
