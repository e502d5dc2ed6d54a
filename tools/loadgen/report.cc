#include "tools/loadgen/report.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace pdserve::loadgen {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

nlohmann::json Number(double v) { return std::isfinite(v) ? nlohmann::json(v) : nlohmann::json(); }

std::string Cell(double v) { return std::isfinite(v) ? absl::StrFormat("%.6f", v) : ""; }

}  // namespace

double Percentile(std::vector<double> values, double p) {
  if (values.empty()) return kNaN;
  std::sort(values.begin(), values.end());
  const double rank = p / 100.0 * static_cast<double>(values.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(rank));
  const size_t hi = std::min(lo + 1, values.size() - 1);
  return values[lo] + (rank - static_cast<double>(lo)) * (values[hi] - values[lo]);
}

Summary Summarize(const std::vector<double>& values) {
  Summary s;
  s.count = values.size();
  if (values.empty()) {
    s.mean = s.p50 = s.p90 = s.p99 = s.max = kNaN;
    return s;
  }
  double sum = 0;
  for (double v : values) sum += v;
  s.mean = sum / static_cast<double>(values.size());
  s.p50 = Percentile(values, 50);
  s.p90 = Percentile(values, 90);
  s.p99 = Percentile(values, 99);
  s.max = *std::max_element(values.begin(), values.end());
  return s;
}

bool MeetsSlo(const RequestRecord& r, const Slo& slo, bool with_e2e) {
  if (!r.ok() || r.token_s.empty()) return false;
  if (slo.ttft_s > 0 && r.ttft() > slo.ttft_s) return false;
  if (slo.tpot_s > 0 && r.output_tokens >= 2 && r.tpot() > slo.tpot_s) return false;
  if (with_e2e && slo.e2e_s > 0 && r.e2e() > slo.e2e_s) return false;
  return true;
}

Report ComputeReport(const std::vector<RequestRecord>& records, const Slo& slo) {
  Report report;
  std::vector<double> ttft, tpot, itl, e2e, queue;
  double first_send = std::numeric_limits<double>::infinity();
  double last_done = -std::numeric_limits<double>::infinity();
  int64_t input_tokens = 0, output_tokens = 0;
  int good = 0;
  for (const RequestRecord& r : records) {
    if (r.warmup) continue;
    ++report.measured;
    if (r.sent) first_send = std::min(first_send, r.send_s);
    report.retried_requests += r.retries > 0 ? 1 : 0;
    report.retries += r.retries;
    if (!r.sent || r.abandoned) {
      ++report.abandoned;
      continue;
    }
    if (!r.ok() || r.token_s.empty()) {
      const std::string code = r.ok() ? std::string("NO_TOKENS") : r.code;
      if (++report.errors[code] == 1) report.first_errors[code] = r.error;
      ++report.failed;
      continue;
    }
    ++report.completed;
    last_done = std::max(last_done, r.done_s);
    input_tokens += r.prompt_tokens;
    output_tokens += r.output_tokens;
    ttft.push_back(r.ttft());
    e2e.push_back(r.e2e());
    if (r.queue_s >= 0) queue.push_back(r.queue_s);
    if (r.cached_tokens >= 0) {
      report.cached_prompt_tokens += r.cached_tokens;
      report.prompt_tokens_reporting_cache += r.prompt_tokens;
    }
    if (r.output_tokens >= 2) tpot.push_back(r.tpot());
    for (size_t k = 1; k < r.token_s.size(); ++k) itl.push_back(r.token_s[k] - r.token_s[k - 1]);
    if (MeetsSlo(r, slo, /*with_e2e=*/true)) ++good;
    if (MeetsSlo(r, slo, /*with_e2e=*/false)) ++report.slo_met;
  }
  report.ttft_s = Summarize(ttft);
  report.tpot_s = Summarize(tpot);
  report.itl_s = Summarize(itl);
  report.e2e_s = Summarize(e2e);
  report.queue_s = Summarize(queue);
  report.duration_s = report.completed > 0 ? last_done - first_send : 0;
  if (report.duration_s > 0) {
    report.request_throughput = report.completed / report.duration_s;
    report.input_tokens_per_s = static_cast<double>(input_tokens) / report.duration_s;
    report.output_tokens_per_s = static_cast<double>(output_tokens) / report.duration_s;
    report.goodput = good / report.duration_s;
  }
  report.slo_attainment =
      report.measured > 0 ? static_cast<double>(report.slo_met) / report.measured : 0;
  return report;
}

nlohmann::json SummaryJson(const Summary& s) {
  return {{"count", s.count},     {"mean", Number(s.mean)}, {"p50", Number(s.p50)},
          {"p90", Number(s.p90)}, {"p99", Number(s.p99)},   {"max", Number(s.max)}};
}

nlohmann::json ReportJson(const Report& r, const Slo& slo) {
  nlohmann::json j;
  j["requests"] = {{"measured", r.measured},
                   {"completed", r.completed},
                   {"failed", r.failed},
                   {"abandoned", r.abandoned}};
  j["duration_s"] = r.duration_s;
  j["ttft_s"] = SummaryJson(r.ttft_s);
  j["tpot_s"] = SummaryJson(r.tpot_s);
  j["itl_s"] = SummaryJson(r.itl_s);
  j["queue_s"] = SummaryJson(r.queue_s);
  j["e2e_s"] = SummaryJson(r.e2e_s);
  j["request_throughput"] = r.request_throughput;
  j["input_tokens_per_s"] = r.input_tokens_per_s;
  j["output_tokens_per_s"] = r.output_tokens_per_s;
  j["goodput"] = r.goodput;
  auto limit = [](double s) { return s > 0 ? nlohmann::json(s * 1e3) : nlohmann::json(); };
  j["slo"] = {
      {"ttft_ms", limit(slo.ttft_s)}, {"tpot_ms", limit(slo.tpot_s)}, {"e2e_ms", limit(slo.e2e_s)}};
  j["slo_met"] = r.slo_met;
  j["slo_attainment"] = r.slo_attainment;
  j["cached_prompt_tokens"] =
      r.prompt_tokens_reporting_cache > 0
          ? nlohmann::json{{"tokens", r.cached_prompt_tokens},
                           {"of_prompt_tokens", r.prompt_tokens_reporting_cache},
                           {"share", static_cast<double>(r.cached_prompt_tokens) /
                                         r.prompt_tokens_reporting_cache}}
          : nlohmann::json();
  j["retried_requests"] = r.retried_requests;
  j["retries"] = r.retries;
  j["errors"] = r.errors;
  j["first_error_messages"] = r.first_errors;
  return j;
}

void PrintReport(std::FILE* out, const Report& r, const Slo& slo) {
  std::fprintf(out, "  %-8s %10s %10s %10s %10s %10s %8s\n", "ms", "mean", "p50", "p90", "p99",
               "max", "n");
  auto row = [out](const char* name, const Summary& s) {
    std::fprintf(out, "  %-8s %10.2f %10.2f %10.2f %10.2f %10.2f %8zu\n", name, s.mean * 1e3,
                 s.p50 * 1e3, s.p90 * 1e3, s.p99 * 1e3, s.max * 1e3, s.count);
  };
  row("TTFT", r.ttft_s);
  row("TPOT", r.tpot_s);
  row("ITL", r.itl_s);
  row("e2e", r.e2e_s);
  if (r.queue_s.count > 0) row("queue", r.queue_s);
  std::fprintf(out, "  requests: %d measured, %d completed, %d failed, %d abandoned in %.2f s\n",
               r.measured, r.completed, r.failed, r.abandoned, r.duration_s);
  std::fprintf(out, "  throughput: %.2f req/s, %.1f input tok/s, %.1f output tok/s\n",
               r.request_throughput, r.input_tokens_per_s, r.output_tokens_per_s);
  std::string limits;
  if (slo.ttft_s > 0) absl::StrAppend(&limits, " TTFT≤", slo.ttft_s * 1e3, "ms");
  if (slo.tpot_s > 0) absl::StrAppend(&limits, " TPOT≤", slo.tpot_s * 1e3, "ms");
  if (slo.e2e_s > 0) absl::StrAppend(&limits, " e2e≤", slo.e2e_s * 1e3, "ms");
  if (limits.empty()) limits = " none given";
  std::fprintf(out, "  SLO%s: goodput %.2f req/s, attainment %.1f%% (%d/%d)\n", limits.c_str(),
               r.goodput, r.slo_attainment * 100, r.slo_met, r.measured);
  if (r.prompt_tokens_reporting_cache > 0) {
    std::fprintf(out, "  prompt tokens from the server's prefix cache: %lld of %lld (%.1f%%)\n",
                 static_cast<long long>(r.cached_prompt_tokens),
                 static_cast<long long>(r.prompt_tokens_reporting_cache),
                 100.0 * r.cached_prompt_tokens / r.prompt_tokens_reporting_cache);
  }
  std::fprintf(out,
               "  retried after overload (RESOURCE_EXHAUSTED / 429): %d requests, %d retries\n",
               r.retried_requests, r.retries);
  std::fprintf(out, "  errors:");
  if (r.errors.empty()) std::fprintf(out, " none");
  for (const auto& [code, count] : r.errors) std::fprintf(out, " %s=%d", code.c_str(), count);
  std::fprintf(out, "\n");
}

std::string RequestsCsv(const std::vector<RequestRecord>& records) {
  std::string csv =
      "id,warmup,send_s,prompt_tokens,output_tokens,ttft_s,tpot_s,e2e_s,code,cached_tokens\n";
  for (const RequestRecord& r : records) {
    const bool timed = r.sent && !r.token_s.empty();
    absl::StrAppend(&csv, r.id, ",", r.warmup ? 1 : 0, ",", r.sent ? Cell(r.send_s) : "", ",",
                    r.prompt_tokens, ",", r.output_tokens, ",", timed ? Cell(r.ttft()) : "", ",",
                    timed && r.output_tokens >= 2 ? Cell(r.tpot()) : "", ",",
                    r.sent ? Cell(r.e2e()) : "", ",", !r.sent || r.abandoned ? "ABANDONED" : r.code,
                    ",", r.cached_tokens >= 0 ? absl::StrCat(r.cached_tokens) : "", "\n");
  }
  return csv;
}

absl::Status WriteFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  out.close();
  if (!out) return absl::UnavailableError(absl::StrCat("could not write '", path, "'"));
  return absl::OkStatus();
}

}  // namespace pdserve::loadgen
