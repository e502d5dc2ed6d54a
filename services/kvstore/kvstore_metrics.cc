#include "services/kvstore/kvstore_metrics.h"

#include <vector>

namespace pdserve {

prometheus::Family<prometheus::Counter>& AddKvStoreMetrics(MetricsRegistry& metrics,
                                                           const PagePool& pool) {
  metrics.AddGaugeCallback("pdserve_kvstore_slots", "Page slots by state", [&pool] {
    const PagePoolUsage usage = pool.Usage();
    return std::vector<CallbackSample>{{{{"state", "free"}}, double(usage.free_slots)},
                                       {{{"state", "allocated"}}, double(usage.allocated_slots)},
                                       {{{"state", "sealed"}}, double(usage.sealed_slots)}};
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
