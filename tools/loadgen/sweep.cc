#include "tools/loadgen/sweep.h"

#include <cmath>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"

namespace pdserve::loadgen {
namespace {

absl::Status BadRates(const std::string& text, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(
      "--sweep-rates must be a list like 1,2,4,8 or START:FACTOR:COUNT like 1:2:4, got '", text,
      "' (", why, ")"));
}

std::string Ms(double seconds) {
  return std::isfinite(seconds) ? absl::StrFormat("%.3f", seconds * 1e3) : "";
}

}  // namespace

absl::StatusOr<std::vector<double>> ParseSweepRates(const std::string& text) {
  std::vector<double> rates;
  if (text.find(':') != std::string::npos) {
    std::vector<std::string> parts = absl::StrSplit(text, ':');
    double start = 0, factor = 0;
    int count = 0;
    if (parts.size() != 3 || !absl::SimpleAtod(parts[0], &start) ||
        !absl::SimpleAtod(parts[1], &factor) || !absl::SimpleAtoi(parts[2], &count)) {
      return BadRates(text, "not three numbers");
    }
    if (!(start > 0) || !(factor > 1) || count < 1 || count > 100) {
      return BadRates(text, "need START > 0, FACTOR > 1, 1 ≤ COUNT ≤ 100");
    }
    for (int i = 0; i < count; ++i) rates.push_back(start * std::pow(factor, i));
    return rates;
  }
  for (absl::string_view part : absl::StrSplit(text, ',')) {
    double rate = 0;
    if (!absl::SimpleAtod(part, &rate)) {
      return BadRates(text, absl::StrCat("'", std::string(part), "' is not a number"));
    }
    if (!(rate > 0) || !std::isfinite(rate)) return BadRates(text, "rates must be > 0");
    rates.push_back(rate);
  }
  return rates;
}

std::optional<double> MaxRateMeetingSlo(const std::vector<SweepPoint>& points, double target) {
  std::optional<double> best;
  for (const SweepPoint& p : points) {
    if (p.report.slo_attainment >= target && (!best || p.rate > *best)) best = p.rate;
  }
  return best;
}

absl::StatusOr<SweepResult> RunSweep(const std::vector<double>& rates, double attainment_target,
                                     const std::function<absl::StatusOr<Report>(double)>& run_at) {
  SweepResult sweep;
  sweep.attainment_target = attainment_target;
  for (double rate : rates) {
    absl::StatusOr<Report> report = run_at(rate);
    if (!report.ok()) return report.status();
    sweep.points.push_back({rate, *std::move(report)});
  }
  sweep.max_rate_meeting_slo = MaxRateMeetingSlo(sweep.points, attainment_target);
  return sweep;
}

nlohmann::json SweepJson(const SweepResult& sweep, const Slo& slo) {
  nlohmann::json j;
  j["attainment_target"] = sweep.attainment_target;
  j["max_rate_meeting_slo"] =
      sweep.max_rate_meeting_slo ? nlohmann::json(*sweep.max_rate_meeting_slo) : nlohmann::json();
  nlohmann::json points = nlohmann::json::array();
  for (const SweepPoint& p : sweep.points) {
    nlohmann::json point = ReportJson(p.report, slo);
    point["rate"] = p.rate;
    points.push_back(std::move(point));
  }
  j["slo"] = points.empty() ? ReportJson(Report{}, slo)["slo"] : points.front()["slo"];
  j["points"] = std::move(points);
  return j;
}

std::string SweepCsv(const SweepResult& sweep) {
  std::string csv =
      "rate,completed,failed,abandoned,request_throughput,goodput,slo_attainment,ttft_p50_ms,"
      "ttft_p99_ms,tpot_p50_ms,tpot_p99_ms,output_tokens_per_s\n";
  for (const SweepPoint& p : sweep.points) {
    const Report& r = p.report;
    absl::StrAppend(
        &csv, p.rate, ",", r.completed, ",", r.failed, ",", r.abandoned, ",",
        absl::StrFormat("%.4f,%.4f,%.4f", r.request_throughput, r.goodput, r.slo_attainment), ",",
        Ms(r.ttft_s.p50), ",", Ms(r.ttft_s.p99), ",", Ms(r.tpot_s.p50), ",", Ms(r.tpot_s.p99), ",",
        absl::StrFormat("%.2f", r.output_tokens_per_s), "\n");
  }
  return csv;
}

}  // namespace pdserve::loadgen
