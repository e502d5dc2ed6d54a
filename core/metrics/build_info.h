// The metrics every pdserve process exports about itself: pdserve_build_info{version,role} = 1
// and pdserve_process_start_time_seconds (Unix time).
#ifndef PDSERVE_CORE_METRICS_BUILD_INFO_H_
#define PDSERVE_CORE_METRICS_BUILD_INFO_H_

#include <string>

#include "core/metrics/metrics_registry.h"

namespace pdserve {

// pdserve's version (the CMake project version).
const char* PdserveVersion();

void AddBuildInfo(MetricsRegistry& registry, const std::string& role);

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_BUILD_INFO_H_
