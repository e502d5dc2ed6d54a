// pdserve_transport_bench: put and get bandwidth of UcxTransport between two processes on this
// host. The process forks before touching UCX: the child opens a target buffer for remote access
// and sends its address and key over a pipe; the parent connects and times PutBatch/GetBatch for
// each message size and batch depth, printing the median GB/s (1e9 bytes/s) of several trials.
//
//   pdserve_transport_bench --transports=tcp --sizes=4096,65536,1048576,4194304 --depths=1,16
//
// --target_memory=register (default): the target is caller memory passed to Transport::Register;
// allocate: the target comes from Transport::Allocate (UCX allocates it: shared memory under
// posix/sysv, which the initiator maps, as ucx_perftest does). --local_memory=plain (default),
// register or allocate: the initiator's own buffer is a std::vector, the same registered with its
// transport, or memory from its transport's Allocate.
//
// Output (stdout): a header, then one line per point: "op size depth median_GBps min max".
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/transport/ucx_transport.h"

namespace pdserve {
namespace {

struct BenchConfig {
  std::string transports = "tcp";
  bool peer_failure_detection = true;
  std::vector<size_t> sizes = {4096, 65536, 1 << 20, 4 << 20};
  std::vector<size_t> depths = {1, 16};
  std::vector<std::string> ops = {"put", "get"};
  size_t mib_per_trial = 64;
  int trials = 5;
  bool allocate_target = false;
  bool allocate_local = false;
  bool register_local = false;
  bool direct_shared_memory = true;
  size_t local_offset = 0;  // plain/register local buffer: this many bytes past a page boundary
};

std::vector<size_t> ParseSizes(const std::string& text) {
  std::vector<size_t> out;
  for (absl::string_view part : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    size_t value = 0;
    if (!absl::SimpleAtoi(part, &value) || value == 0) {
      std::fprintf(stderr, "bad number '%s'\n", std::string(part).c_str());
      std::exit(2);
    }
    out.push_back(value);
  }
  return out;
}

BenchConfig ParseArgs(int argc, char** argv) {
  BenchConfig config;
  bool bad_memory = false;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    auto value = [&](const char* name) -> const char* {
      size_t n = std::strlen(name);
      return arg.compare(0, n, name) == 0 ? arg.c_str() + n : nullptr;
    };
    if (const char* v = value("--transports=")) {
      config.transports = v;
    } else if (const char* v = value("--sizes=")) {
      config.sizes = ParseSizes(v);
    } else if (const char* v = value("--depths=")) {
      config.depths = ParseSizes(v);
    } else if (const char* v = value("--ops=")) {
      config.ops = absl::StrSplit(v, ',', absl::SkipEmpty());
    } else if (const char* v = value("--mib_per_trial=")) {
      config.mib_per_trial = ParseSizes(v).at(0);
    } else if (const char* v = value("--trials=")) {
      config.trials = static_cast<int>(ParseSizes(v).at(0));
    } else if (const char* v = value("--target_memory=")) {
      config.allocate_target = std::string(v) == "allocate";
      bad_memory |= !config.allocate_target && std::string(v) != "register";
    } else if (const char* v = value("--local_memory=")) {
      config.allocate_local = std::string(v) == "allocate";
      config.register_local = std::string(v) == "register";
      bad_memory |= !config.allocate_local && !config.register_local && std::string(v) != "plain";
    } else if (const char* v = value("--local_offset=")) {
      config.local_offset = std::strtoull(v, nullptr, 10) % 4096;
    } else if (const char* v = value("--direct_shared_memory=")) {
      config.direct_shared_memory = std::string(v) != "0" && std::string(v) != "false";
    } else if (const char* v = value("--peer_failure_detection=")) {
      config.peer_failure_detection = std::string(v) != "0" && std::string(v) != "false";
    } else {
      std::fprintf(stderr,
                   "usage: %s [--transports=tcp] [--sizes=4096,...] [--depths=1,16] "
                   "[--ops=put,get] [--mib_per_trial=64] [--trials=5] "
                   "[--peer_failure_detection=1] [--target_memory=register|allocate] "
                   "[--local_memory=plain|register|allocate] [--direct_shared_memory=1] "
                   "[--local_offset=0]\n",
                   argv[0]);
      std::exit(2);
    }
  }
  if (config.trials < 1 || bad_memory) {
    std::fprintf(stderr,
                 "--trials must be >= 1, --target_memory register|allocate, "
                 "--local_memory plain|register|allocate\n");
    std::exit(2);
  }
  return config;
}

UcxTransportOptions Options(const BenchConfig& config) {
  UcxTransportOptions options;
  options.transports = config.transports;
  options.peer_failure_detection = config.peer_failure_detection;
  options.direct_shared_memory = config.direct_shared_memory;
  options.timeout = absl::Seconds(30);
  return options;
}

size_t BufferBytes(const BenchConfig& config) {
  return *std::max_element(config.sizes.begin(), config.sizes.end()) *
         *std::max_element(config.depths.begin(), config.depths.end());
}

// The target: registers memory, sends "address rkey base\n" on `out`, waits for EOF on `in`.
int RunTarget(const BenchConfig& config, int out, int in) {
  auto transport = UcxTransport::Create(Options(config));
  if (!transport.ok()) {
    std::fprintf(stderr, "target: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  std::vector<uint8_t> memory;
  absl::StatusOr<std::unique_ptr<MemoryRegion>> region;
  if (config.allocate_target) {
    region = (*transport)->Allocate(BufferBytes(config), RemoteAccess::kReadWrite);
  } else {
    memory.assign(BufferBytes(config), 1);
    region = (*transport)->Register(memory.data(), memory.size(), RemoteAccess::kReadWrite);
  }
  if (!region.ok()) {
    std::fprintf(stderr, "target: %s\n", region.status().ToString().c_str());
    return 1;
  }
  if (config.allocate_target) std::memset((*region)->data(), 1, (*region)->size());
  std::string line = absl::StrCat(absl::BytesToHexString((*transport)->address()), " ",
                                  absl::BytesToHexString((*region)->packed_rkey()), " ",
                                  (*region)->address(), "\n");
  if (write(out, line.data(), line.size()) != static_cast<ssize_t>(line.size())) return 1;
  close(out);
  char byte;
  while (read(in, &byte, 1) > 0) {
  }
  return 0;
}

int RunInitiator(const BenchConfig& config, const std::string& line) {
  std::vector<std::string> parts = absl::StrSplit(line, ' ');
  if (parts.size() != 3) return 1;
  const std::string address = absl::HexStringToBytes(parts[0]);
  const std::string rkey = absl::HexStringToBytes(parts[1]);
  const uint64_t base = std::strtoull(parts[2].c_str(), nullptr, 10);
  auto transport = UcxTransport::Create(Options(config));
  if (!transport.ok()) {
    std::fprintf(stderr, "initiator: %s\n", transport.status().ToString().c_str());
    return 1;
  }
  auto endpoint = (*transport)->Connect(address);
  if (!endpoint.ok()) {
    std::fprintf(stderr, "connect: %s\n", endpoint.status().ToString().c_str());
    return 1;
  }
  std::fprintf(stderr, "%s\n", DescribeTransport(**transport, endpoint->get()).c_str());
  std::vector<uint8_t> plain;
  std::unique_ptr<MemoryRegion> local_region;
  uint8_t* local = nullptr;
  if (config.allocate_local) {
    auto region = (*transport)->Allocate(BufferBytes(config), RemoteAccess::kReadWrite);
    if (!region.ok()) {
      std::fprintf(stderr, "initiator: %s\n", region.status().ToString().c_str());
      return 1;
    }
    local_region = *std::move(region);
    local = local_region->data();
    std::memset(local, 2, BufferBytes(config));
  } else {
    plain.assign(BufferBytes(config) + 8192, 2);
    local = plain.data() + (4096 - reinterpret_cast<uintptr_t>(plain.data()) % 4096) % 4096 +
            config.local_offset;
    if (config.register_local) {
      auto region = (*transport)->Register(local, BufferBytes(config), RemoteAccess::kReadWrite);
      if (!region.ok()) {
        std::fprintf(stderr, "initiator: %s\n", region.status().ToString().c_str());
        return 1;
      }
      local_region = *std::move(region);
    }
  }
  {
    // The target filled its region with 1s: reading them back proves we reach its memory.
    std::vector<uint8_t> check(std::min<size_t>(4096, BufferBytes(config)), 0);
    absl::Status status = (*endpoint)->Get(rkey, check.data(), check.size(), base);
    if (!status.ok() || std::count(check.begin(), check.end(), 1) != std::ssize(check)) {
      std::fprintf(stderr, "initiator: the target's bytes did not come back: %s\n",
                   status.ToString().c_str());
      return 1;
    }
  }
  std::printf(
      "# transports=%s target_memory=%s local_memory=%s %s\n"
      "# op size depth median_GBps min_GBps max_GBps\n",
      config.transports.c_str(), config.allocate_target ? "allocate" : "register",
      config.allocate_local ? "allocate" : "plain",
      DescribeTransport(**transport, endpoint->get()).c_str());
  for (const std::string& op : config.ops) {
    for (size_t size : config.sizes) {
      for (size_t depth : config.depths) {
        std::vector<TransferOp> batch;
        for (size_t i = 0; i < depth; ++i)
          batch.push_back({local + i * size, size, base + i * size});
        const size_t batch_bytes = size * depth;
        const size_t iterations = std::max<size_t>(2, (config.mib_per_trial << 20) / batch_bytes);
        std::vector<double> rates;
        for (int trial = -1; trial < config.trials; ++trial) {  // trial -1 warms up
          auto start = std::chrono::steady_clock::now();
          for (size_t it = 0; it < iterations; ++it) {
            absl::Status status = op == "put" ? (*endpoint)->PutBatch(rkey, batch)
                                              : (*endpoint)->GetBatch(rkey, batch);
            if (!status.ok()) {
              std::fprintf(stderr, "%s: %s\n", op.c_str(), status.ToString().c_str());
              return 1;
            }
          }
          double seconds =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          if (trial >= 0) rates.push_back(batch_bytes * iterations / seconds / 1e9);
        }
        std::sort(rates.begin(), rates.end());
        std::printf("%s %zu %zu %.3f %.3f %.3f\n", op.c_str(), size, depth, rates[rates.size() / 2],
                    rates.front(), rates.back());
        std::fflush(stdout);
      }
    }
  }
  return 0;
}

int Main(int argc, char** argv) {
  BenchConfig config = ParseArgs(argc, argv);
  int to_parent[2], to_child[2];
  if (pipe(to_parent) != 0 || pipe(to_child) != 0) return 1;
  pid_t child = fork();
  if (child < 0) return 1;
  if (child == 0) {
    close(to_parent[0]);
    close(to_child[1]);
    _exit(RunTarget(config, to_parent[1], to_child[0]));
  }
  close(to_parent[1]);
  close(to_child[0]);
  std::string line;
  char c;
  while (read(to_parent[0], &c, 1) == 1 && c != '\n') line.push_back(c);
  int rc = line.empty() ? 1 : RunInitiator(config, line);
  close(to_child[1]);  // the target exits on EOF
  int child_status = 0;
  waitpid(child, &child_status, 0);
  return rc;
}

}  // namespace
}  // namespace pdserve

int main(int argc, char** argv) { return pdserve::Main(argc, argv); }
