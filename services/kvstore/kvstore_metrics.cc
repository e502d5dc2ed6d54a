#include "services/kvstore/kvstore_metrics.h"

#include <vector>

namespace pdserve {

MetricFamily<Counter>& AddKvStoreMetrics(MetricsRegistry& metrics, const PagePool& pool) {
  metrics.AddGaugeCallback("pdserve_kvstore_slots", "Page slots by state", {"state"}, [&pool] {
    const PagePoolUsage usage = pool.Usage();
    return std::vector<CallbackSample>{{{"free"}, double(usage.free_slots)},
                                       {{"allocated"}, double(usage.allocated_slots)},
                                       {{"sealed"}, double(usage.sealed_slots)}};
  });
  metrics.AddGaugeCallback("pdserve_kvstore_slot_bytes", "Bytes per page slot", {}, [&pool] {
    return std::vector<CallbackSample>{{{}, double(pool.slot_bytes())}};
  });
  metrics.AddGaugeCallback(
      "pdserve_kvstore_leases_active", "Allocations holding a lease (allocated or sealed)", {},
      [&pool] {
        return std::vector<CallbackSample>{{{}, double(pool.Usage().allocations)}};
      });
  metrics.AddCounterCallback(
      "pdserve_kvstore_lease_expiries_total",
      "Allocations freed because their lease ran out (a reader died or stalled)", {}, [&pool] {
        return std::vector<CallbackSample>{{{}, double(pool.Usage().lease_expiries_total)}};
      });
  metrics.AddCounterCallback(
      "pdserve_kvstore_frees_total", "Allocations freed, by how", {"reason"}, [&pool] {
        const PagePoolUsage usage = pool.Usage();
        return std::vector<CallbackSample>{{{"released"}, double(usage.releases_total)},
                                           {{"cancelled"}, double(usage.cancellations_total)},
                                           {{"expired"}, double(usage.lease_expiries_total)}};
      });
  return metrics.AddCounter("pdserve_kvstore_allocations_total",
                            "Allocate calls by gRPC status code (RESOURCE_EXHAUSTED: pool full)",
                            {"code"});
}

}  // namespace pdserve
