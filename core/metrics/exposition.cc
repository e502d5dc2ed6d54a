#include "core/metrics/exposition.h"

#include <charconv>
#include <cmath>

namespace pdserve {
namespace {

bool IsNameChar(char c, bool first, bool allow_colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return true;
  if (allow_colon && c == ':') return true;
  return !first && c >= '0' && c <= '9';
}

bool IsValidName(std::string_view name, bool allow_colon) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    if (!IsNameChar(name[i], i == 0, allow_colon)) return false;
  }
  return true;
}

}  // namespace

bool IsValidMetricName(std::string_view name) { return IsValidName(name, /*allow_colon=*/true); }

bool IsValidLabelName(std::string_view name) {
  return IsValidName(name, /*allow_colon=*/false) && name.substr(0, 2) != "__";
}

std::string EscapeLabelValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  char buffer[64];
  const auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

void AppendFamilyHeader(std::string& out, std::string_view name, std::string_view help,
                        std::string_view type) {
  out.append("# HELP ").append(name).append(" ");
  for (char c : help) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  out.append("\n# TYPE ").append(name).append(" ").append(type).append("\n");
}

void AppendSample(std::string& out, std::string_view name,
                  const std::vector<std::string>& label_names,
                  const std::vector<std::string>& label_values, double value,
                  std::string_view extra_name, std::string_view extra_value) {
  out.append(name);
  const bool any = !label_names.empty() || !extra_name.empty();
  if (any) out += '{';
  bool first = true;
  auto label = [&](std::string_view key, std::string_view val) {
    if (!first) out += ',';
    first = false;
    out.append(key).append("=\"").append(EscapeLabelValue(val)).append("\"");
  };
  for (size_t i = 0; i < label_names.size() && i < label_values.size(); ++i) {
    label(label_names[i], label_values[i]);
  }
  if (!extra_name.empty()) label(extra_name, extra_value);
  if (any) out += '}';
  out.append(" ").append(FormatSampleValue(value)).append("\n");
}

}  // namespace pdserve
