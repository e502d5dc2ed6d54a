#include "services/common/kv_transfer_metrics.h"

#include <vector>

namespace pdserve {

std::vector<KvTransferMetrics> KvTransferMetrics::Register(
    MetricsRegistry& metrics, const std::vector<std::string>& directions) {
  prometheus::Family<prometheus::Counter>& bytes = metrics.AddCounter(
      "pdserve_kv_transfer_bytes_total", "KV page bytes moved to (put) or from (get) the KV store");
  prometheus::Family<prometheus::Counter>& pages = metrics.AddCounter(
      "pdserve_kv_transfer_pages_total", "KV pages moved to (put) or from (get) the KV store");
  prometheus::Family<prometheus::Counter>& seconds =
      metrics.AddCounter("pdserve_kv_transfer_seconds_total",
                         "Seconds spent in KV page transfer calls; bytes / seconds is the "
                         "achieved bandwidth");
  std::vector<KvTransferMetrics> result;
  for (const std::string& direction : directions) {
    const prometheus::Labels labels = {{"direction", direction}};
    result.push_back(KvTransferMetrics(bytes.Add(labels), pages.Add(labels), seconds.Add(labels)));
  }
  return result;
}

void KvTransferMetrics::Record(int64_t bytes, int64_t pages, absl::Duration elapsed) {
  bytes_->Increment(static_cast<double>(bytes));
  pages_->Increment(static_cast<double>(pages));
  seconds_->Increment(absl::ToDoubleSeconds(elapsed));
}

void AddTransportInfoMetric(MetricsRegistry& metrics, const KvStoreConnections& connections) {
  metrics.AddGaugeCallback("pdserve_ucx_transport_info",
                           "1 for each UCX transport this worker's KV store connections use",
                           [&connections] {
                             std::vector<CallbackSample> samples;
                             for (const std::string& name : connections.TransportsInUse()) {
                               samples.push_back({{{"transport", name}}, 1});
                             }
                             return samples;
                           });
}

}  // namespace pdserve
