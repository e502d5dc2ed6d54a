#include "tools/loadgen/arrivals.h"

#include <random>

#include "absl/strings/str_cat.h"

namespace pdserve::loadgen {

absl::StatusOr<ArrivalProcess> ParseArrivalProcess(const std::string& name) {
  if (name == "poisson") return ArrivalProcess::kPoisson;
  if (name == "fixed") return ArrivalProcess::kFixed;
  return absl::InvalidArgumentError(
      absl::StrCat("--arrival must be poisson or fixed, got '", name, "'"));
}

const char* ArrivalProcessName(ArrivalProcess process) {
  return process == ArrivalProcess::kPoisson ? "poisson" : "fixed";
}

std::vector<double> ArrivalOffsets(ArrivalProcess process, double rate, int count, uint64_t seed) {
  std::vector<double> offsets(static_cast<size_t>(std::max(count, 0)));
  // A generator of its own (not the workload's), so the schedule does not depend on the lengths.
  std::mt19937_64 rng(seed ^ 0xa5a5a5a5a5a5a5a5ULL);
  std::exponential_distribution<double> gap(rate);
  double t = 0;
  for (double& offset : offsets) {
    offset = t;
    t += process == ArrivalProcess::kPoisson ? gap(rng) : 1.0 / rate;
  }
  return offsets;
}

}  // namespace pdserve::loadgen
