#include "services/router/router_service.h"

#include <algorithm>
#include <random>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/rpc/tls.h"
#include "pdserve/v1/kvstore.grpc.pb.h"
#include "proto/retry_hint.h"
#include "services/common/grpc_status.h"
#include "services/common/shutdown_signal.h"
#include "services/router/openai_api.h"
#include "services/router/output_text.h"

namespace pdserve {
namespace {

std::shared_ptr<spdlog::logger> Log() {
  static const auto* logger = new std::shared_ptr<spdlog::logger>(GetLogger("router"));
  return *logger;
}

uint64_t RandomRequestId() {
  thread_local std::mt19937_64 rng(std::random_device{}());
  uint64_t id = 0;
  while (id == 0) id = rng();
  return id;
}

WorkerLoad LoadFromProto(const v1::QueueStatus& q) {
  WorkerLoad load;
  load.queued_requests = q.queued_requests();
  load.queued_tokens = q.queued_tokens();
  load.running_requests = q.running_requests();
  return load;
}

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

const v1::GetQueueRequest kEmptyQueueRequest;

}  // namespace

// One Generate call's state.
struct RouterService::Call {
  grpc::ServerContext* server_context = nullptr;
  grpc::ServerWriter<v1::GenerateResponse>* writer = nullptr;
  ValidatedRequest request;
  std::string request_id;  // the client's, or the hex of `id`
  uint64_t id = 0;         // the internal request id (KV store allocations)
  absl::Time arrival;
  v1::Timings timings;
  absl::Time first_token_time = absl::InfiniteFuture();
  absl::Time last_token_time = absl::InfiniteFuture();
  int completion_tokens = 0;
  std::string prefill_worker;
  std::string decode_worker;
  bool monolithic = false;
};

absl::Status RouterOptions::Validate() const {
  if (tokenizer == nullptr) return absl::InvalidArgumentError("router: no tokenizer");
  if (max_context < 2) {
    return absl::InvalidArgumentError(absl::StrCat("router: max_context ", max_context, " < 2"));
  }
  if (vocab_size < 1) return absl::InvalidArgumentError("router: vocab_size < 1");
  if (heartbeat_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("router: heartbeat interval must be positive");
  }
  if (max_inflight < 1) return absl::InvalidArgumentError("router: max_inflight < 1");
  if (max_queued < 0) return absl::InvalidArgumentError("router: max_queued < 0");
  if (max_queued_bytes < 0) return absl::InvalidArgumentError("router: max_queued_bytes < 0");
  if (queue_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("router: queue timeout must be positive");
  }
  if (silence_limit <= heartbeat_interval) {
    return absl::InvalidArgumentError("router: silence limit must exceed the heartbeat interval");
  }
  if (default_deadline <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("router: default deadline must be positive");
  }
  if (prefix_index_pages < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("router: --prefix-index-pages ", prefix_index_pages, " < 1"));
  }
  for (const StaticDecodeWorker& d : decode_workers) {
    if (d.address.empty() || d.kvstore_grpc_address.empty()) {
      return absl::InvalidArgumentError(
          "router: every static decode worker needs an address and a kvstore address");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<RouterService>> RouterService::Create(const RouterOptions& options) {
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  // One policy per role that is chosen from: each keeps its own round-robin cursor, so that ties
  // among decode workers rotate however many prefill choices come between.
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<SchedulingPolicy> decode,
                           MakeSchedulingPolicy(options.policy));
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<SchedulingPolicy> prefill,
                           MakeSchedulingPolicy(options.policy));
  return std::unique_ptr<RouterService>(
      new RouterService(options, std::move(decode), std::move(prefill)));
}

RouterService::RouterService(const RouterOptions& options,
                             std::unique_ptr<SchedulingPolicy> decode_policy,
                             std::unique_ptr<SchedulingPolicy> prefill_policy)
    : options_(options),
      limits_{options.tokenizer.get(), options.max_context, options.vocab_size},
      decode_policy_(std::move(decode_policy)),
      prefill_policy_(std::move(prefill_policy)),
      prefix_index_(decode_policy_->prefix_aware()
                        ? std::make_unique<PrefixIndex>(options.prefix_index_pages)
                        : nullptr),
      registry_(
          WorkerRegistry::Options{options.heartbeat_interval, 3, options.silence_limit, nullptr}),
      admission_(AdmissionQueue::Options{.name = "router",
                                         .max_active = options.max_inflight,
                                         .max_queued = options.max_queued,
                                         .max_queued_bytes = options.max_queued_bytes}),
      metrics_(options.metrics != nullptr ? options.metrics : std::make_shared<MetricsRegistry>()),
      stats_(*metrics_, registry_, admission_) {
  metrics_->AddGauge("pdserve_model_info", "The model this router serves; always 1")
      .Add({{"model", options.model_id}})
      .Set(1);
  for (const std::string& a : options_.prefill_workers) {
    registry_.AddStatic(WorkerRole::kPrefill, a, "");
  }
  for (const StaticDecodeWorker& d : options_.decode_workers) {
    registry_.AddStatic(WorkerRole::kDecode, d.address, d.kvstore_grpc_address);
  }
  for (const std::string& a : options_.monolithic_workers) {
    registry_.AddStatic(WorkerRole::kMonolithic, a, "");
  }
  poller_ = std::thread([this] { PollLoop(); });
}

RouterService::~RouterService() {
  {
    MutexLock lock(&poll_mu_);
    stopping_ = true;
    poll_wake_.SignalAll();
  }
  poller_.join();
}

std::shared_ptr<grpc::Channel> RouterService::Channel(const std::string& address,
                                                      ComponentRole peer) {
  MutexLock lock(&channels_mu_);
  std::shared_ptr<grpc::Channel>& channel = channels_[{address, peer}];
  if (channel == nullptr) channel = MakeInternalChannel(address, peer);
  return channel;
}

std::unique_ptr<grpc::ClientContext> RouterService::DownstreamContext(const Call& call) const {
  // A child of the client's call: its deadline (the earlier of the client's and ours) and its
  // cancellation reach the worker.
  std::unique_ptr<grpc::ClientContext> context =
      grpc::ClientContext::FromServerContext(*call.server_context);
  context->set_deadline(absl::ToChronoTime(absl::Now() + options_.default_deadline));
  context->set_wait_for_ready(false);
  return context;
}

namespace {

// The call's "authorization" metadata ("" without one).
std::string_view Authorization(const grpc::ServerContext& context) {
  const auto& metadata = context.client_metadata();
  const auto authorization = metadata.find("authorization");
  if (authorization == metadata.end()) return {};
  return std::string_view(authorization->second.data(), authorization->second.size());
}

}  // namespace

grpc::Status RouterService::Generate(grpc::ServerContext* context,
                                     const v1::GenerateRequest* request,
                                     grpc::ServerWriter<v1::GenerateResponse>* writer) {
  Call call;
  call.arrival = absl::Now();
  call.server_context = context;
  call.writer = writer;
  const absl::Status status = Serve(call, *request);
  stats_.RecordOutcome(status);
  if (std::optional<absl::Duration> retry = RetryHint(status)) {
    context->AddTrailingMetadata(kRetryAfterMsTrailer, FormatRetryAfterMs(*retry));
  }
  return ToGrpcStatus(status);
}

absl::Status RouterService::Serve(Call& call, const v1::GenerateRequest& request) {
  if (draining_.load()) {
    return absl::UnavailableError("router is draining: it takes no new requests");
  }
  ApiKeyGate::Ticket key;
  if (options_.api_keys != nullptr) {
    PDSERVE_ASSIGN_OR_RETURN(
        key, options_.api_keys->Admit(Authorization(*call.server_context), call.arrival));
  }
  PDSERVE_ASSIGN_OR_RETURN(call.request, ValidateGenerateRequest(request, limits_));
  // The key pays for what the request used, however it ends.
  absl::Cleanup charge = [&] {
    key.Charge(static_cast<int64_t>(call.request.prompt.size()) + call.completion_tokens,
               absl::Now());
  };

  // What a queued call holds: its validated prompt and stop strings, and the request message.
  int64_t bytes =
      static_cast<int64_t>(request.ByteSizeLong() + call.request.prompt.size() * sizeof(int32_t));
  for (const std::string& stop : call.request.stop_strings) bytes += stop.size();
  const absl::Time client_deadline = absl::FromChrono(call.server_context->deadline());
  PDSERVE_ASSIGN_OR_RETURN(
      AdmissionQueue::Ticket ticket,
      admission_.Admit(bytes, std::min(client_deadline, call.arrival + options_.queue_timeout),
                       [&call] { return call.server_context->IsCancelled(); }));
  stats_.RecordAdmissionWait(ticket.waited());
  call.id = RandomRequestId();
  call.request_id =
      request.request_id().empty() ? absl::StrFormat("%016x", call.id) : request.request_id();

  const bool monolithic = registry_.Count(WorkerRole::kMonolithic) > 0 &&
                          registry_.Count(WorkerRole::kPrefill) == 0 &&
                          registry_.Count(WorkerRole::kDecode) == 0;
  call.monolithic = monolithic;
  absl::Status status = monolithic ? RunMonolithic(call) : RunDisaggregated(call);
  if (!status.ok()) {
    Log()->info("request {} (id {:016x}) failed: {}", call.request_id, call.id, status.ToString());
  }
  return status;
}

absl::Status RouterService::RunDisaggregated(Call& call) {
  const ValidatedRequest& r = call.request;
  // The decode worker decides the KV store, and so what of the prompt its prefix cache holds;
  // the prefill worker is charged the tokens it is then expected to compute.
  const absl::flat_hash_map<std::string, int64_t> cached =
      prefix_index_ != nullptr ? prefix_index_->CachedTokens(r.prompt)
                               : absl::flat_hash_map<std::string, int64_t>();
  PDSERVE_ASSIGN_OR_RETURN(
      WorkerAssignment decode,
      registry_.Acquire(WorkerRole::kDecode, *decode_policy_, r.max_tokens, &cached));
  absl::Cleanup release_decode = [&] { registry_.Release(decode); };
  const auto expected = cached.find(decode.kvstore_grpc_address);
  const int64_t expected_cached = expected == cached.end() ? 0 : expected->second;
  PDSERVE_ASSIGN_OR_RETURN(
      WorkerAssignment prefill,
      registry_.Acquire(WorkerRole::kPrefill, *prefill_policy_,
                        static_cast<int64_t>(r.prompt.size()) - expected_cached));
  call.prefill_worker = prefill.address;
  call.decode_worker = decode.address;

  v1::PrefillRequest prefill_request;
  prefill_request.set_request_id(call.id);
  prefill_request.mutable_prompt()->Add(r.prompt.begin(), r.prompt.end());
  v1::SamplingParams sampling;
  sampling.set_temperature(r.sampling.temperature);
  sampling.set_top_p(r.sampling.top_p);
  sampling.set_top_k(r.sampling.top_k);
  sampling.set_seed(r.sampling.seed);
  *prefill_request.mutable_sampling() = sampling;
  prefill_request.set_kvstore_grpc_address(decode.kvstore_grpc_address);

  v1::PrefillReply prefill_reply;
  const absl::Time prefill_start = absl::Now();
  grpc::Status prefill_status;
  {
    std::unique_ptr<grpc::ClientContext> context = DownstreamContext(call);
    prefill_status = v1::Prefill::NewStub(Channel(prefill.address, ComponentRole::kPrefill))
                         ->Prefill(context.get(), prefill_request, &prefill_reply);
  }
  registry_.Release(prefill);
  if (!prefill_status.ok()) {
    absl::Status error = DownstreamError(call, "prefill", prefill.address, prefill_status);
    CancelKv(decode.kvstore_grpc_address, call.id);  // pages a dying prefill may have left
    return error;
  }
  registry_.NoteProgress(prefill.address);
  call.timings.set_queue_seconds(Seconds(prefill_start - call.arrival) +
                                 prefill_reply.queue_seconds());
  call.timings.set_prefill_seconds(prefill_reply.compute_seconds());
  call.timings.set_cached_prompt_tokens(prefill_reply.cached_tokens());
  call.timings.set_transfer_seconds(prefill_reply.transfer_seconds());
  stats_.RecordCachedPromptTokens(expected_cached, prefill_reply.cached_tokens());
  if (prefix_index_ != nullptr) {  // keyed by the store address Acquire looks candidates up by
    prefix_index_->Record(decode.kvstore_grpc_address, prefill_reply.manifest().kvstore_instance(),
                          prefill_reply.page_tokens(), r.prompt, prefill_reply.published_tokens());
  }

  v1::DecodeRequest decode_request;
  decode_request.set_request_id(call.id);
  *decode_request.mutable_sampling() = sampling;
  decode_request.set_max_tokens(r.max_tokens);
  decode_request.mutable_stop()->mutable_stop_token_ids()->Add(r.stop_token_ids.begin(),
                                                               r.stop_token_ids.end());
  decode_request.mutable_stop()->set_ignore_eos(r.ignore_eos);
  *decode_request.mutable_manifest() = prefill_reply.manifest();
  decode_request.set_first_token(prefill_reply.first_token());
  const std::string kvstore = prefill_reply.manifest().kvstore_grpc_address().empty()
                                  ? decode.kvstore_grpc_address
                                  : prefill_reply.manifest().kvstore_grpc_address();
  return RelayDecode(call, decode.address, decode_request, kvstore);
}

absl::Status RouterService::RunMonolithic(Call& call) {
  const ValidatedRequest& r = call.request;
  PDSERVE_ASSIGN_OR_RETURN(WorkerAssignment worker,
                           registry_.Acquire(WorkerRole::kMonolithic, *decode_policy_,
                                             static_cast<int64_t>(r.prompt.size()) + r.max_tokens));
  absl::Cleanup release = [&] { registry_.Release(worker); };
  call.prefill_worker = worker.address;
  call.decode_worker = worker.address;
  v1::DecodeRequest request;
  request.set_request_id(call.id);
  request.mutable_sampling()->set_temperature(r.sampling.temperature);
  request.mutable_sampling()->set_top_p(r.sampling.top_p);
  request.mutable_sampling()->set_top_k(r.sampling.top_k);
  request.mutable_sampling()->set_seed(r.sampling.seed);
  request.set_max_tokens(r.max_tokens);
  request.mutable_stop()->mutable_stop_token_ids()->Add(r.stop_token_ids.begin(),
                                                        r.stop_token_ids.end());
  request.mutable_stop()->set_ignore_eos(r.ignore_eos);
  request.mutable_prompt()->Add(r.prompt.begin(), r.prompt.end());
  return RelayDecode(call, worker.address, request, /*kvstore_address=*/"");
}

absl::Status RouterService::RelayDecode(Call& call, const std::string& address,
                                        const v1::DecodeRequest& request,
                                        const std::string& kvstore_address) {
  std::unique_ptr<grpc::ClientContext> context = DownstreamContext(call);
  std::unique_ptr<grpc::ClientReader<v1::DecodeResponse>> reader =
      v1::Decode::NewStub(Channel(address, ComponentRole::kDecode))->Decode(context.get(), request);
  OutputText text(*options_.tokenizer, call.request.prompt.back(), call.request.stop_strings);
  v1::DecodeResponse response;
  v1::GenerateResponse out;
  bool first = true, done = false, stopped = false, client_gone = false;
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  absl::Time progress_noted = absl::InfinitePast();
  while (!stopped && !client_gone && reader->Read(&response)) {
    const absl::Time read_at = absl::Now();
    if (read_at - progress_noted >= options_.heartbeat_interval / 2) {
      registry_.NoteProgress(address);  // tokens streaming: the worker is alive
      progress_noted = read_at;
    }
    if (first) {
      first = false;
      call.timings.set_transfer_seconds(call.timings.transfer_seconds() +
                                        response.transfer_seconds());
      if (call.monolithic) {
        call.timings.set_prefill_seconds(response.prefill_seconds());
        call.timings.set_queue_seconds(
            std::max(0.0, Seconds(absl::Now() - call.arrival) - response.prefill_seconds()));
      }
    }
    out.Clear();
    for (int id : response.tokens()) {
      OutputText::Step step = text.Push(id);
      v1::GenerateResponse::Token* token = out.add_tokens();
      token->set_id(id);
      token->set_text(std::move(step.text));
      token->set_index(call.completion_tokens++);
      if (step.stopped) {
        stopped = true;
        break;
      }
    }
    if (response.done() && !stopped) {
      done = true;
      reason = response.finish_reason();
      OutputText::Step rest = text.Flush();
      stopped = rest.stopped;
      if (!rest.text.empty()) {
        if (out.tokens_size() == 0) {  // text-only entry: no token left to carry it
          out.add_tokens()->set_id(-1);
          out.mutable_tokens(0)->set_index(-1);
        }
        out.mutable_tokens(out.tokens_size() - 1)->mutable_text()->append(rest.text);
      }
      break;  // the final message goes out below, after Finish
    }
    if (out.tokens_size() > 0) {
      if (!call.writer->Write(out)) {
        client_gone = true;
        break;
      }
      out.Clear();
      const absl::Time now = absl::Now();
      if (call.first_token_time == absl::InfiniteFuture()) {
        call.first_token_time = now;
      } else {
        stats_.RecordTokenGap(now - call.last_token_time);
      }
      call.last_token_time = now;
    }
  }
  // Cancel only a stream we leave early; one the worker ended carries its own status.
  if (stopped || client_gone) context->TryCancel();
  if (done && !stopped) {
    while (reader->Read(&response)) {
    }
  }
  const grpc::Status status = reader->Finish();
  if (client_gone || call.server_context->IsCancelled()) {
    return absl::CancelledError("cancelled by the client");
  }
  if (stopped) return WriteFinal(call, v1::FINISH_REASON_STOP_STRING, out);
  if (!status.ok() || !done) {
    absl::Status error =
        !status.ok() ? DownstreamError(call, "decode", address, status)
                     : absl::InternalError(absl::StrCat(
                           "decode worker ", address, " ended the stream without a final message"));
    CancelKv(kvstore_address, call.id);
    return error;
  }
  return WriteFinal(call, reason, out);
}

absl::Status RouterService::WriteFinal(Call& call, v1::FinishReason reason,
                                       v1::GenerateResponse& last) {
  const absl::Time now = absl::Now();
  if (last.tokens_size() > 0) {
    if (call.first_token_time == absl::InfiniteFuture()) {
      call.first_token_time = now;
    } else {
      stats_.RecordTokenGap(now - call.last_token_time);
    }
    call.last_token_time = now;
  }
  if (call.first_token_time == absl::InfiniteFuture()) {
    call.first_token_time = call.last_token_time = now;
  }
  v1::Timings& t = call.timings;
  t.set_first_token_seconds(Seconds(call.first_token_time - call.arrival));
  t.set_decode_seconds(Seconds(call.last_token_time - call.first_token_time));
  t.set_total_seconds(Seconds(now - call.arrival));
  v1::GenerateResponse::Final* final = last.mutable_final();
  final->set_finish_reason(reason);
  final->set_prompt_tokens(static_cast<int>(call.request.prompt.size()));
  final->set_completion_tokens(call.completion_tokens);
  *final->mutable_timings() = t;
  final->set_request_id(call.request_id);
  final->set_prefill_worker(call.prefill_worker);
  final->set_decode_worker(call.decode_worker);
  if (!call.writer->Write(last)) return absl::CancelledError("cancelled by the client");
  stats_.RecordLatencies(call.first_token_time - call.arrival, call.last_token_time - call.arrival,
                         now - call.arrival, call.completion_tokens,
                         static_cast<int>(call.request.prompt.size()));
  return absl::OkStatus();
}

absl::Status RouterService::DownstreamError(Call& call, const char* role,
                                            const std::string& address,
                                            const grpc::Status& status) {
  if (call.server_context->IsCancelled()) return absl::CancelledError("cancelled by the client");
  const std::string what = absl::StrCat(role, " worker ", address);
  switch (status.error_code()) {
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::CANCELLED:  // not by the client, so by the worker going away
      registry_.MarkFailed(address, status.error_message());
      Log()->warn("{} failed, marked dead: {}", what, status.error_message());
      return absl::UnavailableError(absl::StrCat(what, " failed: ", status.error_message()));
    case grpc::StatusCode::DATA_LOSS:
      // A KV page of this request failed the decode worker's verification: the request fails,
      // retryably (a new attempt writes new pages); the worker is fine.
      return absl::UnavailableError(absl::StrCat(what, ": ", status.error_message()));
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return absl::DeadlineExceededError(
          absl::StrCat("deadline exceeded waiting for ", what, ": ", status.error_message()));
    default:
      return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                          absl::StrCat(what, ": ", status.error_message()));
  }
}

void RouterService::CancelKv(const std::string& kvstore_address, uint64_t request_id) {
  if (kvstore_address.empty()) return;
  grpc::ClientContext context;
  context.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
  v1::CancelRequestRequest request;
  request.set_request_id(request_id);
  v1::CancelRequestReply reply;
  grpc::Status status = v1::KvStore::NewStub(Channel(kvstore_address, ComponentRole::kKvStore))
                            ->CancelRequest(&context, request, &reply);
  if (!status.ok()) {
    Log()->warn("kvstore {}: CancelRequest({:016x}) failed: {}", kvstore_address, request_id,
                status.error_message());
  }
}

grpc::Status RouterService::RegisterWorker(grpc::ServerContext* context,
                                           const v1::RegisterWorkerRequest* request,
                                           v1::RegisterWorkerReply* reply) {
  const v1::WorkerRole role = request->role();
  if (role != v1::WORKER_ROLE_PREFILL && role != v1::WORKER_ROLE_DECODE &&
      role != v1::WORKER_ROLE_MONOLITHIC) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "RegisterWorker: role is unset");
  }
  // A worker registers as the role its certificate names (monolithic workers are decode workers).
  if (grpc::Status s = RequirePeerRole(
          *context,
          {role == v1::WORKER_ROLE_PREFILL ? ComponentRole::kPrefill : ComponentRole::kDecode});
      !s.ok()) {
    return s;
  }
  if (request->address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "RegisterWorker: empty address");
  }
  if (role == v1::WORKER_ROLE_DECODE && request->kvstore_grpc_address().empty()) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                        "RegisterWorker: a decode worker must name its kvstore_grpc_address");
  }
  registry_.Register(static_cast<WorkerRole>(role), request->address(),
                     LoadFromProto(request->queue()), request->calibration_hash(),
                     request->kvstore_grpc_address());
  Log()->info("registered {} worker {}", WorkerRoleName(static_cast<WorkerRole>(role)),
              request->address());
  reply->set_heartbeat_interval_seconds(Seconds(options_.heartbeat_interval));
  return grpc::Status::OK;
}

grpc::Status RouterService::Heartbeat(grpc::ServerContext* context,
                                      const v1::HeartbeatRequest* request,
                                      v1::HeartbeatReply* reply) {
  if (grpc::Status s = RequirePeerRole(*context, {ComponentRole::kPrefill, ComponentRole::kDecode});
      !s.ok()) {
    return s;
  }
  reply->set_known(registry_.Heartbeat(request->address(), LoadFromProto(request->queue())));
  return grpc::Status::OK;
}

grpc::Status RouterService::ListWorkers(grpc::ServerContext* context,
                                        const v1::ListWorkersRequest* /*request*/,
                                        v1::ListWorkersReply* reply) {
  // Components (by certificate) and API clients (by key) may look.
  if (options_.api_keys != nullptr && !PeerIsComponent(*context)) {
    const absl::Status status = options_.api_keys->Authenticate(Authorization(*context));
    if (!status.ok()) return ToGrpcStatus(status);
  }
  for (const WorkerSnapshot& s : registry_.List()) {
    v1::WorkerInfo* info = reply->add_workers();
    info->set_role(static_cast<v1::WorkerRole>(s.role));
    info->set_address(s.address);
    info->mutable_queue()->set_queued_requests(s.pending_requests);
    info->mutable_queue()->set_queued_tokens(s.pending_tokens);
    info->mutable_queue()->set_running_requests(s.reported.running_requests);
    info->set_healthy(s.healthy);
    info->set_seconds_since_heartbeat(Seconds(s.since_heard));
  }
  return grpc::Status::OK;
}

void RouterService::PollOnce() {
  // Every worker at once, each bounded: a busy worker's late answer delays no other, and only an
  // unreachable one (UNAVAILABLE: its connection is gone) is marked dead; a timeout is not death.
  const absl::Duration timeout =
      std::clamp(options_.heartbeat_interval * 2, absl::Milliseconds(200), absl::Seconds(2));
  struct Poll {
    std::string address;
    absl::Time sent_at;
    grpc::ClientContext context;
    v1::QueueStatus queue;
    grpc::Status status;
  };
  const std::vector<WorkerSnapshot> workers = registry_.List();
  std::vector<std::unique_ptr<Poll>> polls;
  Mutex mu;
  CondVar answer;
  size_t answered = 0;
  for (const WorkerSnapshot& worker : workers) {
    auto poll = std::make_unique<Poll>();
    poll->address = worker.address;
    poll->sent_at = registry_.Now();  // a failure seen after this one wins
    poll->context.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
    auto done = [&mu, &answer, &answered, p = poll.get()](grpc::Status status) {
      MutexLock lock(&mu);
      p->status = std::move(status);
      ++answered;
      answer.Signal();  // under mu: the waiter (and `answer`) cannot go before this returns
    };
    // Monolithic workers are decode workers (their certificates name decode).
    const std::shared_ptr<grpc::Channel> channel =
        Channel(worker.address, worker.role == WorkerRole::kPrefill ? ComponentRole::kPrefill
                                                                    : ComponentRole::kDecode);
    if (worker.role == WorkerRole::kPrefill) {
      v1::Prefill::NewStub(channel)->async()->GetQueue(&poll->context, &kEmptyQueueRequest,
                                                       &poll->queue, done);
    } else {
      v1::Decode::NewStub(channel)->async()->GetQueue(&poll->context, &kEmptyQueueRequest,
                                                      &poll->queue, done);
    }
    polls.push_back(std::move(poll));
  }
  {
    MutexLock lock(&mu);
    while (answered != polls.size()) answer.Wait(&mu);
  }
  for (const std::unique_ptr<Poll>& p : polls) {
    if (p->status.ok()) {
      registry_.Heartbeat(p->address, LoadFromProto(p->queue), p->sent_at);
    } else if (p->status.error_code() == grpc::StatusCode::UNAVAILABLE) {
      registry_.MarkFailed(p->address, absl::StrCat("GetQueue: ", p->status.error_message()));
    }
  }
  for (const HealthChange& change : registry_.Sweep()) {
    Log()->warn("{} worker {}: {} -> {}: {}", WorkerRoleName(change.role), change.address,
                WorkerHealthName(change.from), WorkerHealthName(change.to), change.reason);
    stats_.RecordHealthChange(change);
  }
}

void RouterService::PollLoop() {
  while (true) {
    PollOnce();
    MutexLock lock(&poll_mu_);
    const absl::Time wake = absl::Now() + options_.heartbeat_interval;
    while (!stopping_ && !poll_wake_.WaitWithDeadline(&poll_mu_, wake)) {
    }
    if (stopping_) return;
  }
}

absl::StatusOr<std::unique_ptr<RouterServer>> RouterServer::Start(const RouterOptions& options) {
  auto result = std::unique_ptr<RouterServer>(new RouterServer());
  PDSERVE_ASSIGN_OR_RETURN(result->service_, RouterService::Create(options));
  MetricsRegistry* metrics = &result->service_->metrics();
  HttpEndpoint http;
  http.role = "router";
  http.metrics = metrics;
  // Each streaming or queued response holds a thread; connections beyond them wait in the HTTP
  // server's own queue.
  http.options.threads = options.max_inflight + std::min(options.max_queued, 256) + 16;
  http.options.listen_address = options.endpoints.http_listen_address;
  http.options.metrics_keys = options.endpoints.metrics_keys;
  http.install_routes = [&options, metrics](httplib::Server& routes, const ServiceServer& server) {
    OpenAiApiOptions api;
    api.router = server.InProcessChannel();
    api.model_id = options.model_id;
    api.max_context = options.max_context;
    api.metrics = metrics;
    api.default_timeout = options.default_deadline;
    api.api_keys = options.api_keys;
    absl::StatusOr<std::unique_ptr<ChatTemplate>> chat =
        ChatTemplate::ForTokenizer(*options.tokenizer);
    if (chat.ok()) {
      api.chat_template = std::move(*chat);
    } else {
      api.chat_template_error = chat.status();
      Log()->warn("/v1/chat/completions will answer 500: {}", std::string(chat.status().message()));
    }
    InstallOpenAiRoutes(routes, api);
  };
  PDSERVE_ASSIGN_OR_RETURN(result->server_, ServiceServer::Start(options.endpoints.listen_address,
                                                                 {result->service_.get()}, http));
  return result;
}

RouterServer::~RouterServer() {
  if (server_ != nullptr) server_->Shutdown(absl::ZeroDuration());
}

void RouterServer::Shutdown(absl::Duration grace) { server_->Shutdown(grace); }

absl::Status RunRouter(const RouterOptions& options, const std::function<void()>& on_hangup) {
  PDSERVE_ASSIGN_OR_RETURN(std::unique_ptr<RouterServer> router, RouterServer::Start(options));
  Log()->info(
      "router serving gRPC on {} and HTTP on {} (policy {}, {} prefill, {} decode, {} monolithic "
      "static)",
      router->address(), router->server().http_address(), options.policy,
      options.prefill_workers.size(), options.decode_workers.size(),
      options.monolithic_workers.size());
  router->server().AnnounceReady("router");
  const int signal = WaitForShutdownSignal(on_hangup);
  Log()->info("signal {}: draining ({} requests running or queued, up to {})", signal,
              router->service().inflight(), absl::FormatDuration(options.endpoints.drain));
  router->server().SetServing(false);
  router->service().StartDraining();
  router->Shutdown(options.endpoints.drain);
  return absl::OkStatus();
}

}  // namespace pdserve
