// The router: pdserve.v1.Router. Generate validates a request, admits it (at once, or after
// waiting in the admission queue; RESOURCE_EXHAUSTED with a "retry-after-ms" trailer only when the
// queue is full), picks a decode worker and then a prefill worker with the scheduling policy,
// runs Prefill (KV into the decode worker's node-local KV store) and then Decode, and relays the
// tokens to the client with text deltas, stop strings and a final message with timings. With only
// monolithic workers registered it sends the prompt straight to one of them.
//
// Every downstream call is a child of the client's call (deadline and cancellation propagate);
// a worker found unreachable is marked dead and the client gets UNAVAILABLE; a decode stream that
// breaks makes the router release the request's pages in the KV store at once. Tokens streaming
// from a worker count as its heartbeat; a poller thread asks every worker for its queue each
// heartbeat interval and logs each change of a worker's health (WorkerRegistry).
//
// Ownership: RouterServer owns the service and its gRPC server. RouterService is thread-safe
// (each Generate runs on its own gRPC thread); it owns a thread that polls every worker.
#ifndef PDSERVE_SERVICES_ROUTER_ROUTER_SERVICE_H_
#define PDSERVE_SERVICES_ROUTER_ROUTER_SERVICE_H_

#include <atomic>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "core/base/mutex.h"
#include "core/metrics/metrics_registry.h"
#include "core/tokenizer/tokenizer.h"
#include "pdserve/v1/decode.grpc.pb.h"
#include "pdserve/v1/prefill.grpc.pb.h"
#include "pdserve/v1/router.grpc.pb.h"
#include "services/common/admission_queue.h"
#include "services/common/endpoint_options.h"
#include "services/common/service_server.h"
#include "services/router/api_key_gate.h"
#include "services/router/prefix_index.h"
#include "services/router/request_validation.h"
#include "services/router/router_metrics.h"
#include "services/router/scheduling_policy.h"
#include "services/router/worker_registry.h"

namespace pdserve {

struct StaticDecodeWorker {
  std::string address;               // its Decode service
  std::string kvstore_grpc_address;  // the KV store on its node
};

struct RouterOptions {
  EndpointOptions endpoints;  // drain: the in-flight streams' budget on SIGTERM
  // The model's tokenizer and limits, for validation and detokenization (no weights needed).
  std::shared_ptr<const Tokenizer> tokenizer;
  int max_context = 0;
  int vocab_size = 0;
  // Workers from flags; the router polls their GetQueue every heartbeat interval.
  std::vector<std::string> prefill_workers;
  std::vector<StaticDecodeWorker> decode_workers;
  std::vector<std::string> monolithic_workers;
  absl::Duration heartbeat_interval = absl::Milliseconds(500);
  absl::Duration silence_limit = absl::Seconds(30);  // WorkerRegistry::Options::silence_limit
  int max_inflight = 256;                            // Generate calls running at once
  // Calls beyond max_inflight wait, in arrival order, up to these bounds and for at most
  // queue_timeout (or the client's deadline, if earlier).
  int max_queued = 4096;
  int64_t max_queued_bytes = int64_t{256} << 20;
  absl::Duration queue_timeout = absl::Seconds(300);
  std::string policy = "least-tokens";  // or "kv-aware", "round-robin" (scheduling_policy.h)
  // kv-aware: the most pages of each KV store's prefix cache the router keeps track of
  // (PrefixIndex); 16-token pages: 65536 pages are a million prompt tokens, ~5 MiB of index.
  int64_t prefix_index_pages = 65536;
  absl::Duration default_deadline = absl::Seconds(600);  // when the client sets none
  std::string model_id = "pdserve";  // the model name the OpenAI-compatible API serves
  // The process's metrics; RouterService::Create makes a registry when this is null.
  std::shared_ptr<MetricsRegistry> metrics;
  // Who may call Generate (gRPC "authorization" metadata, the OpenAI API's Authorization header)
  // and how much; null = anyone, unlimited.
  std::shared_ptr<ApiKeyGate> api_keys;

  // InvalidArgument naming the first bad field.
  absl::Status Validate() const;
};

class RouterService final : public v1::Router::Service {
 public:
  static absl::StatusOr<std::unique_ptr<RouterService>> Create(const RouterOptions& options);
  ~RouterService() override;

  grpc::Status Generate(grpc::ServerContext* context, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override;
  grpc::Status RegisterWorker(grpc::ServerContext* context,
                              const v1::RegisterWorkerRequest* request,
                              v1::RegisterWorkerReply* reply) override;
  grpc::Status Heartbeat(grpc::ServerContext* context, const v1::HeartbeatRequest* request,
                         v1::HeartbeatReply* reply) override;
  grpc::Status ListWorkers(grpc::ServerContext* context, const v1::ListWorkersRequest* request,
                           v1::ListWorkersReply* reply) override;

  WorkerRegistry& registry() { return registry_; }
  // Calls running or queued.
  int inflight() const { return admission_.active() + admission_.queued(); }
  // From now on Generate refuses new requests (Unavailable, retryable elsewhere); those running
  // or queued go on.
  void StartDraining() { draining_.store(true); }
  MetricsRegistry& metrics() { return *metrics_; }

 private:
  struct Call;
  RouterService(const RouterOptions& options, std::unique_ptr<SchedulingPolicy> decode_policy,
                std::unique_ptr<SchedulingPolicy> prefill_policy);

  absl::Status Serve(Call& call, const v1::GenerateRequest& request);
  absl::Status RunDisaggregated(Call& call);
  absl::Status RunMonolithic(Call& call);
  // Streams a Decode call's tokens to the client and writes the final message.
  absl::Status RelayDecode(Call& call, const std::string& address, const v1::DecodeRequest& request,
                           const std::string& kvstore_address);
  absl::Status WriteFinal(Call& call, v1::FinishReason reason, v1::GenerateResponse& last);
  // The client-facing error for a failed downstream call; marks the worker failed when it looks
  // dead.
  absl::Status DownstreamError(Call& call, const char* role, const std::string& address,
                               const grpc::Status& status);
  void CancelKv(const std::string& kvstore_address, uint64_t request_id);
  std::unique_ptr<grpc::ClientContext> DownstreamContext(const Call& call) const;
  // The cached channel to the component of role `peer` at `address`.
  std::shared_ptr<grpc::Channel> Channel(const std::string& address, ComponentRole peer);
  void PollLoop();
  void PollOnce();

  const RouterOptions options_;
  const ValidationLimits limits_;
  // The same policy for each role it chooses from (monolithic workers: the decode one's).
  std::unique_ptr<SchedulingPolicy> decode_policy_;
  std::unique_ptr<SchedulingPolicy> prefill_policy_;
  std::unique_ptr<PrefixIndex> prefix_index_;  // when the policy is prefix_aware
  WorkerRegistry registry_;
  AdmissionQueue admission_;
  std::atomic<bool> draining_{false};
  std::shared_ptr<MetricsRegistry> metrics_;
  RouterMetrics stats_;  // reads registry_ and admission_

  Mutex channels_mu_;
  absl::flat_hash_map<std::pair<std::string, ComponentRole>, std::shared_ptr<grpc::Channel>>
      channels_ ABSL_GUARDED_BY(channels_mu_);

  Mutex poll_mu_;
  bool stopping_ ABSL_GUARDED_BY(poll_mu_) = false;
  CondVar poll_wake_;  // signalled when stopping_ is set
  std::thread poller_;
};

// The router service together with its gRPC server (health + the ready line).
class RouterServer {
 public:
  static absl::StatusOr<std::unique_ptr<RouterServer>> Start(const RouterOptions& options);
  ~RouterServer();

  const std::string& address() const { return server_->address(); }
  RouterService& service() { return *service_; }
  ServiceServer& server() { return *server_; }
  void Shutdown(absl::Duration grace);

 private:
  RouterServer() = default;
  std::unique_ptr<RouterService> service_;  // outlives server_
  std::unique_ptr<ServiceServer> server_;
};

// Starts the router, prints "PDSERVE_READY router <address>", serves until SIGINT/SIGTERM (the
// caller has blocked them with BlockShutdownSignals), then stops gracefully. With `on_hangup` (and
// SIGHUP blocked too) each SIGHUP calls it.
absl::Status RunRouter(const RouterOptions& options, const std::function<void()>& on_hangup = {});

}  // namespace pdserve

#endif  // PDSERVE_SERVICES_ROUTER_ROUTER_SERVICE_H_
