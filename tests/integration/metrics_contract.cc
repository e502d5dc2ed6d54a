#include "tests/integration/metrics_contract.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace pdserve::integration {
namespace {

// One metric as a page exposes it.
struct ExposedMetric {
  std::string type;
  std::set<std::set<std::string>> label_sets;  // label names of each series, `le` apart
  std::set<double> bounds;                     // histograms: every finite `le`
  bool has_inf_bucket = false;
};

// One sample line: `name{label="value",...} value`. Returns false when it does not parse.
bool ParseSample(const std::string& line, std::string& name,
                 std::vector<std::pair<std::string, std::string>>& labels) {
  size_t at = line.find_first_of("{ ");
  if (at == std::string::npos) return false;
  name = line.substr(0, at);
  labels.clear();
  if (line[at] == ' ') return true;
  ++at;  // past '{'
  while (at < line.size() && line[at] != '}') {
    const size_t equals = line.find("=\"", at);
    if (equals == std::string::npos) return false;
    std::string key = line.substr(at, equals - at), value;
    for (at = equals + 2; at < line.size() && line[at] != '"'; ++at) {
      if (line[at] == '\\' && at + 1 < line.size()) ++at;
      value += line[at];
    }
    if (at >= line.size()) return false;
    labels.emplace_back(std::move(key), std::move(value));
    ++at;  // past the closing quote
    if (at < line.size() && line[at] == ',') ++at;
  }
  return at < line.size();
}

std::map<std::string, ExposedMetric> ParsePage(const std::string& page,
                                               std::vector<std::string>& errors) {
  std::map<std::string, ExposedMetric> exposed;
  std::istringstream lines(page);
  std::string line;
  while (std::getline(lines, line)) {
    if (absl::StartsWith(line, "# TYPE ")) {
      std::vector<std::string> words = absl::StrSplit(line, ' ');
      if (words.size() == 4) exposed[words[2]].type = words[3];
      continue;
    }
    if (line.empty() || line[0] == '#') continue;
    std::string name;
    std::vector<std::pair<std::string, std::string>> labels;
    if (!ParseSample(line, name, labels)) {
      errors.push_back("cannot parse the sample line '" + line + "'");
      continue;
    }
    std::string base = name;
    absl::string_view suffix;
    for (absl::string_view s : {"_bucket", "_sum", "_count"}) {
      if (!absl::EndsWith(name, s)) continue;
      const std::string candidate(absl::string_view(name).substr(0, name.size() - s.size()));
      auto it = exposed.find(candidate);
      if (it != exposed.end() && it->second.type == "histogram") {
        base = candidate;
        suffix = s;
      }
    }
    ExposedMetric& metric = exposed[base];
    std::set<std::string> names;
    for (const auto& [key, value] : labels) {
      if (suffix == "_bucket" && key == "le") {
        if (value == "+Inf") {
          metric.has_inf_bucket = true;
        } else {
          metric.bounds.insert(std::strtod(value.c_str(), nullptr));
        }
      } else {
        names.insert(key);
      }
    }
    metric.label_sets.insert(std::move(names));
  }
  return exposed;
}

std::string Braces(const std::set<std::string>& labels) {
  return absl::StrCat("{", absl::StrJoin(labels, ","), "}");
}

}  // namespace

std::map<std::string, ContractMetric> LoadMetricsContract(const std::string& path,
                                                          std::vector<std::string>& errors) {
  std::ifstream in(path);
  if (!in) errors.push_back("cannot read " + path);
  std::map<std::string, std::vector<double>> layouts;
  std::map<std::string, std::string> wanted_layouts;  // metric → layout
  std::map<std::string, ContractMetric> contract;
  std::string line;
  while (std::getline(in, line)) {
    std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
    if (words.empty() || words[0][0] == '#') continue;
    if (words[0] == "buckets" && words.size() >= 3) {
      for (size_t i = 2; i < words.size(); ++i) {
        layouts[words[1]].push_back(std::strtod(words[i].c_str(), nullptr));
      }
      continue;
    }
    if (words.size() < 3) {
      errors.push_back("malformed line '" + line + "' in " + path);
      continue;
    }
    ContractMetric& metric = contract[words[0]];
    metric.type = words[1];
    for (absl::string_view role : absl::StrSplit(words[2], ',')) metric.roles.emplace(role);
    for (size_t i = 3; i < words.size(); ++i) {
      if (absl::StartsWith(words[i], "labels=")) {
        for (absl::string_view label : absl::StrSplit(words[i].substr(7), ',')) {
          metric.labels.emplace(label);
        }
      } else if (absl::StartsWith(words[i], "buckets=")) {
        wanted_layouts[words[0]] = words[i].substr(8);
      }
    }
  }
  for (const auto& [name, layout] : wanted_layouts) {
    if (!layouts.count(layout)) errors.push_back(name + ": no bucket layout '" + layout + "'");
    contract[name].buckets = layouts[layout];
  }
  return contract;
}

std::vector<std::string> CheckMetricsPage(const std::string& page, const std::string& role,
                                          const std::map<std::string, ContractMetric>& contract) {
  std::vector<std::string> errors;
  const std::map<std::string, ExposedMetric> exposed = ParsePage(page, errors);
  for (const auto& [name, want] : contract) {
    if (!want.roles.count(role) && !want.roles.count("all")) continue;
    auto it = exposed.find(name);
    if (it == exposed.end() || it->second.label_sets.empty()) {
      errors.push_back(name + " is not exposed");
      continue;
    }
    const ExposedMetric& got = it->second;
    if (got.type != want.type) {
      errors.push_back(absl::StrCat(name, " is a ", got.type, ", the contract says ", want.type));
    }
    for (const std::set<std::string>& labels : got.label_sets) {
      if (labels != want.labels) {
        errors.push_back(absl::StrCat(name, " has a series labelled ", Braces(labels),
                                      ", the contract says ", Braces(want.labels)));
      }
    }
    if (want.type == "histogram" &&
        (!got.has_inf_bucket ||
         got.bounds != std::set<double>(want.buckets.begin(), want.buckets.end()))) {
      errors.push_back(absl::StrCat(name, " has buckets ", absl::StrJoin(got.bounds, ","),
                                    got.has_inf_bucket ? ",+Inf" : " (no +Inf)",
                                    ", the contract says ", absl::StrJoin(want.buckets, ","),
                                    ",+Inf"));
    }
  }
  for (const auto& [name, got] : exposed) {
    if (!absl::StartsWith(name, "pdserve_")) continue;
    auto it = contract.find(name);
    if (it == contract.end()) {
      errors.push_back(name + " is exposed but not in the contract");
    } else if (!it->second.roles.count(role) && !it->second.roles.count("all")) {
      errors.push_back(name + " is exposed by a " + role + ", which the contract does not list");
    }
  }
  return errors;
}

}  // namespace pdserve::integration
