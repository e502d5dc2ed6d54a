#include "services/decode/decode_worker.h"

#include <algorithm>
#include <span>
#include <string>
#include <utility>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "core/base/logging.h"
#include "core/base/status_macros.h"
#include "core/engine/generator.h"
#include "core/engine/kv_transfer.h"
#include "core/kv/kv_page.h"
#include "services/common/grpc_status.h"

namespace pdserve {
namespace {

// The position of the first generated token (0 in the manifest: the pages hold the whole prompt).
int NextPosition(const v1::PageManifest& manifest) {
  return manifest.next_position() > 0 ? manifest.next_position() : manifest.num_tokens();
}

}  // namespace

// One page as pulled from the KV store: whole, or (V left remote) its header and K bytes.
struct DecodeWorker::StagedPage {
  v1::PageRef ref;
  std::string bytes;
  bool v_remote = false;
};

struct DecodeWorker::Admission {
  DecodeJob job;
  std::shared_ptr<DecodeStream> stream;
  std::vector<StagedPage> pages;
  std::shared_ptr<RemotePageSource> source;
};

struct DecodeWorker::Live {
  std::shared_ptr<DecodeStream> stream;
  std::shared_ptr<RemotePageSource> source;  // null: every page is local
  int sequence = -1;
  Sampler sampler;
  int max_tokens = 0;
  std::vector<int32_t> stop_ids;
  int produced = 0;
  int32_t next = -1;  // the token the next step feeds

  Live(const DecodeJob& job, std::shared_ptr<DecodeStream> s)
      : stream(std::move(s)),
        sampler(job.sampling),
        max_tokens(job.max_tokens),
        stop_ids(job.stop_ids) {}
};

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Create(
    std::unique_ptr<Engine> engine, RemoteValueTier* tier, const DecodeWorkerOptions& options) {
  if (engine == nullptr) return absl::InvalidArgumentError("decode worker needs an engine");
  if (!options.monolithic && !engine->options().KvPagesInHostMemory()) {
    return absl::InvalidArgumentError(
        "decode worker: its engine must import KV pages from host memory (host_kv_pages)");
  }
  if (options.max_queued_requests < 1) {
    return absl::InvalidArgumentError("max queued requests must be ≥ 1");
  }
  if (engine->options().max_batch_tokens < engine->options().max_sequences) {
    return absl::InvalidArgumentError(absl::StrCat(
        "max batch tokens (", engine->options().max_batch_tokens,
        ") must cover one decode step of every sequence (", engine->options().max_sequences, ")"));
  }
  return std::unique_ptr<DecodeWorker>(new DecodeWorker(std::move(engine), tier, options));
}

DecodeWorker::DecodeWorker(std::unique_ptr<Engine> engine, RemoteValueTier* tier,
                           const DecodeWorkerOptions& options)
    : engine_(std::move(engine)), tier_(tier), options_(options) {
  if (options_.metrics == nullptr) options_.metrics = std::make_shared<MetricsRegistry>();
  stats_ = std::make_unique<DecodeMetrics>(
      *options_.metrics, [this] { return queue(); }, tier_);
  scheduler_ = std::thread([this] { SchedulerLoop(); });
}

DecodeWorker::~DecodeWorker() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  cv_.SignalAll();
  scheduler_.join();
}

v1::QueueStatus DecodeWorker::queue() const {
  MutexLock lock(&mu_);
  v1::QueueStatus status;
  status.set_queued_requests(static_cast<int32_t>(admissions_.size()));
  status.set_queued_tokens(queued_tokens_);
  status.set_running_requests(live_count_);
  return status;
}

absl::Status DecodeWorker::CheckJob(const DecodeJob& job) const {
  PDSERVE_RETURN_IF_ERROR(job.sampling.Validate());
  const int vocab = engine_->config().vocab_size;
  auto check_token = [vocab](int32_t id, const char* what) -> absl::Status {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", id, " is outside the vocabulary [0, ", vocab, ")"));
    }
    return absl::OkStatus();
  };
  int prompt_tokens = 0;
  if (options_.monolithic) {
    if (job.prompt.empty()) return absl::InvalidArgumentError("the prompt has no tokens");
    for (int32_t id : job.prompt) PDSERVE_RETURN_IF_ERROR(check_token(id, "prompt token"));
    prompt_tokens = static_cast<int>(job.prompt.size());
  } else {
    if (job.store == nullptr || job.manifest.pages().empty()) {
      return absl::InvalidArgumentError("a disaggregated decode needs a page manifest");
    }
    if (job.manifest.calibration_hash() != options_.calibration_hash) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the pages were made with calibration ", absl::Hex(job.manifest.calibration_hash()),
          " but this decode worker runs calibration ", absl::Hex(options_.calibration_hash)));
    }
    PDSERVE_RETURN_IF_ERROR(check_token(job.first_token, "first token"));
    const int stored = job.manifest.num_tokens();
    const int pages = NumKvPages(std::max(stored, 1), engine_->options().kv_page_size);
    const size_t expected = engine_->plan().caches.size() * static_cast<size_t>(pages);
    if (stored < 1 || static_cast<size_t>(job.manifest.pages_size()) != expected) {
      return absl::InvalidArgumentError(
          absl::StrCat("the manifest lists ", job.manifest.pages_size(), " pages for ", stored,
                       " tokens; this model's KV plan needs ", expected));
    }
    prompt_tokens = NextPosition(job.manifest);
    if (job.manifest.next_position() < 0 || prompt_tokens < stored) {
      return absl::InvalidArgumentError(absl::StrCat("the manifest's next position ", prompt_tokens,
                                                     " is before its ", stored,
                                                     " stored tokens' end"));
    }
  }
  for (int32_t id : job.stop_ids) PDSERVE_RETURN_IF_ERROR(check_token(id, "stop token"));
  if (job.max_tokens < 1) {
    return absl::InvalidArgumentError(absl::StrCat("max tokens ", job.max_tokens, " < 1"));
  }
  if (static_cast<int64_t>(prompt_tokens) + job.max_tokens > engine_->max_context()) {
    return absl::InvalidArgumentError(
        absl::StrCat("prompt (", prompt_tokens, " tokens) + max tokens (", job.max_tokens,
                     ") exceed this worker's context of ", engine_->max_context(), " tokens"));
  }
  return absl::OkStatus();
}

absl::Status DecodeWorker::PullPages(Admission& admission, double* lease_seconds) {
  const v1::PageManifest& manifest = admission.job.manifest;
  KvStoreConnection& store = *admission.job.store;
  // The pages are this decoder's from now on: take the lease over before reading.
  {
    absl::StatusOr<double> lease = store.Renew(manifest.allocation_id(), manifest.lease_token());
    if (!lease.ok()) {
      return absl::Status(lease.status().code(),
                          absl::StrCat("taking over the pages of request ", manifest.request_id(),
                                       ": ", lease.status().message()));
    }
    *lease_seconds = *lease;
  }
  const KvPlan& plan = engine_->plan();
  const int page_size = engine_->options().kv_page_size;
  std::vector<TransferOp> ops;
  admission.pages.resize(manifest.pages_size());
  for (int i = 0; i < manifest.pages_size(); ++i) {
    const v1::PageRef& ref = manifest.pages(i);
    if (ref.cache_layer() < 0 || ref.cache_layer() >= static_cast<int>(plan.caches.size())) {
      return absl::InvalidArgumentError(
          absl::StrCat("manifest page ", i, " names cache layer ", ref.cache_layer()));
    }
    const KvLayerLayout& layout = plan.caches[ref.cache_layer()].layout;
    const int64_t full = KvPageBytes(layout);
    if (ref.encoded_bytes() != full) {
      return absl::InvalidArgumentError(absl::StrCat("manifest page ", i, " is ",
                                                     ref.encoded_bytes(),
                                                     " bytes; this model's pages of cache "
                                                     "layer ",
                                                     ref.cache_layer(), " are ", full));
    }
    StagedPage& page = admission.pages[i];
    page.ref = ref;
    page.v_remote =
        tier_ != nullptr && plan.caches[ref.cache_layer()].kcache && ref.num_tokens() == page_size;
    page.bytes.resize(page.v_remote ? KvPageVOffset(layout) : full);
    ops.push_back(TransferOp{page.bytes.data(), page.bytes.size(), ref.remote_address()});
  }
  const absl::Time get_start = absl::Now();
  absl::Status status = store.endpoint()->GetBatch(manifest.pool_rkey(), ops);
  if (status.ok()) {
    int64_t bytes = 0;
    for (const TransferOp& op : ops) bytes += static_cast<int64_t>(op.length);
    stats_->transfer.Record(bytes, static_cast<int64_t>(ops.size()), absl::Now() - get_start);
  }
  if (!status.ok()) {
    return absl::UnavailableError(absl::StrCat("reading the pages of request ",
                                               manifest.request_id(), " from KV store ",
                                               store.address(), ": ", status.message()));
  }
  if (tier_ != nullptr) {
    admission.source = std::make_shared<RemotePageSource>(store.endpoint(), manifest.pool_rkey());
  }
  return absl::OkStatus();
}

absl::StatusOr<DecodeStart> DecodeWorker::Start(DecodeJob job) {
  PDSERVE_RETURN_IF_ERROR(CheckJob(job));
  {
    MutexLock lock(&mu_);
    if (static_cast<int>(admissions_.size()) >= options_.max_queued_requests) {
      return absl::ResourceExhaustedError(
          absl::StrCat("decode queue full (", admissions_.size(), " requests); retry later"));
    }
  }
  auto admission = std::make_unique<Admission>();
  admission->job = std::move(job);
  admission->stream = std::make_shared<DecodeStream>();
  DecodeStart start;
  start.stream = admission->stream;
  if (!options_.monolithic) {
    const absl::Time begin = absl::Now();
    PDSERVE_RETURN_IF_ERROR(PullPages(*admission, &start.lease_seconds));
    start.transfer_seconds = absl::ToDoubleSeconds(absl::Now() - begin);
  }
  {
    MutexLock lock(&mu_);
    queued_tokens_ +=
        admission->job.max_tokens + static_cast<int64_t>(admission->job.prompt.size());
    admissions_.push_back(std::move(admission));
  }
  cv_.SignalAll();
  return start;
}

absl::Status DecodeWorker::Refuse(const std::string& what, const char* reason,
                                  absl::string_view why) {
  stats_->pages_refused.Add({{"reason", reason}}).Increment();
  return absl::DataLossError(absl::StrCat(what, " failed verification (", reason, "): ", why,
                                          "; the request fails instead of decoding it"));
}

absl::Status DecodeWorker::RefusePage(const v1::PageRef& ref, const char* reason,
                                      const std::string& why) {
  return Refuse(absl::StrCat("KV page ", ref.page_index(), " of cache layer ", ref.cache_layer()),
                reason, why);
}

absl::Status DecodeWorker::FetchFailure(const absl::Status& failure) {
  if (absl::IsDataLoss(failure)) return Refuse("a KV page's V rows", "checksum", failure.message());
  return absl::UnavailableError(
      absl::StrCat("fetching V pages from the KV store failed: ", failure.message()));
}

absl::Status DecodeWorker::Import(Admission& admission, Live& live) {
  if (options_.monolithic) {
    PDSERVE_ASSIGN_OR_RETURN(live.sequence, engine_->AddSequence());
    PDSERVE_ASSIGN_OR_RETURN(std::span<const float> logits,
                             Prefill(*engine_, live.sequence, admission.job.prompt));
    live.next = live.sampler.Sample(logits);
    return absl::OkStatus();
  }
  const v1::PageManifest& manifest = admission.job.manifest;
  PDSERVE_ASSIGN_OR_RETURN(live.sequence, engine_->AddSequenceWithTokens(manifest.num_tokens()));
  if (NextPosition(manifest) != manifest.num_tokens()) {  // token retention dropped tokens
    PDSERVE_RETURN_IF_ERROR(engine_->SetSequencePosition(live.sequence, NextPosition(manifest)));
  }
  for (StagedPage& page : admission.pages) {
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(page.bytes.data()),
                                         page.bytes.size());
    absl::StatusOr<KvPageView> view = page.v_remote ? DecodeKvPageHead(bytes) : DecodeKvPage(bytes);
    if (!view.ok()) {
      return RefusePage(page.ref, absl::IsDataLoss(view.status()) ? "checksum" : "malformed",
                        std::string(view.status().message()));
    }
    const uint64_t writer =
        page.ref.written_by() != 0 ? page.ref.written_by() : manifest.request_id();
    if (!IsPageOf(view->header, writer, page.ref.epoch(), manifest.calibration_hash(),
                  page.ref.cache_layer(), page.ref.page_index())) {
      const KvPageHeader& h = view->header;
      const bool stale = IsPageOf(h, writer, h.epoch, manifest.calibration_hash(),
                                  page.ref.cache_layer(), page.ref.page_index());
      return RefusePage(page.ref, stale ? "stale" : "foreign",
                        absl::StrCat("it holds request ", h.request_id, " epoch ", h.epoch,
                                     ", cache layer ", h.cache_layer, ", page ", h.page_index,
                                     "; expected request ", writer, " epoch ", page.ref.epoch()));
    }
    PDSERVE_RETURN_IF_ERROR(ImportKvPage(*engine_, live.sequence, *view, !page.v_remote));
    if (page.v_remote) {
      PDSERVE_ASSIGN_OR_RETURN(
          KvPageSlots slots,
          engine_->SequencePage(live.sequence, page.ref.cache_layer(), page.ref.page_index()));
      const KvLayerLayout& layout = engine_->plan().caches[page.ref.cache_layer()].layout;
      tier_->MapRemote(slots.tier_section, slots.page_id, admission.source,
                       page.ref.remote_address() + KvPageVOffset(layout),
                       std::move(view->header.v_head_checksums));
    }
  }
  live.source = admission.source;
  live.next = admission.job.first_token;
  return absl::OkStatus();
}

bool DecodeWorker::Emit(Live& live, int32_t token) {
  ++live.produced;
  stats_->generated_tokens.Increment();
  {
    MutexLock lock(&mu_);
    --queued_tokens_;
  }
  v1::FinishReason reason = v1::FINISH_REASON_UNSPECIFIED;
  if (std::find(live.stop_ids.begin(), live.stop_ids.end(), token) != live.stop_ids.end()) {
    reason = v1::FINISH_REASON_STOP_TOKEN;
  } else if (live.produced >= live.max_tokens) {
    reason = v1::FINISH_REASON_LENGTH;
  }
  if (reason == v1::FINISH_REASON_UNSPECIFIED) {
    live.stream->Push(token);
    live.next = token;
    return false;
  }
  // Out of the engine and the counts before the stream ends, as on every failure path.
  Retire(live);
  live.stream->PushLast(token, reason);
  return true;
}

void DecodeWorker::Retire(Live& live) {
  if (live.sequence >= 0) (void)engine_->RemoveSequence(live.sequence);
  live.sequence = -1;
  MutexLock lock(&mu_);
  queued_tokens_ -= live.max_tokens - live.produced;
  --live_count_;
}

void DecodeWorker::Admit() {
  while (static_cast<int>(live_.size()) < engine_->options().max_sequences) {
    std::unique_ptr<Admission> admission;
    {
      MutexLock lock(&mu_);
      if (admissions_.empty()) return;
      admission = std::move(admissions_.front());
      admissions_.pop_front();
      queued_tokens_ -= static_cast<int64_t>(admission->job.prompt.size());
      ++live_count_;
    }
    auto live = std::make_unique<Live>(admission->job, admission->stream);
    if (admission->stream->cancelled()) {
      Retire(*live);
      live->stream->Fail(absl::CancelledError("cancelled before decoding started"));
      continue;
    }
    absl::Status status = Import(*admission, *live);
    if (!status.ok()) {
      Retire(*live);
      live->stream->Fail(status);
      continue;
    }
    // The first token: prefill's (disaggregated) or the local prefill's.
    if (Emit(*live, live->next)) continue;
    live_.push_back(std::move(live));
  }
}

void DecodeWorker::Step() {
  // Cancelled requests leave before the step.
  for (auto& live : live_) {
    if (live->stream->cancelled()) {
      Retire(*live);
      live->stream->Fail(absl::CancelledError("cancelled"));
    }
  }
  std::erase_if(live_, [](const std::unique_ptr<Live>& live) { return live->sequence < 0; });
  if (live_.empty()) return;
  std::vector<ForwardChunk> chunks;
  chunks.reserve(live_.size());
  for (auto& live : live_) chunks.push_back(ForwardChunk{live->sequence, {&live->next, 1}});
  const absl::Time step_start = absl::Now();
  stats_->batch_sequences.Observe(static_cast<double>(chunks.size()));
  absl::Cleanup timed = [&] {
    stats_->step_seconds.Observe(absl::ToDoubleSeconds(absl::Now() - step_start));
  };
  absl::StatusOr<std::span<const float>> logits = engine_->Forward(chunks);
  if (!logits.ok()) {
    GetLogger("decode")->error("decode step over {} sequences failed: {}", live_.size(),
                               std::string(logits.status().message()));
    for (auto& live : live_) {
      Retire(*live);
      live->stream->Fail(logits.status());
    }
    live_.clear();
    return;
  }
  const size_t vocab = engine_->config().vocab_size;
  for (size_t i = 0; i < live_.size(); ++i) {
    Live& live = *live_[i];
    if (live.source != nullptr && live.source->failed()) {
      Retire(live);
      live.stream->Fail(FetchFailure(live.source->failure()));
      continue;
    }
    const int32_t token = live.sampler.Sample(logits->subspan(i * vocab, vocab));
    Emit(live, token);
  }
  std::erase_if(live_, [](const std::unique_ptr<Live>& live) { return live->sequence < 0; });
}

void DecodeWorker::SchedulerLoop() {
  while (true) {
    {
      MutexLock lock(&mu_);
      while (!stop_ && admissions_.empty() && live_.empty()) cv_.Wait(&mu_);
      if (stop_) break;
    }
    Admit();
    Step();
  }
  for (auto& live : live_) {
    Retire(*live);
    live->stream->Fail(absl::UnavailableError("decode worker shutting down"));
  }
  live_.clear();
  MutexLock lock(&mu_);
  for (auto& admission : admissions_) {
    admission->stream->Fail(absl::UnavailableError("decode worker shutting down"));
  }
  admissions_.clear();
}

}  // namespace pdserve
