// The metrics contract, deploy/metrics.txt, and the check of a live /metrics page against it:
// every metric listed for a process's role is exposed with exactly its type, label names and
// (histograms) bucket bounds, and nothing unlisted named pdserve_* is exposed.
#ifndef PDSERVE_TESTS_INTEGRATION_METRICS_CONTRACT_H_
#define PDSERVE_TESTS_INTEGRATION_METRICS_CONTRACT_H_

#include <map>
#include <set>
#include <string>
#include <vector>

namespace pdserve::integration {

struct ContractMetric {
  std::string type;              // counter, gauge or histogram
  std::set<std::string> roles;   // router, prefill, decode, kvstore, or all
  std::set<std::string> labels;  // without histograms' `le`
  std::vector<double> buckets;   // histograms: upper bounds without +Inf
};

// Parses the file; problems (an unknown layout, a malformed line) are appended to `errors`.
std::map<std::string, ContractMetric> LoadMetricsContract(const std::string& path,
                                                          std::vector<std::string>& errors);

// What is wrong with `page` (text exposition format) of a process in `role`, one line per problem;
// empty when it keeps the contract.
std::vector<std::string> CheckMetricsPage(const std::string& page, const std::string& role,
                                          const std::map<std::string, ContractMetric>& contract);

}  // namespace pdserve::integration

#endif  // PDSERVE_TESTS_INTEGRATION_METRICS_CONTRACT_H_
