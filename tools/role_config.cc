// The flags of the service roles (tools/role_config.h).
#include "tools/role_config.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "core/base/logging.h"
#include "tools/flag_struct.h"

ABSL_FLAG(std::string, listen, "127.0.0.1:0", "gRPC listen address host:port (port 0 = any)");
ABSL_FLAG(std::string, http_listen, "127.0.0.1:0",
          "HTTP listen address host:port: /metrics, and the OpenAI API on the router");
ABSL_FLAG(double, drain_seconds, 30,
          "On SIGTERM: seconds to finish in-flight work (NOT_SERVING meanwhile) before exiting");
ABSL_FLAG(std::string, served_model_name, "",
          "router: the model name of the OpenAI API; default: the --model file or directory name");
ABSL_FLAG(std::string, router, "", "Router address to register with (workers)");
ABSL_FLAG(std::string, kvstore, "", "The node-local KV store's gRPC address (decode workers)");
ABSL_FLAG(std::string, ucx_tls, "shm,tcp",
          "UCX transports for KV pages, as UCX_TLS; empty = UCX's choice");
ABSL_FLAG(bool, require_shm, false,
          "Refuse KV store connections whose UCX lanes fall back to TCP on the same host");
ABSL_FLAG(int64_t, pool_mib, 256, "kvstore: page pool size in MiB");
ABSL_FLAG(int64_t, slot_kib, 128, "kvstore: bytes per page slot in KiB");
ABSL_FLAG(double, lease_seconds, 10, "kvstore: default page lease in seconds");
ABSL_FLAG(int, max_batch_tokens, 512, "prefill/decode: tokens per forward pass");
ABSL_FLAG(int, max_sequences, 0, "Sequences per engine; 0 = 8 for prefill, 64 for decode");
ABSL_FLAG(int, max_context, 0, "Tokens per sequence; 0 = the model's context");
ABSL_FLAG(int, max_queue, 256, "prefill/decode: queued requests before RESOURCE_EXHAUSTED");
ABSL_FLAG(bool, monolithic, false, "decode: prefill and decode in this process, no compression");
ABSL_FLAG(bool, prefix_cache, true,
          "prefill: reuse the KV pages of prompt prefixes the KV store holds, and publish new "
          "ones (--noprefix_cache: compute every prompt whole)");
ABSL_FLAG(std::string, prefill_addresses, "", "router: static prefill workers, comma separated");
ABSL_FLAG(std::string, decode_addresses, "",
          "router: static decode workers as decode_addr@kvstore_addr, comma separated");
ABSL_FLAG(std::string, monolithic_addresses, "", "router: static monolithic workers");
ABSL_FLAG(std::string, policy, "least-tokens",
          "router: least-tokens (fewest pending tokens), kv-aware (least expected work: the "
          "prompt tokens a decode worker's KV store lacks plus its queue; for a KV store per "
          "node, `up --kvstores`) or round-robin");
ABSL_FLAG(int64_t, prefix_index_pages, 65536,
          "router, --policy kv-aware: the most prompt pages of each KV store's prefix cache it "
          "keeps track of");
ABSL_FLAG(int, max_inflight, 256, "router: requests running at once; more wait in its queue");
ABSL_FLAG(int, max_queued, 4096,
          "router: requests waiting beyond --max-inflight before RESOURCE_EXHAUSTED / 429");
ABSL_FLAG(int64_t, max_queued_mib, 256, "router: request data its queue may hold, in MiB");
ABSL_FLAG(double, queue_timeout_seconds, 300,
          "router: longest wait in its queue (or the client's deadline, if sooner)");
ABSL_FLAG(double, worker_silence_seconds, 30,
          "router: a worker silent this long is dead if another of its role is live");
ABSL_FLAG(int, heartbeat_ms, 500, "router: worker heartbeat interval in milliseconds");
ABSL_FLAG(std::vector<std::string>, api_key, {},
          "router: API keys accepted from clients (comma separated), as 'Authorization: Bearer "
          "KEY' on the OpenAI API and gRPC metadata on Generate; none = anyone may call. client "
          "and loadgen: the key to send. Prefer --api-key-file: flags show in the process list");
ABSL_FLAG(std::string, api_key_file, "",
          "router: a file of accepted API keys, one per line ('#' comments); added to --api-key");
ABSL_FLAG(int, api_key_max_streams, 0,
          "router: requests each API key may have in flight (429 beyond); 0 = unlimited");
ABSL_FLAG(int64_t, api_key_tokens_per_minute, 0,
          "router: prompt + completion tokens each API key may use per minute (429 with "
          "Retry-After while over); 0 = unlimited");
ABSL_FLAG(std::string, fault_tamper_sealed_pages, "",
          "kvstore, fault injection for tests only: damage every sealed page — checksum (a flipped "
          "K byte), foreign (another request in its header), stale (another epoch) or value (a "
          "flipped byte in each V head, the page checksum resealed) — so that decode workers "
          "must refuse them");
ABSL_FLAG(std::string, tls_cert, "",
          "TLS: this process's certificate (PEM), subject common name = its role (router, prefill, "
          "decode, kvstore; operator for clients that administer); with --tls-key and --tls-ca");
ABSL_FLAG(std::string, tls_key, "", "TLS: the private key of --tls-cert (PEM)");
ABSL_FLAG(std::string, tls_ca, "",
          "TLS: the CA certificate(s) (PEM) that peers' certificates must verify under; a client "
          "with only --tls-ca verifies the server and presents no certificate");
ABSL_FLAG(std::string, metrics_token_file, "",
          "A file of tokens (one per line) that GET /metrics must present as 'Authorization: "
          "Bearer TOKEN' (401 otherwise); default: /metrics is open");
ABSL_FLAG(bool, insecure, false,
          "Plaintext gRPC and HTTP, no component identities: anyone who reaches a port is "
          "trusted. Service processes need either this or --tls-cert/--tls-key/--tls-ca");

namespace pdserve::cli {

absl::Status SetUpProcessTls(const ProcessFlags& flags, ComponentRole role) {
  const bool files = !flags.tls_cert.empty() || !flags.tls_key.empty() || !flags.tls_ca.empty();
  if (flags.insecure && files) {
    return absl::InvalidArgumentError("--insecure and --tls-* exclude each other; drop one");
  }
  if (flags.insecure) {
    GetLogger("tls")->warn(
        "--insecure: plaintext gRPC and HTTP without component identities; anyone who can reach "
        "this {}'s ports is trusted",
        ComponentRoleName(role));
    SetProcessTls(Tls::Insecure());
    return absl::OkStatus();
  }
  if (!files) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pdserve ", ComponentRoleName(role),
        " needs --tls-cert, --tls-key and --tls-ca (its certificate's common name '",
        ComponentRoleName(role), "'), or --insecure for plaintext; `pdserve up` makes them"));
  }
  absl::StatusOr<std::shared_ptr<const Tls>> tls = Tls::Load(flags.tls(), role);
  if (!tls.ok()) return tls.status();
  SetProcessTls(*std::move(tls));
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const BearerKeys>> MetricsKeysFrom(const ProcessFlags& flags) {
  if (flags.metrics_token_file.empty()) return nullptr;
  absl::StatusOr<BearerKeys> keys = BearerKeys::FromFlags({}, flags.metrics_token_file);
  if (!keys.ok()) {
    return absl::Status(keys.status().code(),
                        absl::StrCat("--metrics-token-file: ", keys.status().message()));
  }
  return std::make_shared<const BearerKeys>(*std::move(keys));
}

absl::StatusOr<ClientOptions> ClientOptionsFromFlags() {
  ClientOptions options;
  const std::vector<std::string> keys = absl::GetFlag(FLAGS_api_key);
  if (keys.size() > 1) {
    return absl::InvalidArgumentError("a client sends one --api-key, not a list");
  }
  if (!keys.empty()) options.api_key = keys[0];
  options.tls = FlagsTo<ProcessFlags>().tls();
  return options;
}

}  // namespace pdserve::cli
