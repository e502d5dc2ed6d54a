// loadgen rate sweep: one open-loop run per rate, and the highest rate that meets the SLO in
// DistServe's sense (SLO attainment — both TTFT and TPOT met — at least the target, default 0.9).
// Writes the sweep as JSON and CSV; plot.h draws it. Plain functions; thread-compatible.
#ifndef PDSERVE_TOOLS_LOADGEN_SWEEP_H_
#define PDSERVE_TOOLS_LOADGEN_SWEEP_H_

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "tools/loadgen/report.h"

namespace pdserve::loadgen {

struct SweepPoint {
  double rate = 0;  // offered, requests/s
  Report report;
};

struct SweepResult {
  std::vector<SweepPoint> points;  // in the order run
  double attainment_target = 0.9;
  // The highest rate whose attainment ≥ target; none when no rate met it.
  std::optional<double> max_rate_meeting_slo;
};

// "1,2,4,8" → rates, or "START:FACTOR:COUNT" (e.g. "1:2:5" = 1,2,4,8,16). InvalidArgument naming
// --sweep-rates for anything else, or for a rate ≤ 0.
absl::StatusOr<std::vector<double>> ParseSweepRates(const std::string& text);

// The highest rate among `points` with slo_attainment ≥ target.
std::optional<double> MaxRateMeetingSlo(const std::vector<SweepPoint>& points, double target);

// Runs `run_at(rate)` for each rate in order and collects the reports; stops at the first error.
absl::StatusOr<SweepResult> RunSweep(const std::vector<double>& rates, double attainment_target,
                                     const std::function<absl::StatusOr<Report>(double)>& run_at);

// {"attainment_target", "max_rate_meeting_slo" (null if none), "slo": {...},
//  "points": [{"rate", ...ReportJson}]}
nlohmann::json SweepJson(const SweepResult& sweep, const Slo& slo);

// One row per rate: rate, completed, failed, abandoned, request_throughput, goodput,
// slo_attainment, ttft/tpot p50 and p99 in ms, output_tokens_per_s.
std::string SweepCsv(const SweepResult& sweep);

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_SWEEP_H_
