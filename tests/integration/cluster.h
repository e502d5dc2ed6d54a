// Cluster: a real `pdserve up` cluster for integration tests. Forks and execs
// `<build>/tools/pdserve up --model ... <args>` with its stdout on a pipe and its stderr (and so
// every child's log) in a temporary file, reads the table of processes ("  <name> <grpc> <http>
// pid <pid>") and waits for "PDSERVE_READY up <router grpc> <router http>" until a startup
// deadline. Start fails with the
// tail of the log when `up` exits or stays silent first.
//
// The destructor sends SIGTERM to `up` (which stops every child), waits for it, and sends SIGKILL
// after a 20 s grace period; children that somehow outlive `up` are killed too, so no process is
// left behind. `up` also gets SIGTERM when the thread that started it exits (PR_SET_PDEATHSIG):
// start clusters from a thread that outlives them (e.g. the gtest main thread in SetUpTestSuite).
#ifndef PDSERVE_TESTS_INTEGRATION_CLUSTER_H_
#define PDSERVE_TESTS_INTEGRATION_CLUSTER_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/rpc/tls.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "pdserve/v1/kvstore.grpc.pb.h"

namespace pdserve::integration {

// The pdserve binary and the stories260K model the tests use.
std::string PdserveBinary();
std::string ModelPath();
std::string TokenizerPath();
std::string EvalTextPath();

// Whether `pid` exists and is not a zombie.
bool ProcessIsRunning(pid_t pid);

class Cluster {
 public:
  struct Process {
    std::string name;          // "router", "kvstore", "prefill-0", "decode-1", "monolithic-0"
    std::string address;       // gRPC
    std::string http_address;  // /metrics (and the OpenAI API on the router)
    pid_t pid = -1;
  };

  // Starts `pdserve up --model M --tokenizer T <args...>`: plaintext (--insecure), or with `tls`
  // a CA and per-role certificates this harness makes (`--tls-dir`, removed with the cluster), so
  // that tests can call with any role's key.
  static absl::StatusOr<std::unique_ptr<Cluster>> Start(const std::vector<std::string>& args,
                                                        absl::Duration startup = absl::Seconds(120),
                                                        bool tls = false);

  Cluster(const Cluster&) = delete;
  Cluster& operator=(const Cluster&) = delete;
  ~Cluster();

  const std::string& router_address() const { return router_; }
  const std::string& router_http_address() const { return router_http_; }
  const std::vector<Process>& processes() const { return processes_; }
  // nullptr when there is no process of that name.
  const Process* Find(const std::string& name) const;
  // Processes whose name starts with `prefix`, e.g. "decode-".
  std::vector<Process> WithPrefix(const std::string& prefix) const;
  // The process whose address is `address`; nullptr when none.
  const Process* FindByAddress(const std::string& address) const;
  pid_t up_pid() const { return up_pid_; }
  // With TLS: the directory of the cluster's CA and certificates (core/rpc/local_ca.h); "" without.
  const std::string& tls_dir() const { return tls_dir_; }
  // The CA certificate `up` announced (`PDSERVE_TLS_CA`), also when the harness did not make it
  // (a test that passes --insecure=false gets up's own throwaway CA); "" when none.
  const std::string& announced_ca() const { return announced_ca_; }
  // Credentials to call the cluster with: `role`'s certificate, or with nullopt only the CA (no
  // client certificate); insecure for a plaintext cluster.
  std::shared_ptr<grpc::ChannelCredentials> Credentials(std::optional<ComponentRole> role) const;

  // The last `bytes` of the combined stderr of `up` and its children.
  std::string LogTail(size_t bytes = 8000) const;

  // The KV store's pool usage (the cluster must be disaggregated).
  absl::StatusOr<v1::PoolUsage> PoolUsage() const;
  // grpc.health.v1 Check("") on `address`.
  absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Health(
      const std::string& address) const;

 private:
  Cluster() = default;
  void Stop();

  pid_t up_pid_ = -1;
  int stdout_fd_ = -1;
  std::string log_path_;
  std::string router_;
  std::string router_http_;
  std::string tls_dir_;
  std::string own_ca_;  // the temporary directory holding tls_dir_, when the harness made it
  std::string announced_ca_;
  std::vector<Process> processes_;
  std::unique_ptr<v1::KvStore::Stub> kvstore_;
  std::atomic<bool> stop_drain_{false};
  std::thread drain_;  // reads `up`'s stdout after the ready line so that it never blocks
};

}  // namespace pdserve::integration

#endif  // PDSERVE_TESTS_INTEGRATION_CLUSTER_H_
