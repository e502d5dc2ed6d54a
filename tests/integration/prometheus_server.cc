#include "tests/integration/prometheus_server.h"

#include <httplib.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"

namespace pdserve::integration {
namespace {

constexpr char kBinary[] = "/usr/bin/prometheus";

// A free loopback port: bound, read back and closed. Prometheus cannot report a port it picked
// itself, so this small window (another process could take the port) is accepted.
int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof(address);
  int port = 0;
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) == 0) {
    port = ntohs(address.sin_port);
  }
  close(fd);
  return port;
}

std::string WriteConfig(const std::string& directory,
                        const std::vector<PrometheusServer::Target>& targets,
                        const std::vector<std::string>& rule_files) {
  std::string config =
      "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n  evaluation_interval: 1s\n";
  if (!rule_files.empty()) {
    config += "rule_files:\n";
    for (const std::string& file : rule_files) absl::StrAppend(&config, "  - ", file, "\n");
  }
  config += "scrape_configs:\n";
  for (const PrometheusServer::Target& target : targets) {
    absl::StrAppend(&config, "  - job_name: ", target.job, "\n    static_configs:\n",
                    "      - targets: ['", target.address, "']\n");
  }
  const std::string path = directory + "/prometheus.yml";
  std::ofstream(path) << config;
  return path;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrometheusServer>> PrometheusServer::Start(
    const std::vector<Target>& targets, const std::vector<std::string>& rule_files,
    absl::Duration startup) {
  if (access(kBinary, X_OK) != 0) {
    return absl::UnavailableError(
        absl::StrCat(kBinary, " is missing: install Debian's prometheus (scripts/setup.sh)"));
  }
  auto server = std::unique_ptr<PrometheusServer>(new PrometheusServer());
  char pattern[] = "/tmp/pdserve-prometheus-XXXXXX";
  if (mkdtemp(pattern) == nullptr) return absl::InternalError("mkdtemp failed");
  server->directory_ = pattern;
  const std::string config = WriteConfig(server->directory_, targets, rule_files);
  const int port = FreePort();
  server->address_ = absl::StrCat("127.0.0.1:", port);
  const std::string log = server->directory_ + "/prometheus.log";
  std::vector<std::string> args = {kBinary, "--config.file=" + config,
                                   "--storage.tsdb.path=" + server->directory_ + "/data",
                                   "--web.listen-address=" + server->address_, "--log.level=warn"};
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    FILE* out = std::freopen(log.c_str(), "w", stderr);
    (void)out;
    std::vector<char*> argv;
    for (std::string& arg : args) argv.push_back(arg.data());
    argv.push_back(nullptr);
    execv(kBinary, argv.data());
    _exit(127);
  }
  server->pid_ = pid;
  httplib::Client client("127.0.0.1", port);
  client.set_connection_timeout(1);
  const absl::Time deadline = absl::Now() + startup;
  while (absl::Now() < deadline) {
    httplib::Result ready = client.Get("/-/ready");
    if (ready && ready->status == 200) return server;
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      server->pid_ = -1;
      std::ifstream in(log);
      std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      return absl::UnavailableError(absl::StrCat("prometheus exited: ", text));
    }
    absl::SleepFor(absl::Milliseconds(100));  // polling for readiness, not hiding a race
  }
  return absl::UnavailableError(
      absl::StrCat("prometheus was not ready within ", absl::FormatDuration(startup)));
}

PrometheusServer::~PrometheusServer() {
  if (pid_ > 0) {
    kill(pid_, SIGTERM);
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (absl::Now() > deadline) {
        kill(pid_, SIGKILL);
        waitpid(pid_, &status, 0);
        break;
      }
      absl::SleepFor(absl::Milliseconds(20));
    }
  }
  std::error_code ignored;
  if (!directory_.empty()) std::filesystem::remove_all(directory_, ignored);
}

absl::StatusOr<std::string> PrometheusServer::Get(
    const std::string& path, const std::map<std::string, std::string>& params) const {
  httplib::Client client("http://" + address_);
  httplib::Params query(params.begin(), params.end());
  httplib::Result result = client.Get(path, query, httplib::Headers{});
  if (!result) return absl::UnavailableError(httplib::to_string(result.error()));
  if (result->status != 200) {
    return absl::InternalError(
        absl::StrCat("GET ", path, ": HTTP ", result->status, ": ", result->body));
  }
  return result->body;
}

absl::StatusOr<std::vector<PrometheusServer::Sample>> PrometheusServer::Query(
    const std::string& promql) const {
  absl::StatusOr<std::string> body = Get("/api/v1/query", {{"query", promql}});
  if (!body.ok()) return body.status();
  const nlohmann::json reply = nlohmann::json::parse(*body, nullptr, false);
  if (reply.is_discarded() || reply.value("status", "") != "success" ||
      reply["data"].value("resultType", "") != "vector") {
    return absl::InternalError(absl::StrCat("query '", promql, "': ", *body));
  }
  std::vector<Sample> samples;
  for (const nlohmann::json& item : reply["data"]["result"]) {
    Sample sample;
    for (const auto& [key, value] : item["metric"].items()) sample.labels[key] = value;
    sample.value = std::strtod(item["value"][1].get<std::string>().c_str(), nullptr);
    samples.push_back(std::move(sample));
  }
  return samples;
}

absl::Status PrometheusServer::WaitForValue(const std::string& promql, double expected,
                                            absl::Duration timeout) const {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "no result";
  while (true) {
    absl::StatusOr<std::vector<Sample>> samples = Query(promql);
    if (!samples.ok()) {
      last = std::string(samples.status().message());
    } else if (samples->size() == 1 && (*samples)[0].value == expected) {
      return absl::OkStatus();
    } else {
      std::vector<std::string> values;
      for (const Sample& sample : *samples) values.push_back(absl::StrCat(sample.value));
      last = absl::StrCat(samples->size(), " samples: [", absl::StrJoin(values, ", "), "]");
    }
    if (absl::Now() > deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("'", promql, "' never became ", expected, "; last: ", last));
    }
    absl::SleepFor(absl::Milliseconds(250));  // the next scrape lands within a second
  }
}

}  // namespace pdserve::integration
