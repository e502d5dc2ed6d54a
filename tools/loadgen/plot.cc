#include "tools/loadgen/plot.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "tools/loadgen/report.h"

namespace pdserve::loadgen {
namespace {

// A gnuplot string literal (single quotes; '' escapes a quote).
std::string Quote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "''"}}), "'");
}

// Shell single-quoted.
std::string ShellQuote(const std::string& s) {
  return absl::StrCat("'", absl::StrReplaceAll(s, {{"'", "'\\''"}}), "'");
}

std::string Value(double v, double scale = 1) {
  return std::isfinite(v) ? absl::StrFormat("%.6g", v * scale) : "?";
}

std::string Header(const SweepResult& sweep, const std::string& png_path,
                   const std::string& title) {
  double lo = INFINITY, hi = 0;
  for (const SweepPoint& p : sweep.points) {
    lo = std::min(lo, p.rate);
    hi = std::max(hi, p.rate);
  }
  std::string s = absl::StrCat(
      "if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) { set terminal pngcairo size 900,560 "
      "enhanced font ',10' } else { set terminal png size 900,560 }\n",
      "set output ", Quote(png_path), "\n", "set title ", Quote(title), " noenhanced\n",
      "set datafile missing '?'\n", "set key below box\n", "set grid\n",
      "set xlabel 'offered rate (requests/s)'\n");
  if (lo > 0 && hi / lo >= 8) absl::StrAppend(&s, "set logscale x 2\n");
  return s;
}

}  // namespace

std::string LatencyPlotScript(const SweepResult& sweep, const Slo& slo,
                              const std::string& png_path) {
  std::string s = Header(sweep, png_path, "pdserve loadgen: latency vs request rate");
  absl::StrAppend(&s, "$data << EOD\n# rate ttft_p50 ttft_p99 tpot_p50 tpot_p99 (ms)\n");
  for (const SweepPoint& p : sweep.points) {
    const Report& r = p.report;
    absl::StrAppend(&s, Value(p.rate), " ", Value(r.ttft_s.p50, 1e3), " ", Value(r.ttft_s.p99, 1e3),
                    " ", Value(r.tpot_s.p50, 1e3), " ", Value(r.tpot_s.p99, 1e3), "\n");
  }
  absl::StrAppend(&s, "EOD\n", "set ylabel 'TTFT (ms)'\n", "set y2label 'TPOT (ms)'\n",
                  "set ytics nomirror\n", "set y2tics\n", "set yrange [0:*]\n",
                  "set y2range [0:*]\n");
  std::string plot = absl::StrCat(
      "plot $data using 1:2 with linespoints lw 2 pt 7 lc rgb '#1f77b4' title 'TTFT p50', \\\n",
      "     $data using 1:3 with linespoints lw 2 pt 5 lc rgb '#aec7e8' title 'TTFT p99', \\\n",
      "     $data using 1:4 axes x1y2 with linespoints lw 2 pt 7 lc rgb '#d62728' "
      "title 'TPOT p50 (right)', \\\n",
      "     $data using 1:5 axes x1y2 with linespoints lw 2 pt 5 lc rgb '#ff9896' "
      "title 'TPOT p99 (right)'");
  if (slo.ttft_s > 0) {
    absl::StrAppend(&plot, ", \\\n     ", Value(slo.ttft_s, 1e3),
                    " with lines dt 2 lc rgb '#1f77b4' title 'TTFT SLO'");
  }
  if (slo.tpot_s > 0) {
    absl::StrAppend(&plot, ", \\\n     ", Value(slo.tpot_s, 1e3),
                    " axes x1y2 with lines dt 2 lc rgb '#d62728' title 'TPOT SLO (right)'");
  }
  absl::StrAppend(&s, plot, "\n");
  return s;
}

std::string GoodputPlotScript(const SweepResult& sweep, const std::string& png_path) {
  std::string title = "pdserve loadgen: goodput vs request rate";
  if (sweep.max_rate_meeting_slo) {
    absl::StrAppend(&title, " (max rate meeting SLO: ", Value(*sweep.max_rate_meeting_slo),
                    " req/s)");
  } else {
    absl::StrAppend(&title, " (no rate met the SLO)");
  }
  std::string s = Header(sweep, png_path, title);
  absl::StrAppend(&s, "$data << EOD\n# rate goodput throughput attainment\n");
  for (const SweepPoint& p : sweep.points) {
    absl::StrAppend(&s, Value(p.rate), " ", Value(p.report.goodput), " ",
                    Value(p.report.request_throughput), " ", Value(p.report.slo_attainment), "\n");
  }
  absl::StrAppend(&s, "EOD\n", "set ylabel 'requests/s'\n", "set y2label 'SLO attainment'\n",
                  "set ytics nomirror\n", "set y2tics\n", "set yrange [0:*]\n",
                  "set y2range [0:1.05]\n",
                  "plot $data using 1:2 with linespoints lw 2 pt 7 lc rgb '#2ca02c' "
                  "title 'goodput', \\\n",
                  "     $data using 1:3 with linespoints lw 2 pt 5 lc rgb '#7f7f7f' "
                  "title 'completed req/s', \\\n",
                  "     $data using 1:1 with lines dt 3 lc rgb '#000000' title 'offered', \\\n",
                  "     $data using 1:4 axes x1y2 with linespoints lw 2 pt 9 lc rgb '#9467bd' "
                  "title 'SLO attainment (right)', \\\n",
                  "     ", Value(sweep.attainment_target),
                  " axes x1y2 with lines dt 2 lc rgb '#9467bd' title 'attainment target'\n");
  return s;
}

bool GnuplotAvailable() {
  const char* path = std::getenv("PATH");
  if (path == nullptr) return false;
  for (absl::string_view dir : absl::StrSplit(path, ':')) {
    if (dir.empty()) continue;
    const std::string candidate = absl::StrCat(std::string(dir), "/gnuplot");
    if (access(candidate.c_str(), X_OK) == 0) return true;
  }
  return false;
}

absl::Status RunGnuplot(const std::string& script, const std::string& script_path) {
  if (!GnuplotAvailable()) {
    return absl::FailedPreconditionError(
        "gnuplot is not installed (or not on PATH); install it (Debian: apt-get install "
        "gnuplot-nox) to draw the sweep plots, or leave out --sweep-rates");
  }
  if (absl::Status s = WriteFile(script_path, script); !s.ok()) return s;
  const std::string command = absl::StrCat("gnuplot ", ShellQuote(script_path), " 2>&1");
  std::FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) return absl::InternalError(absl::StrCat("could not run ", command));
  std::string output;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), pipe)) output.append(buffer, n);
  const int status = pclose(pipe);
  if (status != 0) {
    return absl::InternalError(absl::StrCat("gnuplot failed on ", script_path, " (status ",
                                            WIFEXITED(status) ? WEXITSTATUS(status) : status,
                                            "): ", output));
  }
  return absl::OkStatus();
}

}  // namespace pdserve::loadgen
