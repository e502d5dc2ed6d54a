// loadgen plots: gnuplot scripts for a rate sweep, and running gnuplot on them (a subprocess;
// gnuplot 5, pngcairo or png terminal). Two charts:
//   latency vs rate: TTFT p50/p99 (left axis) and TPOT p50/p99 (right axis), SLO limits dashed.
//   goodput vs rate: goodput and completed req/s against the offered rate (y = x dotted), SLO
//                    attainment on the right axis with the target dashed.
// Plain functions; thread-compatible.
#ifndef PDSERVE_TOOLS_LOADGEN_PLOT_H_
#define PDSERVE_TOOLS_LOADGEN_PLOT_H_

#include <string>

#include "absl/status/status.h"
#include "tools/loadgen/sweep.h"

namespace pdserve::loadgen {

// The scripts, with the data inline; they write `png_path`.
std::string LatencyPlotScript(const SweepResult& sweep, const Slo& slo,
                              const std::string& png_path);
std::string GoodputPlotScript(const SweepResult& sweep, const std::string& png_path);

// Whether a `gnuplot` executable is on PATH.
bool GnuplotAvailable();

// Writes `script` to `script_path` and runs gnuplot on it. FailedPrecondition when gnuplot is not
// installed ("install gnuplot-nox"); Internal with gnuplot's output when it fails.
absl::Status RunGnuplot(const std::string& script, const std::string& script_path);

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_PLOT_H_
