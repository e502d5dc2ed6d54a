// loadgen arrivals: when each request of an open-loop run is sent, as offsets in seconds from the
// start of the run. Poisson (exponential gaps with mean 1/rate) or fixed spacing 1/rate; seeded,
// so the same seed gives the same schedule. (Closed-loop runs have no schedule: runner.h.)
// Plain functions; thread-compatible.
#ifndef PDSERVE_TOOLS_LOADGEN_ARRIVALS_H_
#define PDSERVE_TOOLS_LOADGEN_ARRIVALS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace pdserve::loadgen {

enum class ArrivalProcess { kPoisson, kFixed };

// "poisson" or "fixed"; InvalidArgument naming --arrival otherwise.
absl::StatusOr<ArrivalProcess> ParseArrivalProcess(const std::string& name);
const char* ArrivalProcessName(ArrivalProcess process);

// `count` offsets, the first at 0, non-decreasing. Requires rate > 0.
std::vector<double> ArrivalOffsets(ArrivalProcess process, double rate, int count, uint64_t seed);

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_ARRIVALS_H_
