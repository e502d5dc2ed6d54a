#include "services/kvstore/kvstore_metrics.h"

#include <vector>

namespace pdserve {

prometheus::Family<prometheus::Counter>& AddKvStoreMetrics(MetricsRegistry& metrics,
                                                           const PagePool& pool) {
  metrics.AddGaugeCallback(
      "pdserve_kvstore_slots",
      "Page slots by state: free, allocated (being written), sealed (being read, cached pages in "
      "use included), cached (prefix-cache pages nobody uses: taken back when slots run short)",
      [&pool] {
        const PagePoolUsage usage = pool.Usage();
        const int64_t pinned = usage.cached_slots - usage.idle_cached_slots;
        return std::vector<CallbackSample>{
            {{{"state", "free"}}, double(usage.free_slots)},
            {{{"state", "allocated"}}, double(usage.allocated_slots)},
            {{{"state", "sealed"}}, double(usage.sealed_slots + pinned)},
            {{{"state", "cached"}}, double(usage.idle_cached_slots)}};
      });
  metrics.AddGaugeCallback(
      "pdserve_kvstore_prefix_cache_pages",
      "Prompt pages the prefix cache holds (each one slot per cache layer)", [&pool] {
        return std::vector<CallbackSample>{{{}, double(pool.Usage().cached_pages)}};
      });
  metrics.AddGaugeCallback("pdserve_kvstore_prefix_cache_bytes",
                           "Bytes of page slots the prefix cache holds, in use or not", [&pool] {
                             return std::vector<CallbackSample>{
                                 {{}, double(pool.Usage().cached_slots * pool.slot_bytes())}};
                           });
  metrics.AddCounterCallback(
      "pdserve_kvstore_prefix_lookups_pages_total",
      "Named prompt pages looked up at allocation: hit (reused) or miss (computed anew)", [&pool] {
        const PagePoolUsage usage = pool.Usage();
        return std::vector<CallbackSample>{{{{"result", "hit"}}, double(usage.prefix_hit_pages)},
                                           {{{"result", "miss"}}, double(usage.prefix_miss_pages)}};
      });
  metrics.AddCounterCallback(
      "pdserve_kvstore_prefix_evictions_total",
      "Prefix-cache pages dropped, least recently used first, to make room", [&pool] {
        return std::vector<CallbackSample>{{{}, double(pool.Usage().prefix_evictions)}};
      });
  metrics.AddCounterCallback(
      "pdserve_kvstore_prefix_mismatches_total",
      "Cached pages found under a requested name with other page sizes: refused, not reused",
      [&pool] {
        return std::vector<CallbackSample>{{{}, double(pool.Usage().prefix_mismatches)}};
      });
  metrics.AddGaugeCallback("pdserve_kvstore_slot_bytes", "Bytes per page slot", [&pool] {
    return std::vector<CallbackSample>{{{}, double(pool.slot_bytes())}};
  });
  metrics.AddGaugeCallback(
      "pdserve_kvstore_leases_active", "Allocations holding a lease (allocated or sealed)",
      [&pool] {
        return std::vector<CallbackSample>{{{}, double(pool.Usage().allocations)}};
      });
  metrics.AddCounterCallback(
      "pdserve_kvstore_lease_expiries_total",
      "Allocations freed because their lease ran out (a reader died or stalled)", [&pool] {
        return std::vector<CallbackSample>{{{}, double(pool.Usage().lease_expiries_total)}};
      });
  metrics.AddCounterCallback("pdserve_kvstore_frees_total", "Allocations freed, by how", [&pool] {
    const PagePoolUsage usage = pool.Usage();
    return std::vector<CallbackSample>{
        {{{"reason", "released"}}, double(usage.releases_total)},
        {{{"reason", "cancelled"}}, double(usage.cancellations_total)},
        {{{"reason", "expired"}}, double(usage.lease_expiries_total)}};
  });
  return metrics.AddCounter("pdserve_kvstore_allocations_total",
                            "Allocate calls by gRPC status code (RESOURCE_EXHAUSTED: pool full)");
}

}  // namespace pdserve
