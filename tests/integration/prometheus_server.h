// PrometheusServer: Debian's real `prometheus` binary for integration tests, scraping the given
// targets every second (one job per target, named by the caller), with its HTTP API on a free
// loopback port. Start waits for /-/ready; the destructor stops it (SIGTERM, then SIGKILL) and
// removes its data directory. Query runs an instant PromQL query through /api/v1/query.
#ifndef PDSERVE_TESTS_INTEGRATION_PROMETHEUS_SERVER_H_
#define PDSERVE_TESTS_INTEGRATION_PROMETHEUS_SERVER_H_

#include <sys/types.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve::integration {

class PrometheusServer {
 public:
  struct Target {
    std::string job;      // e.g. "router"
    std::string address;  // host:port serving /metrics
  };
  // Unavailable when the binary is missing (the message says how to install it) or does not
  // become ready within `startup`. `rule_files` are loaded as its rules.
  static absl::StatusOr<std::unique_ptr<PrometheusServer>> Start(
      const std::vector<Target>& targets, const std::vector<std::string>& rule_files = {},
      absl::Duration startup = absl::Seconds(60));
  ~PrometheusServer();

  // One sample of an instant query's vector result.
  struct Sample {
    std::map<std::string, std::string> labels;
    double value = 0;
  };
  absl::StatusOr<std::vector<Sample>> Query(const std::string& promql) const;
  // Polls `promql` until it returns exactly one sample equal to `expected` or `timeout`
  // passes (scrapes land every second); the last value or error otherwise.
  absl::Status WaitForValue(const std::string& promql, double expected,
                            absl::Duration timeout = absl::Seconds(30)) const;
  // GET of an API path (e.g. "/api/v1/label/__name__/values"), its JSON body.
  absl::StatusOr<std::string> Get(const std::string& path,
                                  const std::map<std::string, std::string>& params = {}) const;
  const std::string& address() const { return address_; }

 private:
  PrometheusServer() = default;
  pid_t pid_ = -1;
  std::string address_;
  std::string directory_;
};

}  // namespace pdserve::integration

#endif  // PDSERVE_TESTS_INTEGRATION_PROMETHEUS_SERVER_H_
