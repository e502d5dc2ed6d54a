// The service processes: `pdserve kvstore|prefill|decode|router`. Each turns its flags into the
// service's options, serves until SIGINT/SIGTERM and drains (services/*). `pdserve up` starts
// them as a cluster (tools/up_command.cc).
#include <filesystem>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

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
#include "tools/flag_struct.h"
#include "tools/role_config.h"

namespace pdserve::cli {
namespace {

absl::StatusOr<absl::Duration> DrainFrom(const ProcessFlags& flags) {
  const double seconds = flags.drain_seconds;
  if (!(seconds >= 0) || seconds > 3600) {
    return absl::InvalidArgumentError(
        absl::StrCat("--drain-seconds ", seconds, " is outside [0, 3600]"));
  }
  return absl::Seconds(seconds);
}

// Where a service listens (gRPC and HTTP), what its /metrics wants and how long it drains.
absl::StatusOr<EndpointOptions> EndpointsFrom(const ProcessFlags& flags) {
  EndpointOptions endpoints;
  endpoints.listen_address = flags.listen;
  endpoints.http_listen_address = flags.http_listen;
  PDSERVE_ASSIGN_OR_RETURN(endpoints.metrics_keys, MetricsKeysFrom(flags));
  PDSERVE_ASSIGN_OR_RETURN(endpoints.drain, DrainFrom(flags));
  return endpoints;
}

absl::StatusOr<std::unique_ptr<UcxTransport>> TransportFrom(const UcxFlags& flags) {
  UcxTransportOptions options;
  options.transports = flags.ucx_tls;
  options.require_shared_memory = flags.require_shm;
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

absl::StatusOr<WorkerModel> LoadWorkerModel(const WorkerFlags& flags, int default_sequences,
                                            bool plain) {
  WorkerModel worker;
  PDSERVE_ASSIGN_OR_RETURN(worker.engine, EngineOptionsFrom(flags.engine));
  // KV pages leave and arrive through host memory, except in a monolithic decode worker.
  worker.engine.host_kv_pages = !plain;
  PDSERVE_ASSIGN_OR_RETURN(CompressionProfile profile, ProfileFrom(flags.profile));
  if (plain && (profile.swiftkv_layer >= 0 || profile.zack || profile.fp8 != KvScaleMode::kNone ||
                profile.kcache.top_n > 0 || !flags.profile.calibration.empty())) {
    return absl::InvalidArgumentError(
        "--monolithic runs the plain model: drop the KV technique flags and --calibration");
  }

  PDSERVE_ASSIGN_OR_RETURN(worker.model, LoadModelFrom(flags.model));
  ApplyAutoWeights(worker.model.weights, flags.engine, worker.engine);
  PDSERVE_ASSIGN_OR_RETURN(
      worker.prepared, PrepareModelFrom(worker.model.weights, profile, flags.profile.calibration,
                                        &worker.calibration_hash));
  const int sequences = flags.max_sequences;
  if (sequences < 0) return absl::InvalidArgumentError("--max-sequences must be ≥ 0");
  worker.engine.max_sequences = sequences == 0 ? default_sequences : sequences;
  worker.engine.max_batch_tokens = std::max(flags.max_batch_tokens, worker.engine.max_sequences);
  worker.engine.max_context = flags.max_context;
  worker.engine.compression = worker.prepared.compression;
  PDSERVE_RETURN_IF_ERROR(worker.engine.Validate());
  return worker;
}

}  // namespace

absl::Status RunKvStoreCommand() {
  BlockShutdownSignals();
  const auto config = FlagsTo<KvStoreConfig>();
  PDSERVE_RETURN_IF_ERROR(SetUpProcessTls(config.process, ComponentRole::kKvStore));
  KvStoreOptions options;
  options.pool_bytes = config.pool_mib << 20;
  options.slot_bytes = config.slot_kib << 10;
  options.default_lease_seconds = config.lease_seconds;
  options.max_lease_seconds = std::max(options.max_lease_seconds, options.default_lease_seconds);
  PDSERVE_ASSIGN_OR_RETURN(options.endpoints, EndpointsFrom(config.process));
  if (!config.fault_tamper_sealed_pages.empty()) {
    options.tamper_sealed_pages = ParsePageTamper(config.fault_tamper_sealed_pages);
    if (!options.tamper_sealed_pages.has_value()) {
      return absl::InvalidArgumentError(absl::StrCat("--fault-tamper-sealed-pages '",
                                                     config.fault_tamper_sealed_pages,
                                                     "' is not checksum, foreign, stale or value"));
    }
  }
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> transport, TransportFrom(config.ucx));
  return RunKvStore(options, *transport);
}

absl::Status RunPrefillCommand() {
  BlockShutdownSignals();
  const auto config = FlagsTo<PrefillConfig>();
  const WorkerFlags& flags = config.worker;
  PDSERVE_RETURN_IF_ERROR(SetUpProcessTls(flags.process, ComponentRole::kPrefill));
  PDSERVE_ASSIGN_OR_RETURN(WorkerModel worker, LoadWorkerModel(flags, 8, /*plain=*/false));
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<UcxTransport> transport, TransportFrom(flags.ucx));
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<Engine> engine,
                           CreateEngine(worker.prepared.weights, worker.engine));
  GetLogger("prefill")->info("engine: {}", DescribeEngine(worker.prepared.weights, *engine));
  PrefillWorkerOptions worker_options;
  worker_options.max_queued_requests = flags.max_queue;
  worker_options.calibration_hash = worker.calibration_hash;
  worker_options.prefix_cache = config.prefix_cache;
  worker_options.model_identity =
      absl::StrFormat("%016x %s", WeightsFingerprint(worker.prepared.weights),
                      DTypeName(worker.engine.weight_dtype));
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<PrefillWorker> prefill,
                           PrefillWorker::Create(std::move(engine), worker_options));
  PrefillServerOptions options;
  PDSERVE_ASSIGN_OR_RETURN(options.endpoints, EndpointsFrom(flags.process));
  options.router_address = flags.router;
  options.calibration_hash = worker.calibration_hash;
  return RunPrefillServer(options, *prefill, *transport);
}

absl::Status RunDecodeCommand() {
  BlockShutdownSignals();
  const auto config = FlagsTo<DecodeConfig>();
  const WorkerFlags& flags = config.worker;
  PDSERVE_RETURN_IF_ERROR(SetUpProcessTls(flags.process, ComponentRole::kDecode));
  const bool monolithic = config.monolithic;
  if (!monolithic && config.kvstore.empty()) {
    return absl::InvalidArgumentError("decode needs --kvstore ADDRESS (or --monolithic)");
  }
  PDSERVE_ASSIGN_OR_RETURN(WorkerModel worker, LoadWorkerModel(flags, 64, monolithic));
  std::unique_ptr<UcxTransport> transport;
  if (!monolithic) {
    PDSERVE_ASSIGN_OR_RETURN(transport, TransportFrom(flags.ucx));
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
  GetLogger(monolithic ? "monolithic" : "decode")
      ->info("engine: {}", DescribeEngine(worker.prepared.weights, *engine));
  DecodeWorkerOptions worker_options;
  worker_options.max_queued_requests = flags.max_queue;
  worker_options.calibration_hash = worker.calibration_hash;
  worker_options.monolithic = monolithic;
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<DecodeWorker> decode,
                           DecodeWorker::Create(std::move(engine), tier, worker_options));
  DecodeServerOptions options;
  PDSERVE_ASSIGN_OR_RETURN(options.endpoints, EndpointsFrom(flags.process));
  options.router_address = flags.router;
  options.kvstore_address = config.kvstore;
  options.calibration_hash = worker.calibration_hash;
  return RunDecodeServer(options, *decode, transport.get());
}

namespace {

// On SIGHUP: the router's keys become --api-key plus --api-key-file as it reads now; on any error
// (an unreadable file, a malformed key, no keys at all) the keys it had stay, and the log says why.
void ReloadApiKeys(const RouterConfig& config, const std::shared_ptr<ApiKeyGate>& gate) {
  auto log = GetLogger("router");
  absl::StatusOr<BearerKeys> keys = BearerKeys::FromFlags(config.api_key, config.api_key_file);
  const size_t count = keys.ok() ? keys->size() : 0;
  absl::Status status =
      !keys.ok()        ? keys.status()
      : gate == nullptr ? absl::FailedPreconditionError("the router was started without API keys")
                        : gate->Reload(*std::move(keys));
  if (status.ok()) {
    log->info("SIGHUP: {} API keys accepted from now on (--api-key-file {})", count,
              config.api_key_file);
  } else {
    log->error("SIGHUP: API keys not reloaded, the previous ones stay: {}",
               std::string(status.message()));
  }
}

}  // namespace

absl::Status RunRouterCommand() {
  const auto config = FlagsTo<RouterConfig>();
  // With a key file, SIGHUP rereads it (ReloadApiKeys) instead of ending the process.
  const bool reload_keys = !config.api_key_file.empty();
  BlockShutdownSignals(/*hangup=*/reload_keys);
  PDSERVE_RETURN_IF_ERROR(SetUpProcessTls(config.process, ComponentRole::kRouter));
  RouterOptions options;
  PDSERVE_ASSIGN_OR_RETURN(options.endpoints, EndpointsFrom(config.process));
  options.model_id = config.served_model_name;
  if (options.model_id.empty()) {
    const std::filesystem::path path(config.model.model);
    options.model_id = path.filename().string();
    if (options.model_id.empty()) {  // "--model dir/"
      options.model_id = path.parent_path().filename().string();
    }
  }
  PDSERVE_ASSIGN_OR_RETURN(LoadedModel model, LoadModelFrom(config.model));
  options.max_context =
      config.max_context > 0 ? config.max_context : model.weights.config.max_seq_len;
  options.vocab_size = model.weights.config.vocab_size;
  options.tokenizer = std::shared_ptr<const Tokenizer>(std::move(model.tokenizer));
  for (absl::string_view address :
       absl::StrSplit(config.prefill_addresses, ',', absl::SkipEmpty())) {
    options.prefill_workers.emplace_back(address);
  }
  for (absl::string_view entry : absl::StrSplit(config.decode_addresses, ',', absl::SkipEmpty())) {
    std::vector<std::string> parts = absl::StrSplit(entry, '@');
    if (parts.size() != 2) {
      return absl::InvalidArgumentError(
          absl::StrCat("--decode-addresses entry '", entry, "' is not decode_addr@kvstore_addr"));
    }
    options.decode_workers.push_back(StaticDecodeWorker{parts[0], parts[1]});
  }
  for (absl::string_view address :
       absl::StrSplit(config.monolithic_addresses, ',', absl::SkipEmpty())) {
    options.monolithic_workers.emplace_back(address);
  }
  options.policy = config.policy;
  options.prefix_index_pages = config.prefix_index_pages;
  options.max_inflight = config.max_inflight;
  options.max_queued = config.max_queued;
  const int64_t queued_mib = config.max_queued_mib;
  if (queued_mib < 0 || queued_mib > (int64_t{1} << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--max-queued-mib ", queued_mib, " is outside [0, 1048576]"));
  }
  options.max_queued_bytes = queued_mib << 20;
  for (auto [name, seconds, field] :
       {std::tuple{"--queue-timeout-seconds", config.queue_timeout_seconds, &options.queue_timeout},
        std::tuple{"--worker-silence-seconds", config.worker_silence_seconds,
                   &options.silence_limit}}) {
    if (!(seconds > 0) || seconds > 86400) {
      return absl::InvalidArgumentError(absl::StrCat(name, " ", seconds, " is outside (0, 86400]"));
    }
    *field = absl::Seconds(seconds);
  }
  options.heartbeat_interval = absl::Milliseconds(config.heartbeat_ms);
  PDSERVE_ASSIGN_OR_RETURN(BearerKeys keys,
                           BearerKeys::FromFlags(config.api_key, config.api_key_file));
  const ApiKeyLimits limits{config.api_key_max_streams, config.api_key_tokens_per_minute};
  PDSERVE_RETURN_IF_ERROR(limits.Validate());
  if (keys.open()) {
    GetLogger("router")->warn(
        "no --api-key or --api-key-file: anyone who reaches the router may use it");
  } else {
    GetLogger("router")->info("{} API keys accepted", keys.size());
    options.api_keys = std::make_shared<ApiKeyGate>(std::move(keys), limits);
  }
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  if (!reload_keys) return RunRouter(options);
  return RunRouter(options, [&config, gate = options.api_keys] { ReloadApiKeys(config, gate); });
}

}  // namespace pdserve::cli
