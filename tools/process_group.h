// ProcessGroup: the child processes `pdserve up` runs — each a pdserve subcommand started from
// this binary, its stdout read until it announces "PDSERVE_READY <role> <grpc> <http>" (then passed
// through to stderr), its stderr inherited. Children get SIGTERM if this process dies
// (PR_SET_PDEATHSIG) and are stopped (SIGTERM, then SIGKILL after a grace period) by StopAll or
// the destructor, so no child outlives the group.
#ifndef PDSERVE_TOOLS_PROCESS_GROUP_H_
#define PDSERVE_TOOLS_PROCESS_GROUP_H_

#include <sys/types.h>

#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace pdserve::cli {

class ProcessGroup {
 public:
  struct Child {
    std::string name;  // e.g. "decode-1"
    pid_t pid = -1;
    std::string address;       // gRPC, from its ready line
    std::string http_address;  // HTTP (/metrics), from its ready line
    bool exited = false;
    int wait_status = 0;
  };

  ProcessGroup() = default;
  ProcessGroup(const ProcessGroup&) = delete;
  ProcessGroup& operator=(const ProcessGroup&) = delete;
  ~ProcessGroup();

  // Starts `self args...` and waits (up to `timeout`) for its ready line; returns its address.
  // Unavailable naming the child when it exits or stays silent first.
  absl::StatusOr<std::string> Start(const std::string& name, const std::vector<std::string>& args,
                                    absl::Duration timeout);
  // Reaps children that exited; returns the ones newly found dead.
  std::vector<Child> Reap();
  // SIGTERM to every live child that `which` selects, at once; SIGKILL to those still alive
  // after `grace`.
  void Stop(const std::function<bool(const Child&)>& which, absl::Duration grace);
  void StopAll(absl::Duration grace) {
    Stop([](const Child&) { return true; }, grace);
  }

  const std::vector<Child>& children() const { return children_; }

 private:
  std::vector<Child> children_;
  std::vector<std::thread> drains_;  // forward each child's stdout after its ready line
};

// Describes a waitpid status: "exit code 1", "signal 9 (Killed)".
std::string DescribeWaitStatus(int wait_status);

}  // namespace pdserve::cli

#endif  // PDSERVE_TOOLS_PROCESS_GROUP_H_
