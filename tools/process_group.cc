#include "tools/process_group.h"

#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace pdserve::cli {
namespace {

[[noreturn]] void ExecChild(const std::vector<std::string>& args, int stdout_fd) {
  prctl(PR_SET_PDEATHSIG, SIGTERM);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  dup2(stdout_fd, STDOUT_FILENO);
  close(stdout_fd);
  std::vector<char*> argv;
  argv.push_back(const_cast<char*>("pdserve"));
  for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execv("/proc/self/exe", argv.data());
  std::fprintf(stderr, "error: cannot exec /proc/self/exe: %s\n", std::strerror(errno));
  _exit(127);
}

// Reads lines from `fd` until one starts with PDSERVE_READY or `deadline`; "" on EOF/timeout.
std::string ReadReadyLine(int fd, absl::Time deadline) {
  std::string buffer;
  char chunk[512];
  while (absl::Now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const int timeout_ms = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (poll(&p, 1, std::max(timeout_ms, 1)) <= 0) continue;
    const ssize_t n = read(fd, chunk, sizeof(chunk));
    if (n <= 0) return "";
    buffer.append(chunk, n);
    size_t newline;
    while ((newline = buffer.find('\n')) != std::string::npos) {
      std::string line = buffer.substr(0, newline);
      buffer.erase(0, newline + 1);
      if (line.rfind("PDSERVE_READY ", 0) == 0) return line;
      std::fprintf(stderr, "%s\n", line.c_str());
    }
  }
  return "";
}

}  // namespace

std::string DescribeWaitStatus(int wait_status) {
  if (WIFEXITED(wait_status)) return absl::StrCat("exit code ", WEXITSTATUS(wait_status));
  if (WIFSIGNALED(wait_status)) {
    return absl::StrCat("signal ", WTERMSIG(wait_status), " (", strsignal(WTERMSIG(wait_status)),
                        ")");
  }
  return absl::StrCat("wait status ", wait_status);
}

ProcessGroup::~ProcessGroup() {
  StopAll(absl::Seconds(10));
  for (std::thread& drain : drains_) drain.join();
}

absl::StatusOr<std::string> ProcessGroup::Start(const std::string& name,
                                                const std::vector<std::string>& args,
                                                absl::Duration timeout) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  const pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  if (pid == 0) {
    close(fds[0]);
    ExecChild(args, fds[1]);
  }
  close(fds[1]);
  children_.push_back(Child{name, pid, "", "", false, 0});
  const std::string line = ReadReadyLine(fds[0], absl::Now() + timeout);
  // After the ready line, pass the child's stdout through so it never blocks on a full pipe.
  drains_.emplace_back([fd = fds[0]] {
    char chunk[512];
    ssize_t n;
    while ((n = read(fd, chunk, sizeof(chunk))) > 0) fwrite(chunk, 1, n, stderr);
    close(fd);
  });
  if (line.empty()) {
    // Its stdout closed or it stayed silent: give an exiting child a moment to be reaped, so the
    // message says how it ended rather than that it was late.
    std::string why = "did not become ready in time";
    const absl::Time reap_deadline = absl::Now() + absl::Seconds(2);
    while (absl::Now() < reap_deadline && why[0] == 'd') {
      for (const Child& dead : Reap()) {
        if (dead.pid == pid)
          why = absl::StrCat("exited with ", DescribeWaitStatus(dead.wait_status));
      }
      if (why[0] == 'd') absl::SleepFor(absl::Milliseconds(20));
    }
    return absl::UnavailableError(absl::StrCat(name, " ", why, " (its log is above)"));
  }
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  children_.back().address = parts.size() >= 3 ? parts[2] : "";
  children_.back().http_address = parts.size() >= 4 ? parts[3] : "-";
  return children_.back().address;
}

std::vector<ProcessGroup::Child> ProcessGroup::Reap() {
  std::vector<Child> dead;
  for (Child& child : children_) {
    if (child.exited) continue;
    int status = 0;
    if (waitpid(child.pid, &status, WNOHANG) == child.pid) {
      child.exited = true;
      child.wait_status = status;
      dead.push_back(child);
    }
  }
  return dead;
}

void ProcessGroup::Stop(const std::function<bool(const Child&)>& which, absl::Duration grace) {
  for (auto it = children_.rbegin(); it != children_.rend(); ++it) {
    if (!it->exited && which(*it)) kill(it->pid, SIGTERM);
  }
  const absl::Time deadline = absl::Now() + grace;
  while (true) {
    Reap();
    bool all = true;
    for (const Child& child : children_) all = all && (child.exited || !which(child));
    if (all) return;
    if (absl::Now() >= deadline) break;
    // Children exit on their own schedule; there is no portable wait-with-timeout for a set of
    // pids, so poll the reaper at a short interval until the grace period ends.
    absl::SleepFor(absl::Milliseconds(20));
  }
  for (Child& child : children_) {
    if (child.exited || !which(child)) continue;
    std::fprintf(stderr, "pdserve up: %s (pid %d) ignored SIGTERM; killing it\n",
                 child.name.c_str(), child.pid);
    kill(child.pid, SIGKILL);
    waitpid(child.pid, &child.wait_status, 0);
    child.exited = true;
  }
}

}  // namespace pdserve::cli
