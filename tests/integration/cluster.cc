#include "tests/integration/cluster.h"

#include <fcntl.h>
#include <grpcpp/grpcpp.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "core/rpc/local_ca.h"
#include "gtest/gtest.h"

namespace pdserve::integration {

std::string PdserveBinary() { return PDSERVE_BINARY_DIR "/tools/pdserve"; }
std::string ModelPath() { return PDSERVE_SHARED_DIR "/models/stories260K/stories260K.bin"; }
std::string TokenizerPath() { return PDSERVE_SHARED_DIR "/models/stories260K/tok512.bin"; }
std::string EvalTextPath() { return PDSERVE_SHARED_DIR "/data/stories260K-eval.txt"; }

// A child of `up` reparented elsewhere may linger as a zombie: that counts as gone.
bool ProcessIsRunning(pid_t pid) {
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return false;
  const char state = line[paren + 2];
  return state != 'Z' && state != 'X';
}

namespace {

// Waits for `pid` (our child) up to `timeout`; true when it was reaped.
bool WaitChild(pid_t pid, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) return true;
    if (absl::Now() >= deadline) return false;
    absl::SleepFor(absl::Milliseconds(20));
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<Cluster>> Cluster::Start(const std::vector<std::string>& args,
                                                        absl::Duration startup, bool tls) {
  std::unique_ptr<Cluster> cluster(new Cluster());
  if (tls) {  // the destructor removes it
    char ca_template[] = "/tmp/pdserve-cluster-ca-XXXXXX";
    if (mkdtemp(ca_template) == nullptr) {
      return absl::InternalError(absl::StrCat("mkdtemp: ", std::strerror(errno)));
    }
    cluster->own_ca_ = ca_template;
    cluster->tls_dir_ = cluster->own_ca_ + "/tls";
    if (absl::Status written = WriteLocalCa(cluster->tls_dir_); !written.ok()) return written;
  }
  char log_template[] = "/tmp/pdserve-cluster-XXXXXX.log";
  const int log_fd = mkstemps(log_template, 4);
  if (log_fd < 0) return absl::InternalError(absl::StrCat("mkstemps: ", std::strerror(errno)));
  cluster->log_path_ = log_template;
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    close(log_fd);
    return absl::InternalError(absl::StrCat("pipe2: ", std::strerror(errno)));
  }

  // Everything the child needs is prepared before fork: after it, only async-signal-safe calls.
  std::vector<std::string> argv_strings = {PdserveBinary(), "up",
                                           absl::StrCat("--model=", ModelPath()),
                                           absl::StrCat("--tokenizer=", TokenizerPath())};
  argv_strings.push_back(tls ? absl::StrCat("--tls-dir=", cluster->tls_dir_) : "--insecure");
  argv_strings.insert(argv_strings.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& arg : argv_strings) argv.push_back(arg.data());
  argv.push_back(nullptr);
  const pid_t parent = getpid();

  const pid_t pid = fork();
  if (pid < 0) {
    close(log_fd);
    close(out[0]);
    close(out[1]);
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != parent) _exit(126);  // the test died between fork and prctl
    dup2(out[1], STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    signal(SIGPIPE, SIG_DFL);
    execv(argv[0], argv.data());
    static const char kFailed[] = "cluster: execv of pdserve failed\n";
    (void)!write(STDERR_FILENO, kFailed, sizeof(kFailed) - 1);
    _exit(127);
  }
  close(out[1]);
  close(log_fd);
  cluster->up_pid_ = pid;
  cluster->stdout_fd_ = out[0];

  const std::string command = absl::StrJoin(argv_strings, " ");
  auto fail = [&](const std::string& why) {
    return absl::UnavailableError(
        absl::StrCat("`", command, "` ", why, "\n--- its stderr (tail) ---\n", cluster->LogTail()));
  };
  const absl::Time deadline = absl::Now() + startup;
  std::string buffer;
  std::string stdout_text;
  while (cluster->router_.empty()) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return fail(absl::StrCat("was not ready within ", absl::FormatDuration(startup),
                               "; stdout: ", stdout_text));
    }
    pollfd pfd{cluster->stdout_fd_, POLLIN, 0};
    const int ready = poll(
        &pfd, 1, static_cast<int>(std::min(left, absl::Milliseconds(200)) / absl::Milliseconds(1)));
    if (ready > 0) {
      char chunk[4096];
      const ssize_t n = read(cluster->stdout_fd_, chunk, sizeof(chunk));
      if (n == 0) {
        WaitChild(pid, absl::Seconds(5));
        return fail(absl::StrCat("closed its stdout before the ready line; stdout: ", stdout_text));
      }
      if (n > 0) {
        buffer.append(chunk, n);
        stdout_text.append(chunk, n);
      }
      size_t eol;
      while ((eol = buffer.find('\n')) != std::string::npos) {
        const std::string line = buffer.substr(0, eol);
        buffer.erase(0, eol + 1);
        std::vector<std::string> fields =
            absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
        if (fields.size() == 2 && fields[0] == "PDSERVE_TLS_CA") {
          cluster->announced_ca_ = fields[1];
        } else if (fields.size() == 4 && fields[0] == "PDSERVE_READY" && fields[1] == "up") {
          cluster->router_ = fields[2];
          cluster->router_http_ = fields[3];
        } else if (fields.size() == 5 && fields[3] == "pid") {
          Process process{fields[0], fields[1], fields[2], -1};
          if (!absl::SimpleAtoi(fields[4], &process.pid) || process.pid <= 0) {
            return fail(absl::StrCat("printed a bad table line: '", line, "'"));
          }
          cluster->processes_.push_back(process);
        }
      }
    }
    int status = 0;
    if (waitpid(pid, &status, WNOHANG) == pid) {
      cluster->up_pid_ = -1;
      return fail(absl::StrCat("exited (wait status ", status,
                               ") before it was ready; stdout: ", stdout_text));
    }
  }
  if (cluster->Find("router") == nullptr) return fail("printed no router line in its table");
  if (tls && cluster->announced_ca_ != LocalCaFiles(cluster->tls_dir_, ComponentRole::kRouter).ca) {
    return fail(absl::StrCat("announced the CA '", cluster->announced_ca_, "', not ours"));
  }
  if (const Process* kvstore = cluster->Find("kvstore")) {
    cluster->kvstore_ = v1::KvStore::NewStub(
        grpc::CreateChannel(kvstore->address, cluster->Credentials(ComponentRole::kOperator)));
  }
  // Nothing more is expected on stdout, but `up` must never block writing it.
  Cluster* self = cluster.get();
  cluster->drain_ = std::thread([self] {
    char chunk[4096];
    while (!self->stop_drain_.load()) {
      pollfd pfd{self->stdout_fd_, POLLIN, 0};
      if (poll(&pfd, 1, 100) > 0 && read(self->stdout_fd_, chunk, sizeof(chunk)) <= 0) break;
    }
  });
  return cluster;
}

Cluster::~Cluster() {
  Stop();
  if (!own_ca_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(own_ca_, ignored);
  }
  if (!log_path_.empty() && std::getenv("PDSERVE_KEEP_CLUSTER_LOGS") == nullptr) {
    unlink(log_path_.c_str());
  }
}

void Cluster::Stop() {
  if (up_pid_ > 0) {
    kill(up_pid_, SIGTERM);
    if (!WaitChild(up_pid_, absl::Seconds(20))) {
      std::fprintf(stderr, "cluster: `pdserve up` (pid %d) ignored SIGTERM for 20 s; SIGKILL\n",
                   up_pid_);
      kill(up_pid_, SIGKILL);
      WaitChild(up_pid_, absl::Seconds(10));
    }
    up_pid_ = -1;
  }
  // `up` stops its children before it exits; a child still running now (say `up` was killed)
  // got SIGTERM through its death signal; give it a moment, then SIGKILL.
  const absl::Time deadline = absl::Now() + absl::Seconds(5);
  for (const Process& process : processes_) {
    while (ProcessIsRunning(process.pid) && absl::Now() < deadline) {
      absl::SleepFor(absl::Milliseconds(20));
    }
    if (ProcessIsRunning(process.pid)) {
      std::fprintf(stderr, "cluster: %s (pid %d) outlived `up`; SIGKILL\n", process.name.c_str(),
                   process.pid);
      kill(process.pid, SIGKILL);
    }
  }
  stop_drain_ = true;
  if (drain_.joinable()) drain_.join();
  if (stdout_fd_ >= 0) close(stdout_fd_);
  stdout_fd_ = -1;
}

const Cluster::Process* Cluster::Find(const std::string& name) const {
  for (const Process& process : processes_) {
    if (process.name == name) return &process;
  }
  return nullptr;
}

const Cluster::Process* Cluster::FindByAddress(const std::string& address) const {
  for (const Process& process : processes_) {
    if (process.address == address) return &process;
  }
  return nullptr;
}

std::vector<Cluster::Process> Cluster::WithPrefix(const std::string& prefix) const {
  std::vector<Process> found;
  for (const Process& process : processes_) {
    if (absl::StartsWith(process.name, prefix)) found.push_back(process);
  }
  return found;
}

std::string Cluster::LogTail(size_t bytes) const {
  std::ifstream in(log_path_, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  std::string all = text.str();
  if (all.size() > bytes) all = "..." + all.substr(all.size() - bytes);
  return all;
}

absl::StatusOr<v1::PoolUsage> Cluster::PoolUsage() const {
  if (kvstore_ == nullptr) return absl::FailedPreconditionError("the cluster has no KV store");
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  v1::PoolUsage usage;
  const grpc::Status status = kvstore_->GetPoolUsage(&context, v1::PoolUsageRequest(), &usage);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("GetPoolUsage: ", status.error_message()));
  }
  return usage;
}

std::shared_ptr<grpc::ChannelCredentials> Cluster::Credentials(
    std::optional<ComponentRole> role) const {
  if (tls_dir_.empty()) return grpc::InsecureChannelCredentials();
  TlsFiles files = LocalCaFiles(tls_dir_, role.value_or(ComponentRole::kOperator));
  if (!role.has_value()) files.cert = files.key = "";
  absl::StatusOr<std::shared_ptr<const Tls>> tls = Tls::Load(files);
  if (!tls.ok()) {
    ADD_FAILURE() << tls.status();
    return grpc::InsecureChannelCredentials();
  }
  return (*tls)->ChannelCredentials();
}

absl::StatusOr<grpc::health::v1::HealthCheckResponse::ServingStatus> Cluster::Health(
    const std::string& address) const {
  auto stub =
      grpc::health::v1::Health::NewStub(grpc::CreateChannel(address, Credentials(std::nullopt)));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
  grpc::health::v1::HealthCheckRequest request;
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = stub->Check(&context, request, &response);
  if (!status.ok()) {
    return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                        absl::StrCat("Health.Check on ", address, ": ", status.error_message()));
  }
  return response.status();
}

}  // namespace pdserve::integration
