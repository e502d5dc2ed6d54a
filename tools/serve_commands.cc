// The service processes: `pdserve kvstore|prefill|decode|router`. Each turns its flags into the
// service's options, serves until SIGINT/SIGTERM and drains (services/*). `pdserve up` starts
// them as a cluster (tools/up_command.cc).
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/engine/create_engine.h"
#include "core/formats/model_loader.h"
#include "core/model/model_weights.h"
#include "core/transport/ucx_transport.h"
#include "services/common/shutdown_signal.h"
#include "services/decode/decode_service.h"
#include "services/kvstore/kvstore_service.h"
#include "services/prefill/prefill_service.h"
#include "services/router/router_service.h"
#include "tools/cli_flags.h"
#include "tools/commands.h"
#include "tools/profile_flags.h"

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
ABSL_FLAG(std::string, policy, "least-tokens", "router: least-tokens or round-robin");
ABSL_FLAG(int, max_inflight, 256, "router: requests running at once; more wait in its queue");
ABSL_FLAG(int, max_queued, 4096,
          "router: requests waiting beyond --max-inflight before RESOURCE_EXHAUSTED / 429");
ABSL_FLAG(int64_t, max_queued_mib, 256, "router: request data its queue may hold, in MiB");
ABSL_FLAG(double, queue_timeout_seconds, 300,
          "router: longest wait in its queue (or the client's deadline, if sooner)");
ABSL_FLAG(double, worker_silence_seconds, 30,
          "router: a worker silent this long is dead if another of its role is live");
ABSL_FLAG(int, heartbeat_ms, 500, "router: worker heartbeat interval in milliseconds");

namespace pdserve::cli {
namespace {

absl::StatusOr<absl::Duration> DrainFromFlags() {
  const double seconds = absl::GetFlag(FLAGS_drain_seconds);
  if (!(seconds >= 0) || seconds > 3600) {
    return absl::InvalidArgumentError(
        absl::StrCat("--drain-seconds ", seconds, " is outside [0, 3600]"));
  }
  return absl::Seconds(seconds);
}

absl::StatusOr<std::unique_ptr<UcxTransport>> TransportFromFlags() {
  UcxTransportOptions options;
  options.transports = absl::GetFlag(FLAGS_ucx_tls);
  options.require_shared_memory = absl::GetFlag(FLAGS_require_shm);
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> transport, UcxTransport::Create(options));
  GetLogger("transport")
      ->info("UCX worker up; transports available: {}", transport->available_transports());
  return transport;
}

// The model, its KV techniques and the engine options of a worker.
struct WorkerModel {
  LoadedModel model;
  PreparedModel prepared;
  uint64_t calibration_hash = 0;
  EngineOptions engine;
};

absl::StatusOr<WorkerModel> LoadWorkerModel(int default_sequences, bool plain) {
  WorkerModel worker;
  PDSERVE_ASSIGN_OR_RETURN(worker.engine, EngineOptionsFromFlags());
  // KV pages leave and arrive through host memory, except in a monolithic decode worker.
  worker.engine.host_kv_pages = !plain;
  PDSERVE_ASSIGN_OR_RETURN(CompressionProfile profile, ProfileFromFlags());
  if (plain && (profile.swiftkv_layer >= 0 || profile.zack || profile.fp8 != KvScaleMode::kNone ||
                profile.kcache.top_n > 0 || !absl::GetFlag(FLAGS_calibration).empty())) {
    return absl::InvalidArgumentError(
        "--monolithic runs the plain model: drop the KV technique flags and --calibration");
  }

  PDSERVE_ASSIGN_OR_RETURN(worker.model, LoadModelFromFlags());
  ApplyAutoWeights(worker.model.weights, worker.engine);
  PDSERVE_ASSIGN_OR_RETURN(worker.prepared, PrepareModelFromFlags(worker.model.weights, profile,
                                                                  &worker.calibration_hash));
  const int sequences = absl::GetFlag(FLAGS_max_sequences);
  if (sequences < 0) return absl::InvalidArgumentError("--max-sequences must be ≥ 0");
  worker.engine.max_sequences = sequences == 0 ? default_sequences : sequences;
  worker.engine.max_batch_tokens =
      std::max(absl::GetFlag(FLAGS_max_batch_tokens), worker.engine.max_sequences);
  worker.engine.max_context = absl::GetFlag(FLAGS_max_context);
  worker.engine.compression = worker.prepared.compression;
  PDSERVE_RETURN_IF_ERROR(worker.engine.Validate());
  return worker;
}

}  // namespace

absl::Status RunKvStoreCommand() {
  BlockShutdownSignals();
  KvStoreOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.pool_bytes = absl::GetFlag(FLAGS_pool_mib) << 20;
  options.slot_bytes = absl::GetFlag(FLAGS_slot_kib) << 10;
  options.default_lease_seconds = absl::GetFlag(FLAGS_lease_seconds);
  options.max_lease_seconds = std::max(options.max_lease_seconds, options.default_lease_seconds);
  options.http_listen_address = absl::GetFlag(FLAGS_http_listen);
  PDSERVE_ASSIGN_OR_RETURN(options.drain, DrainFromFlags());
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> transport, TransportFromFlags());
  return RunKvStore(options, *transport);
}

absl::Status RunPrefillCommand() {
  BlockShutdownSignals();
  PDSERVE_ASSIGN_OR_RETURN(WorkerModel worker, LoadWorkerModel(8, /*plain=*/false));
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> transport, TransportFromFlags());
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           CreateEngine(worker.prepared.weights, worker.engine));
  PrefillWorkerOptions worker_options;
  worker_options.max_queued_requests = absl::GetFlag(FLAGS_max_queue);
  worker_options.calibration_hash = worker.calibration_hash;
  worker_options.prefix_cache = absl::GetFlag(FLAGS_prefix_cache);
  worker_options.model_identity =
      absl::StrFormat("%016x %s", WeightsFingerprint(worker.prepared.weights),
                      DTypeName(worker.engine.weight_dtype));
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PrefillWorker> prefill,
                           PrefillWorker::Create(std::move(engine), worker_options));
  PrefillServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.http_listen_address = absl::GetFlag(FLAGS_http_listen);
  PDSERVE_ASSIGN_OR_RETURN(options.drain, DrainFromFlags());
  options.router_address = absl::GetFlag(FLAGS_router);
  options.calibration_hash = worker.calibration_hash;
  return RunPrefillServer(options, *prefill, *transport);
}

absl::Status RunDecodeCommand() {
  BlockShutdownSignals();
  const bool monolithic = absl::GetFlag(FLAGS_monolithic);
  const std::string kvstore = absl::GetFlag(FLAGS_kvstore);
  if (!monolithic && kvstore.empty()) {
    return absl::InvalidArgumentError("decode needs --kvstore ADDRESS (or --monolithic)");
  }
  PDSERVE_ASSIGN_OR_RETURN(WorkerModel worker, LoadWorkerModel(64, monolithic));
  std::unique_ptr<UcxTransport> transport;
  if (!monolithic) {
    PDSERVE_ASSIGN_OR_RETURN(transport, TransportFromFlags());
  }
  // On the CPU, KCache layers keep V in the KV store: the engine's value tier reads it remotely.
  // The GPU engine keeps it in device memory, so whole pages are pulled.
  RemoteValueTier* tier = nullptr;
  if (!monolithic && worker.engine.device == Device::kCpu) {
    worker.engine.value_tier_factory =
        [&tier](
            int page_size, int num_pages,
            std::vector<KvSectionLayout> sections) -> absl::StatusOr<std::unique_ptr<ValueTier>> {
      PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<RemoteValueTier> remote,
                               RemoteValueTier::Create(page_size, num_pages, std::move(sections)));
      tier = remote.get();
      return std::unique_ptr<ValueTier>(std::move(remote));
    };
  }
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           CreateEngine(worker.prepared.weights, worker.engine));
  DecodeWorkerOptions worker_options;
  worker_options.max_queued_requests = absl::GetFlag(FLAGS_max_queue);
  worker_options.calibration_hash = worker.calibration_hash;
  worker_options.monolithic = monolithic;
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<DecodeWorker> decode,
                           DecodeWorker::Create(std::move(engine), tier, worker_options));
  DecodeServerOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.http_listen_address = absl::GetFlag(FLAGS_http_listen);
  PDSERVE_ASSIGN_OR_RETURN(options.drain, DrainFromFlags());
  options.router_address = absl::GetFlag(FLAGS_router);
  options.kvstore_address = kvstore;
  options.calibration_hash = worker.calibration_hash;
  return RunDecodeServer(options, *decode, transport.get());
}

absl::Status RunRouterCommand() {
  BlockShutdownSignals();
  RouterOptions options;
  options.listen_address = absl::GetFlag(FLAGS_listen);
  options.http_listen_address = absl::GetFlag(FLAGS_http_listen);
  PDSERVE_ASSIGN_OR_RETURN(options.shutdown_grace, DrainFromFlags());
  options.model_id = absl::GetFlag(FLAGS_served_model_name);
  if (options.model_id.empty()) {
    options.model_id = std::filesystem::path(absl::GetFlag(FLAGS_model)).filename().string();
    if (options.model_id.empty()) {  // "--model dir/"
      options.model_id =
          std::filesystem::path(absl::GetFlag(FLAGS_model)).parent_path().filename().string();
    }
  }
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFromFlags());
  options.max_context = absl::GetFlag(FLAGS_max_context) > 0 ? absl::GetFlag(FLAGS_max_context)
                                                             : model.weights.config.max_seq_len;
  options.vocab_size = model.weights.config.vocab_size;
  options.tokenizer = std::shared_ptr<const Tokenizer>(std::move(model.tokenizer));
  for (absl::string_view address :
       absl::StrSplit(absl::GetFlag(FLAGS_prefill_addresses), ',', absl::SkipEmpty())) {
    options.prefill_workers.emplace_back(address);
  }
  for (absl::string_view entry :
       absl::StrSplit(absl::GetFlag(FLAGS_decode_addresses), ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(entry, '@');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--decode-addresses entry '", entry, "' is not decode_addr@kvstore_addr"));
    }
    options.decode_workers.push_back(StaticDecodeWorker{parts[0], parts[1]});
  }
  for (absl::string_view address :
       absl::StrSplit(absl::GetFlag(FLAGS_monolithic_addresses), ',', absl::SkipEmpty())) {
    options.monolithic_workers.emplace_back(address);
  }
  options.policy = absl::GetFlag(FLAGS_policy);
  options.max_inflight = absl::GetFlag(FLAGS_max_inflight);
  options.max_queued = absl::GetFlag(FLAGS_max_queued);
  const int64_t queued_mib = absl::GetFlag(FLAGS_max_queued_mib);
  if (queued_mib < 0 || queued_mib > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-queued-mib ", queued_mib, " is outside [0, 1048576]"));
  }
  options.max_queued_bytes = queued_mib << 20;
  for (auto [name, seconds, field] :
       {std::tuple{"--queue-timeout-seconds", absl::GetFlag(FLAGS_queue_timeout_seconds),
                   &options.queue_timeout},
        std::tuple{"--worker-silence-seconds", absl::GetFlag(FLAGS_worker_silence_seconds),
                   &options.silence_limit}}) {
    if (!(seconds > 0) || seconds > 86400) {
      return absl::InvalidArgumentError(absl::StrCat(name, " ", seconds, " is outside (0, 86400]"));
    }
    *field = absl::Seconds(seconds);
  }
  options.heartbeat_interval = absl::Milliseconds(absl::GetFlag(FLAGS_heartbeat_ms));
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  return RunRouter(options);
}

}  // namespace pdserve::cli
