// loadgen report: statistics over a run's request records (docs/loadgen.md "Metrics" has the
// definitions), and their outputs: a human table, JSON, and a per-request CSV.
//
//   TTFT   send → first non-empty streamed token, per request.
//   TPOT   (e2e − TTFT) / (output tokens − 1), per request (requests with ≥ 2 tokens).
//   ITL    gaps between consecutive streamed tokens, pooled across requests.
//   e2e    send → last token.
//   queue  the router's queue time (its admission queue and the prefill worker's), as its final
//          message reports it (gRPC only).
//   cached prompt share   prompt tokens the server took from its prefix cache ÷ prompt tokens,
//                         over completed requests whose server reports it.
//   goodput          completed requests/s meeting ALL given SLOs (TTFT, TPOT, e2e).
//   SLO attainment   fraction of measured requests meeting both the TTFT and the TPOT SLO (a
//                    limit not given is met); failed and abandoned requests count as missing.
// Warm-up records are left out of everything. Plain functions; thread-compatible.
#ifndef PDSERVE_TOOLS_LOADGEN_REPORT_H_
#define PDSERVE_TOOLS_LOADGEN_REPORT_H_

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "nlohmann/json.hpp"
#include "tools/loadgen/request_record.h"

namespace pdserve::loadgen {

// Percentile p in [0, 100] by linear interpolation between closest ranks; NaN when empty.
double Percentile(std::vector<double> values, double p);

struct Summary {
  size_t count = 0;
  double mean = 0, p50 = 0, p90 = 0, p99 = 0, max = 0;  // NaN when count == 0
};
Summary Summarize(const std::vector<double>& values);

// Service-level objectives in seconds; 0 = not given.
struct Slo {
  double ttft_s = 0;
  double tpot_s = 0;
  double e2e_s = 0;
  bool any() const { return ttft_s > 0 || tpot_s > 0 || e2e_s > 0; }
};

struct Report {
  int measured = 0;       // non-warm-up requests
  int completed = 0;      // ok()
  int failed = 0;         // sent, finished with an error code (SHORT_OUTPUT included)
  int abandoned = 0;      // cut off or never sent because the run stopped
  double duration_s = 0;  // first measured send → last measured completion
  Summary ttft_s, tpot_s, itl_s, e2e_s;
  Summary queue_s;                // count 0 when the protocol reports no queue time
  double request_throughput = 0;  // completed / duration
  double input_tokens_per_s = 0;  // prompt tokens of completed requests / duration
  double output_tokens_per_s = 0;
  double goodput = 0;         // completed requests meeting all SLOs / duration
  double slo_attainment = 0;  // requests meeting TTFT and TPOT SLOs / measured
  int slo_met = 0;
  // Prompt tokens of completed requests that the server reported taking from its prefix cache,
  // and all prompt tokens of those requests; both 0 when no request reported it.
  int64_t cached_prompt_tokens = 0, prompt_tokens_reporting_cache = 0;
  int retried_requests = 0;  // sent requests refused for overload at least once, then retried
  int retries = 0;           // their retries in all
  std::map<std::string, int> errors;                // code → count (failed requests)
  std::map<std::string, std::string> first_errors;  // code → first message
};

Report ComputeReport(const std::vector<RequestRecord>& records, const Slo& slo);

// Whether one completed request meets the TTFT and TPOT limits (and e2e when `with_e2e`).
bool MeetsSlo(const RequestRecord& record, const Slo& slo, bool with_e2e);

nlohmann::json SummaryJson(const Summary& summary);
// The report's keys (docs/loadgen.md "JSON report"); the caller adds "config".
nlohmann::json ReportJson(const Report& report, const Slo& slo);

// The human table.
void PrintReport(std::FILE* out, const Report& report, const Slo& slo);

// One row per request (warm-up included, flagged): id, warmup, send_s, prompt_tokens,
// output_tokens, ttft_s, tpot_s, e2e_s, code, cached_tokens. Unavailable cells are empty.
std::string RequestsCsv(const std::vector<RequestRecord>& records);

// Writes `text` to `path`; Unavailable naming the path on failure.
absl::Status WriteFile(const std::string& path, const std::string& text);

}  // namespace pdserve::loadgen

#endif  // PDSERVE_TOOLS_LOADGEN_REPORT_H_
