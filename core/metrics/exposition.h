// The Prometheus text exposition format, version 0.0.4 (what /metrics serves): metric and label
// name rules, label value escaping, number formatting, and the lines of one sample.
// https://prometheus.io/docs/instrumenting/exposition_formats/
#ifndef PDSERVE_CORE_METRICS_EXPOSITION_H_
#define PDSERVE_CORE_METRICS_EXPOSITION_H_

#include <string>
#include <string_view>
#include <vector>

namespace pdserve {

inline constexpr char kPrometheusContentType[] = "text/plain; version=0.0.4; charset=utf-8";

// [a-zA-Z_:][a-zA-Z0-9_:]* (colons are reserved for recording rules, so we do not use them).
bool IsValidMetricName(std::string_view name);
// [a-zA-Z_][a-zA-Z0-9_]*, not starting with "__".
bool IsValidLabelName(std::string_view name);

// Backslash, double quote and newline escaped as the format requires.
std::string EscapeLabelValue(std::string_view value);
// Shortest round-tripping decimal; "+Inf", "-Inf", "NaN" for the special values.
std::string FormatSampleValue(double value);

// "# HELP name help\n# TYPE name type\n" (help escaped: backslash and newline).
void AppendFamilyHeader(std::string& out, std::string_view name, std::string_view help,
                        std::string_view type);
// One sample line: name{l1="v1",...,extra_name="extra_value"} value. `label_values` has one
// entry per `label_names`; `extra_name` (e.g. "le") is appended when not empty.
void AppendSample(std::string& out, std::string_view name,
                  const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, double value,
                  std::string_view extra_name = {}, std::string_view extra_value = {});

}  // namespace pdserve

#endif  // PDSERVE_CORE_METRICS_EXPOSITION_H_
