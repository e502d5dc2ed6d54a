// The configuration of each service role — router, kvstore, prefill, decode — as flag structs
// (tools/flag_struct.h). A role's command reads its flags only through its struct, and `pdserve
// up` starts each process with FlagArgs of the same struct, so every flag a role takes reaches it.
// The flags themselves are defined in role_config.cc.
#ifndef PDSERVE_TOOLS_ROLE_CONFIG_H_
#define PDSERVE_TOOLS_ROLE_CONFIG_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "client/pdserve_client.h"
#include "core/rpc/tls.h"
#include "services/common/bearer_keys.h"
#include "tools/cli_flags.h"
#include "tools/profile_flags.h"

namespace pdserve::cli {

// What every service process takes: where it listens, its TLS identity, how it stops and logs.
struct ProcessFlags {
  std::string listen;
  std::string http_listen;
  double drain_seconds = 0;
  std::string log_level;
  std::string tls_cert;
  std::string tls_key;
  std::string tls_ca;
  bool insecure = false;
  std::string metrics_token_file;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    visit("listen", listen);
    visit("http_listen", http_listen);
    visit("drain_seconds", drain_seconds);
    visit("log_level", log_level);
    visit("tls_cert", tls_cert);
    visit("tls_key", tls_key);
    visit("tls_ca", tls_ca);
    visit("insecure", insecure);
    visit("metrics_token_file", metrics_token_file);
  }

  TlsFiles tls() const { return {tls_cert, tls_key, tls_ca}; }
};

// Sets the process's TLS identity (core/rpc/tls.h) for a process of `role` from `flags`: the
// certificate, key and CA (the certificate's common name must be the role), or plaintext with
// --insecure (logged as a warning). InvalidArgument when neither or both are given, or when the
// files do not load.
absl::Status SetUpProcessTls(const ProcessFlags& flags, ComponentRole role);

// The tokens --metrics-token-file names (GET /metrics then wants one); null without it.
absl::StatusOr<std::shared_ptr<const BearerKeys>> MetricsKeysFrom(const ProcessFlags& flags);

// A client's options (pdserve client, loadgen): --api-key's one key (InvalidArgument for a list),
// and --tls-ca (with --tls-cert and --tls-key for an operator's certificate) when given.
absl::StatusOr<ClientOptions> ClientOptionsFromFlags();

// The UCX transport of KV pages (kvstore, prefill, decode).
struct UcxFlags {
  std::string ucx_tls;
  bool require_shm = false;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    visit("ucx_tls", ucx_tls);
    visit("require_shm", require_shm);
  }
};

struct RouterConfig {
  ProcessFlags process;
  ModelFlags model;
  int max_context = 0;
  std::string served_model_name;
  std::string prefill_addresses;
  std::string decode_addresses;
  std::string monolithic_addresses;
  std::string policy;
  int64_t prefix_index_pages = 0;
  int max_inflight = 0;
  int max_queued = 0;
  int64_t max_queued_mib = 0;
  double queue_timeout_seconds = 0;
  double worker_silence_seconds = 0;
  int heartbeat_ms = 0;
  std::vector<std::string> api_key;
  std::string api_key_file;
  int api_key_max_streams = 0;
  int64_t api_key_tokens_per_minute = 0;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    process.VisitFlags(visit);
    model.VisitFlags(visit);
    visit("max_context", max_context);
    visit("served_model_name", served_model_name);
    visit("prefill_addresses", prefill_addresses);
    visit("decode_addresses", decode_addresses);
    visit("monolithic_addresses", monolithic_addresses);
    visit("policy", policy);
    visit("prefix_index_pages", prefix_index_pages);
    visit("max_inflight", max_inflight);
    visit("max_queued", max_queued);
    visit("max_queued_mib", max_queued_mib);
    visit("queue_timeout_seconds", queue_timeout_seconds);
    visit("worker_silence_seconds", worker_silence_seconds);
    visit("heartbeat_ms", heartbeat_ms);
    visit("api_key", api_key);
    visit("api_key_file", api_key_file);
    visit("api_key_max_streams", api_key_max_streams);
    visit("api_key_tokens_per_minute", api_key_tokens_per_minute);
  }
};

struct KvStoreConfig {
  ProcessFlags process;
  UcxFlags ucx;
  int64_t pool_mib = 0;
  int64_t slot_kib = 0;
  double lease_seconds = 0;
  std::string fault_tamper_sealed_pages;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    process.VisitFlags(visit);
    ucx.VisitFlags(visit);
    visit("pool_mib", pool_mib);
    visit("slot_kib", slot_kib);
    visit("lease_seconds", lease_seconds);
    visit("fault_tamper_sealed_pages", fault_tamper_sealed_pages);
  }
};

// What prefill and decode workers share: the model, its engine and KV techniques, the router.
struct WorkerFlags {
  ProcessFlags process;
  ModelFlags model;
  EngineFlags engine;
  ProfileFlags profile;
  UcxFlags ucx;
  std::string router;
  int max_batch_tokens = 0;
  int max_sequences = 0;
  int max_context = 0;
  int max_queue = 0;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    process.VisitFlags(visit);
    model.VisitFlags(visit);
    engine.VisitFlags(visit);
    profile.VisitFlags(visit);
    ucx.VisitFlags(visit);
    visit("router", router);
    visit("max_batch_tokens", max_batch_tokens);
    visit("max_sequences", max_sequences);
    visit("max_context", max_context);
    visit("max_queue", max_queue);
  }
};

struct PrefillConfig {
  WorkerFlags worker;
  bool prefix_cache = true;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    worker.VisitFlags(visit);
    visit("prefix_cache", prefix_cache);
  }
};

struct DecodeConfig {
  WorkerFlags worker;
  std::string kvstore;
  bool monolithic = false;

  template <typename Visitor>
  void VisitFlags(Visitor&& visit) {
    worker.VisitFlags(visit);
    visit("kvstore", kvstore);
    visit("monolithic", monolithic);
  }
};

}  // namespace pdserve::cli

#endif  // PDSERVE_TOOLS_ROLE_CONFIG_H_
