#include "core/metrics/build_info.h"

#include "absl/time/clock.h"

namespace pdserve {

const char* PdserveVersion() { return PDSERVE_VERSION; }

void AddBuildInfo(MetricsRegistry& registry, const std::string& role) {
  registry.AddGauge("pdserve_build_info", "pdserve's version and this process's role; always 1")
      .Add({{"version", PdserveVersion()}, {"role", role}})
      .Set(1);
  registry.AddGauge("pdserve_process_start_time_seconds", "When this process started, Unix seconds")
      .Add({})
      .Set(absl::ToDoubleSeconds(absl::Now() - absl::UnixEpoch()));
}

}  // namespace pdserve
