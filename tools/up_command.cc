// `pdserve up`: the whole disaggregated cluster on this machine as separate processes — router,
// K KV stores (one unless --kvstores), P prefill and D decode workers (or D monolithic workers
// with --monolithic) — started from this binary on loopback, each announcing its port; waits until
// every worker is registered and healthy, prints the endpoints, and stops them all on SIGINT or
// SIGTERM.
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "client/pdserve_client.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/formats/model_loader.h"
#include "core/rpc/local_ca.h"
#include "core/rpc/tls.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/flag_struct.h"
#include "tools/process_group.h"
#include "tools/profile_flags.h"
#include "tools/role_config.h"

ABSL_DECLARE_FLAG(bool, monolithic);

ABSL_FLAG(int, prefill_workers, 1, "up: prefill worker processes");
ABSL_FLAG(int, decode_workers, 1, "up: decode (or monolithic) worker processes");
ABSL_FLAG(int, kvstores, 1,
          "up: KV store processes, as on that many nodes (1 ≤ N ≤ --decode-workers): decode worker "
          "i uses store i mod N, and each store's prefix cache holds what was prefilled into it "
          "(see the router's --policy kv-aware)");
ABSL_FLAG(int, prefill_threads, -1,
          "up: --threads of each prefill worker (-1: --threads), e.g. 2 so that one long prompt "
          "has every core while the decode workers run 1");
ABSL_FLAG(int, decode_threads, -1,
          "up: --threads of each decode or monolithic worker (-1: --threads)");
ABSL_FLAG(int, startup_seconds, 180, "up: how long each process may take to become ready");
ABSL_FLAG(std::string, tls_dir, "",
          "up: the cluster's certificates — ca.pem, and <role>.pem with <role>-key.pem for router, "
          "prefill, decode, kvstore and operator; default: a throwaway CA made for this run in a "
          "private temporary directory (its private keys removed once every process is serving, "
          "the rest on exit), or none with --insecure");

ABSL_DECLARE_FLAG(double, drain_seconds);

namespace pdserve::cli {
namespace {

// The command line of a `command` process: the command and every flag of its role's struct.
template <typename Config>
std::vector<std::string> RoleArgs(const char* command, const Config& config) {
  std::vector<std::string> args = {command};
  for (std::string& arg : FlagArgs(config)) args.push_back(std::move(arg));
  return args;
}

// Processes other than the router listen on loopback, on ports of their choosing.
void OnAnyLoopbackPort(ProcessFlags& process) {
  process.listen = "127.0.0.1:0";
  process.http_listen = "127.0.0.1:0";
}

// The cluster's certificates: none (--insecure), the user's (--tls-dir), or a throwaway CA in a
// private temporary directory that is removed with this object.
class ClusterTls {
 public:
  static absl::StatusOr<std::unique_ptr<ClusterTls>> FromFlags() {
    auto tls = std::unique_ptr<ClusterTls>(new ClusterTls());
    const ProcessFlags process = FlagsTo<ProcessFlags>();
    if (!process.tls_cert.empty() || !process.tls_key.empty() || !process.tls_ca.empty()) {
      return absl::InvalidArgumentError(
          "up gives each process its own certificate: pass --tls-dir DIR (ca.pem, <role>.pem, "
          "<role>-key.pem) instead of --tls-cert/--tls-key/--tls-ca");
    }
    tls->dir_ = absl::GetFlag(FLAGS_tls_dir);
    if (process.insecure) {
      if (!tls->dir_.empty()) {
        return absl::InvalidArgumentError("--insecure and --tls-dir exclude each other");
      }
      return tls;
    }
    if (tls->dir_.empty()) {
      const char* tmp = std::getenv("TMPDIR");
      std::random_device random;
      tls->dir_ = absl::StrFormat("%s/pdserve-up-%d-%08x", tmp != nullptr ? tmp : "/tmp", getpid(),
                                  random());
      PDSERVE_RETURN_IF_ERROR(WriteLocalCa(tls->dir_));
      tls->throwaway_ = true;
    }
    // Each process checks its own files; the operator's are checked here, first.
    PDSERVE_RETURN_IF_ERROR(
        Tls::Load(LocalCaFiles(tls->dir_, ComponentRole::kOperator), ComponentRole::kOperator)
            .status());
    return tls;
  }
  ~ClusterTls() {
    std::error_code ignored;
    if (throwaway_) std::filesystem::remove_all(dir_, ignored);
  }
  // A throwaway CA's private keys, once every process has loaded its own (they read them once, at
  // start): removed, so that an `up` killed without its cleanup leaves only certificates behind.
  // The user's --tls-dir is left alone.
  void DropThrowawayKeys() const {
    if (!throwaway_) return;
    for (ComponentRole role : kComponentRoles) {
      std::error_code ignored;
      std::filesystem::remove(LocalCaFiles(dir_, role).key, ignored);
    }
  }

  bool enabled() const { return !dir_.empty(); }
  // The CA certificate clients verify the cluster with ("" without TLS).
  std::string ca() const { return enabled() ? LocalCaFiles(dir_, ComponentRole::kRouter).ca : ""; }
  // Gives a process of `role` its certificate.
  void Apply(ProcessFlags& process, ComponentRole role) const {
    if (!enabled()) return;
    const TlsFiles files = LocalCaFiles(dir_, role);
    process.tls_cert = files.cert;
    process.tls_key = files.key;
    process.tls_ca = files.ca;
  }
  // How `up` itself calls the router.
  ClientOptions Client() const {
    ClientOptions options;
    if (enabled()) options.tls = LocalCaFiles(dir_, ComponentRole::kOperator);
    return options;
  }

 private:
  ClusterTls() = default;
  std::string dir_;
  bool throwaway_ = false;
};

// Waits until the router lists `expected` healthy workers.
absl::Status WaitForWorkers(const std::string& router, const ClientOptions& options, int expected,
                            absl::Duration timeout) {
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Client::Create(router, options));
  const absl::Time deadline = absl::Now() + timeout;
  int healthy = 0;
  while (absl::Now() < deadline) {
    CallOptions options;
    options.timeout = absl::Seconds(2);
    absl::StatusOr<v1::ListWorkersReply> workers = client->ListWorkers(options);
    if (workers.ok()) {
      healthy = 0;
      for (const v1::WorkerInfo& worker : workers->workers()) healthy += worker.healthy();
      if (healthy >= expected) return absl::OkStatus();
    }
    // Registration runs on the workers' heartbeat schedule; look again shortly.
    absl::SleepFor(absl::Milliseconds(100));
  }
  return absl::UnavailableError(absl::StrCat("only ", healthy, " of ", expected,
                                             " workers registered with the router in time"));
}

// A KV store slot that fits one page of `config` in the largest form a page takes (f32 K and V,
// 16 tokens, header): the store knows nothing of the model, so `up` sizes it unless --slot-kib
// says otherwise.
int64_t SlotKibFor(const ModelConfig& config, const CompressionProfile& profile) {
  // The largest page the workers write: 16 tokens of K and V at full head width (ZACK only narrows
  // them) in the profile's element type, FP8's per-token scales, and room for the header. A slot
  // no larger than that lets the pool (and the prefix cache in it) hold as many pages as it can.
  constexpr int64_t kPageTokens = 16;
  const bool fp8 = profile.fp8 != KvScaleMode::kNone;
  const int64_t element = fp8 ? 1 : profile.f16_kv ? 2 : 4;
  const int64_t scales = fp8 ? 2 * kPageTokens * int64_t{config.n_kv_heads} * 4 : 0;
  const int64_t bytes = 2 * kPageTokens * int64_t{config.kv_dim()} * element + scales + 4096;
  return std::max<int64_t>(4, (bytes + 4095) / 4096 * 4);
}

// The processes without which the cluster cannot serve: the router and every KV store.
bool IsCore(const std::string& name) { return name == "router" || name.starts_with("kvstore"); }

}  // namespace

absl::Status RunMakeCerts() {
  const std::string out = absl::GetFlag(FLAGS_out);
  if (out.empty()) {
    return absl::InvalidArgumentError("make-certs needs --out DIR (a new directory)");
  }
  PDSERVE_RETURN_IF_ERROR(WriteLocalCa(out));
  std::printf(
      "wrote %s/ca.pem and, for router, prefill, decode, kvstore and operator, "
      "<role>.pem and <role>-key.pem: `pdserve up --tls-dir %s`; clients: --tls-ca "
      "%s/ca.pem\n",
      out.c_str(), out.c_str(), out.c_str());
  return absl::OkStatus();
}

absl::Status RunUp() {
  const int prefill_workers = absl::GetFlag(FLAGS_prefill_workers);
  const int decode_workers = absl::GetFlag(FLAGS_decode_workers);
  const bool monolithic = absl::GetFlag(FLAGS_monolithic);
  if (absl::GetFlag(FLAGS_model).empty()) return absl::InvalidArgumentError("up needs --model");
  if (decode_workers < 1 || (!monolithic && prefill_workers < 1)) {
    return absl::InvalidArgumentError("up needs --prefill-workers ≥ 1 and --decode-workers ≥ 1");
  }
  const int kvstores = absl::GetFlag(FLAGS_kvstores);
  if (kvstores < 1 || kvstores > decode_workers || (monolithic && kvstores != 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--kvstores ", kvstores, " must be in [1, --decode-workers = ", decode_workers,
                     "] (monolithic workers use none)"));
  }
  const int prefill_threads = absl::GetFlag(FLAGS_prefill_threads);
  const int decode_threads = absl::GetFlag(FLAGS_decode_threads);
  if (prefill_threads < -1 || decode_threads < -1) {
    return absl::InvalidArgumentError(
        "--prefill-threads and --decode-threads must be ≥ 0 (0 = automatic), or -1 for --threads");
  }
  // Signals wait for sigwait below; the children unblock them for themselves.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGCHLD);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  const absl::Duration startup = absl::Seconds(absl::GetFlag(FLAGS_startup_seconds));
  PDSERVE_ASSIGN_OR_RETURN(const std::unique_ptr<ClusterTls> tls, ClusterTls::FromFlags());
  ProcessGroup group;  // declared after `tls`: its processes stop before the certificates go
  auto router_config = FlagsTo<RouterConfig>();
  tls->Apply(router_config.process, ComponentRole::kRouter);
  PDSERVE_ASSIGN_OR_RETURN(const std::string router,
                           group.Start("router", RoleArgs("router", router_config), startup));
  const std::string router_http = group.children().back().http_address;

  std::vector<std::string> kvstores_started;  // gRPC addresses; none for monolithic workers
  if (!monolithic) {
    auto store = FlagsTo<KvStoreConfig>();
    OnAnyLoopbackPort(store.process);
    tls->Apply(store.process, ComponentRole::kKvStore);
    if (absl::FindCommandLineFlag("slot_kib")->CurrentValue() ==
        absl::FindCommandLineFlag("slot_kib")->DefaultValue()) {
      PDSERVE_ASSIGN_OR_RETURN(ModelWeights weights, LoadModelWeights(absl::GetFlag(FLAGS_model)));
      PDSERVE_ASSIGN_OR_RETURN(const CompressionProfile profile, ProfileFromFlags());
      store.slot_kib = SlotKibFor(weights.config, profile);
    }
    for (int i = 0; i < kvstores; ++i) {
      const std::string name = kvstores == 1 ? "kvstore" : absl::StrCat("kvstore-", i);
      PDSERVE_ASSIGN_OR_RETURN(std::string address,
                               group.Start(name, RoleArgs("kvstore", store), startup));
      kvstores_started.push_back(std::move(address));
    }
    auto prefill = FlagsTo<PrefillConfig>();
    OnAnyLoopbackPort(prefill.worker.process);
    tls->Apply(prefill.worker.process, ComponentRole::kPrefill);
    prefill.worker.router = router;
    if (prefill_threads >= 0) prefill.worker.engine.threads = prefill_threads;
    for (int i = 0; i < prefill_workers; ++i) {
      PDSERVE_RETURN_IF_ERROR(
          group.Start(absl::StrCat("prefill-", i), RoleArgs("prefill", prefill), startup).status());
    }
  }
  auto decode = FlagsTo<DecodeConfig>();
  OnAnyLoopbackPort(decode.worker.process);
  tls->Apply(decode.worker.process, ComponentRole::kDecode);
  decode.worker.router = router;
  if (decode_threads >= 0) decode.worker.engine.threads = decode_threads;
  for (int i = 0; i < decode_workers; ++i) {
    decode.kvstore = monolithic ? "" : kvstores_started[i % kvstores];
    PDSERVE_RETURN_IF_ERROR(group
                                .Start(absl::StrCat(monolithic ? "monolithic-" : "decode-", i),
                                       RoleArgs("decode", decode), startup)
                                .status());
  }
  PDSERVE_RETURN_IF_ERROR(WaitForWorkers(
      router, tls->Client(), (monolithic ? 0 : prefill_workers) + decode_workers, startup));
  tls->DropThrowawayKeys();  // every process is serving: each has read its key

  std::printf("pdserve cluster up (%s):\n", monolithic ? "monolithic" : "disaggregated");
  std::printf("  %-14s %-22s %s\n", "process", "gRPC", "HTTP (/metrics)");
  for (const ProcessGroup::Child& child : group.children()) {
    std::printf("  %-14s %-22s %-22s pid %d\n", child.name.c_str(), child.address.c_str(),
                child.http_address.c_str(), child.pid);
  }
  if (tls->enabled()) {
    std::printf(
        "  TLS: clients verify the cluster with %s (pdserve client|loadgen --tls-ca, "
        "curl --cacert); HTTP is https\n",
        tls->ca().c_str());
    std::printf("PDSERVE_TLS_CA %s\n", tls->ca().c_str());
  } else {
    std::printf("  --insecure: plaintext gRPC and HTTP, no component identities\n");
  }
  std::printf("PDSERVE_READY up %s %s\n", router.c_str(), router_http.c_str());
  std::fflush(stdout);

  absl::Status result = absl::OkStatus();
  while (true) {
    int signal_number = 0;
    sigwait(&signals, &signal_number);
    if (signal_number != SIGCHLD) {
      GetLogger("up")->info("signal {}: stopping the cluster", signal_number);
      break;
    }
    bool core_died = false;
    for (const ProcessGroup::Child& dead : group.Reap()) {
      GetLogger("up")->error("{} (pid {}) exited with {}", dead.name, dead.pid,
                             DescribeWaitStatus(dead.wait_status));
      core_died = core_died || IsCore(dead.name);
    }
    if (core_died) {
      result = absl::UnavailableError("the router or a KV store died; cluster stopped");
      break;
    }
  }
  // Drain in dependency order, each stage within the processes' own budget plus a margin: the
  // router first (it finishes the streams, which need the workers), then the workers, then the
  // KV store (it waits for the workers' pages).
  const absl::Duration budget = absl::Seconds(absl::GetFlag(FLAGS_drain_seconds) + 5);
  using Child = ProcessGroup::Child;
  group.Stop([](const Child& child) { return child.name == "router"; }, budget);
  group.Stop([](const Child& child) { return !IsCore(child.name); }, budget);
  group.StopAll(budget);
  return result;
}

}  // namespace pdserve::cli
