#include "services/prefill/prefill_worker.h"

#include <algorithm>
#include <chrono>
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
#include "core/kv/token_retention.h"
#include "services/common/grpc_status.h"

namespace pdserve {
namespace {

double Seconds(absl::Duration d) { return absl::ToDoubleSeconds(d); }

}  // namespace

struct PrefillWorker::Pending {
  PrefillJob job;
  absl::Time arrival;
  // Tokens the pages hold: the prompt's, or what token retention keeps of them.
  int stored_tokens = 0;
  int pages_per_cache = 0;
  // The allocation: slot i·pages_per_cache + p holds page p of cache layer i.
  uint64_t allocation_id = 0;
  uint64_t lease_token = 0;
  double lease_seconds = 0;  // as granted by the store
  std::vector<uint64_t> slots;
  std::vector<uint32_t> encoded_bytes;  // per cache layer
  // Prefix cache: the leading pages the store reused (read, not computed), who wrote them, and
  // their bytes as read ([c · reused + p]) with their checked views.
  int reused_pages = 0;
  std::vector<uint64_t> written_by;
  std::vector<uint64_t> written_epoch;  // of the reused pages, parallel to written_by
  std::vector<std::string> cached_bytes;
  std::vector<KvPageView> cached_pages;

  int CachedTokens(int page_size) const { return reused_pages * page_size; }
  int ComputedTokens(int page_size) const {
    return static_cast<int>(job.prompt.size()) - CachedTokens(page_size);
  }

  Mutex mu;
  CondVar cv;  // signalled when finished is set
  // Set by the batcher, then `finished` under mu.
  double queue_seconds = 0;
  double compute_seconds = 0;
  absl::Time compute_end;
  int32_t first_token = -1;
  absl::Status status;
  bool finished ABSL_GUARDED_BY(mu) = false;
  // Set by the sender.
  absl::Status write_status;
  absl::Time writes_done;
};

struct PrefillWorker::PageWrite {
  std::shared_ptr<Pending> pending;
  KvPageHeader header;
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  uint64_t remote_address = 0;
};

// Hands each cache layer's pages of the batch's sequences to the sender as soon as the engine
// has stored them.
class PrefillWorker::LayerStreamer final : public CacheLayerObserver {
 public:
  LayerStreamer(PrefillWorker& worker, const std::vector<std::shared_ptr<Pending>>& batch,
                const std::vector<int>& sequences)
      : worker_(worker), batch_(batch), sequences_(sequences) {}

  void CacheLayerStored(int cache_layer) override {
    const Engine& engine = *worker_.engine_;
    const KvLayerLayout& layout = engine.plan().caches[cache_layer].layout;
    const int page_size = engine.options().kv_page_size;
    for (size_t b = 0; b < batch_.size(); ++b) {
      const std::shared_ptr<Pending>& pending = batch_[b];
      if (!pending->status.ok()) continue;
      const int n = pending->stored_tokens;
      absl::StatusOr<std::vector<int32_t>> positions =
          engine.RowPositions(sequences_[b], cache_layer);
      if (positions.ok() && static_cast<int>(positions->size()) != n) {
        positions = absl::InternalError(absl::StrCat("the engine kept ", positions->size(),
                                                     " of the prompt's tokens; ", n, " expected"));
      }
      if (!positions.ok()) {
        pending->status = positions.status();
        continue;
      }
      absl::StatusOr<std::vector<float>> biases = engine.RowScoreBiases(sequences_[b], cache_layer);
      if (!biases.ok()) {
        pending->status = biases.status();
        continue;
      }
      std::vector<PageWrite> writes;
      for (int p = pending->reused_pages; p < pending->pages_per_cache; ++p) {
        absl::StatusOr<KvPageSlots> slots =
            worker_.engine_->SequencePage(sequences_[b], cache_layer, p);
        if (!slots.ok()) {
          pending->status = slots.status();
          break;
        }
        PageWrite write;
        write.pending = pending;
        write.header.calibration_hash = worker_.options_.calibration_hash;
        write.header.request_id = pending->job.request_id;
        write.header.epoch = pending->allocation_id;
        write.header.cache_layer = cache_layer;
        write.header.page_index = p;
        write.header.num_tokens = TokensInPage(n, page_size, p);
        write.header.layout = layout;
        write.header.positions.assign(positions->begin() + p * page_size,
                                      positions->begin() + p * page_size + write.header.num_tokens);
        write.header.score_biases.assign(biases->begin() + p * page_size,
                                         biases->begin() + p * page_size + write.header.num_tokens);
        write.k = slots->k;
        write.v = slots->v;
        write.remote_address = pending->slots[cache_layer * pending->pages_per_cache + p];
        writes.push_back(std::move(write));
      }
      worker_.EnqueueWrites(std::move(writes));
    }
  }

 private:
  PrefillWorker& worker_;
  const std::vector<std::shared_ptr<Pending>>& batch_;
  const std::vector<int>& sequences_;
};

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Create(
    std::unique_ptr<Engine> engine, const PrefillWorkerOptions& options) {
  if (engine == nullptr) return absl::InvalidArgumentError("prefill worker needs an engine");
  if (!engine->options().KvPagesInHostMemory()) {
    return absl::InvalidArgumentError(
        "prefill worker: its engine must export KV pages to host memory (host_kv_pages)");
  }
  if (options.max_queued_requests < 1) {
    return absl::InvalidArgumentError("max queued requests must be ≥ 1");
  }
  if (options.prefix_cache && options.model_identity.empty()) {
    return absl::InvalidArgumentError(
        "prefill worker: the prefix cache needs the model's identity");
  }
  PrefillWorkerOptions resolved = options;
  if (options.prefix_cache && engine->options().compression.retention.retains_prompts()) {
    // A retained page depends on the whole prompt (its last queries chose it): it is no prefix's.
    GetLogger("prefill")->info("token retention is on: the prefix cache is off");
    resolved.prefix_cache = false;
  }
  return std::unique_ptr<PrefillWorker>(new PrefillWorker(std::move(engine), resolved));
}

PrefillWorker::PrefillWorker(std::unique_ptr<Engine> engine, const PrefillWorkerOptions& options)
    : engine_(std::move(engine)), options_(options) {
  if (options_.prefix_cache) {
    prefix_root_ = PrefixRootHash({.model = options_.model_identity,
                                   .kv_layout = DescribeKvPlanStorage(engine_->plan()),
                                   .calibration_hash = options_.calibration_hash,
                                   .page_size = engine_->options().kv_page_size,
                                   .page_format_version = kKvPageVersion});
  }
  if (options_.metrics == nullptr) options_.metrics = std::make_shared<MetricsRegistry>();
  stats_ = std::make_unique<PrefillMetrics>(*options_.metrics, [this] { return queue(); });
  batcher_ = std::thread([this] { BatcherLoop(); });
  sender_ = std::thread([this] { SenderLoop(); });
}

PrefillWorker::~PrefillWorker() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  queue_cv_.SignalAll();
  batcher_.join();
  {
    MutexLock lock(&send_mu_);
    send_stop_ = true;
  }
  send_cv_.SignalAll();
  sender_.join();
}

v1::QueueStatus PrefillWorker::queue() const {
  MutexLock lock(&mu_);
  v1::QueueStatus status;
  status.set_queued_requests(static_cast<int32_t>(queue_.size()));
  status.set_queued_tokens(queued_tokens_);
  status.set_running_requests(running_);
  return status;
}

absl::Status PrefillWorker::Allocate(Pending& pending) {
  const KvPlan& plan = engine_->plan();
  const int page_size = engine_->options().kv_page_size;
  const int n = static_cast<int>(pending.job.prompt.size());
  pending.stored_tokens =
      RetainedTokenCount(engine_->options().compression.retention, n, page_size);
  pending.pages_per_cache = NumKvPages(pending.stored_tokens, page_size);
  v1::AllocateRequest request;
  request.set_request_id(pending.job.request_id);
  request.set_lease_seconds(pending.job.lease_seconds);
  if (options_.prefix_cache) {
    const std::span<const int32_t> prompt(pending.job.prompt);
    for (const PrefixPageHash& name :
         PrefixPageHashes(prefix_root_, prompt.first(NamedPrefixTokens(n, page_size)), page_size)) {
      request.add_prefix_hashes(reinterpret_cast<const char*>(name.data()), name.size());
    }
    request.set_cache_layers(static_cast<int32_t>(plan.caches.size()));
  }
  for (const CachePlan& cache : plan.caches) {
    const int64_t bytes = KvPageBytes(cache.layout);
    pending.encoded_bytes.push_back(static_cast<uint32_t>(bytes));
    for (int p = 0; p < pending.pages_per_cache; ++p) {
      request.add_page_bytes(static_cast<uint32_t>(bytes));
    }
  }
  v1::AllocateReply reply;
  const std::function<bool()> cancelled =
      pending.job.cancelled ? pending.job.cancelled : [] { return false; };
  PDSERVE_ASSIGN_OR_RETURN(AdmissionQueue::Ticket turn,
                           page_line_.Admit(0, pending.job.deadline, cancelled));
  absl::Duration backoff = absl::Milliseconds(5);
  while (true) {
    absl::Status status =
        pending.job.store->Call("Allocate", &v1::KvStore::Stub::Allocate, request, &reply);
    if (status.ok()) break;
    if (!absl::IsResourceExhausted(status) || absl::Now() + backoff >= pending.job.deadline) {
      return status;
    }
    if (cancelled()) return absl::CancelledError("cancelled while waiting for KV pages");
    absl::SleepFor(backoff);  // pages come back as other requests end
    backoff = std::min(backoff * 2, absl::Milliseconds(100));
  }
  pending.allocation_id = reply.allocation_id();
  pending.lease_token = reply.lease_token();
  pending.lease_seconds = reply.lease_seconds();
  pending.slots.assign(reply.slot_addresses().begin(), reply.slot_addresses().end());
  pending.reused_pages = reply.reused_pages();
  pending.written_by.assign(reply.written_by().begin(), reply.written_by().end());
  pending.written_epoch.assign(reply.written_epoch().begin(), reply.written_epoch().end());
  if (reply.store_instance() != pending.job.store->info().instance_id()) {
    // The gRPC channel reached a store that restarted at the address: this connection's pool key
    // and endpoint are the earlier instance's. Its pages are of no use to us; ABORTED tells the
    // caller to reconnect and run again.
    Release(pending);
    return absl::AbortedError(absl::StrCat("KV store ", pending.job.store->address(),
                                           " restarted since this worker connected (instance ",
                                           pending.job.store->info().instance_id(), ", now ",
                                           reply.store_instance(), ")"));
  }
  if (pending.slots.size() != static_cast<size_t>(request.page_bytes_size()) ||
      pending.reused_pages < 0 || pending.reused_pages > request.prefix_hashes_size() ||
      pending.written_by.size() != static_cast<size_t>(pending.reused_pages) ||
      pending.written_epoch.size() != static_cast<size_t>(pending.reused_pages)) {
    Release(pending);
    return absl::InternalError(absl::StrCat(
        "KV store ", pending.job.store->address(), " gave ", pending.slots.size(), " slots for ",
        request.page_bytes_size(), " pages, ", pending.reused_pages, " of ",
        request.prefix_hashes_size(), " named pages reused, ", pending.written_by.size(),
        " writers and ", pending.written_epoch.size(), " epochs"));
  }
  return absl::OkStatus();
}

absl::Status PrefillWorker::FetchCachedPages(Pending& pending) {
  const int reused = pending.reused_pages;
  if (reused == 0) return absl::OkStatus();
  const KvPlan& plan = engine_->plan();
  const int page_size = engine_->options().kv_page_size;
  const size_t layers = plan.caches.size();
  pending.cached_bytes.resize(layers * reused);
  std::vector<TransferOp> ops;
  for (size_t c = 0; c < layers; ++c) {
    for (int p = 0; p < reused; ++p) {
      std::string& bytes = pending.cached_bytes[c * reused + p];
      bytes.resize(pending.encoded_bytes[c]);
      ops.push_back(
          TransferOp{bytes.data(), bytes.size(), pending.slots[c * pending.pages_per_cache + p]});
    }
  }
  KvStoreConnection& store = *pending.job.store;
  const absl::Time start = absl::Now();
  const absl::Status read = store.endpoint()->GetBatch(store.info().pool_rkey(), ops);
  if (!read.ok()) {
    return absl::UnavailableError(absl::StrCat("reading cached prefix pages from KV store ",
                                               store.address(), ": ", read.message()));
  }
  int64_t bytes = 0;
  for (const TransferOp& op : ops) bytes += static_cast<int64_t>(op.length);
  stats_->cache_read.Record(bytes, static_cast<int64_t>(ops.size()), absl::Now() - start);
  for (size_t c = 0; c < layers; ++c) {
    for (int p = 0; p < reused; ++p) {
      const std::string& page = pending.cached_bytes[c * reused + p];
      absl::StatusOr<KvPageView> view =
          DecodeKvPage({reinterpret_cast<const uint8_t*>(page.data()), page.size()});
      std::string wrong;
      if (!view.ok()) {
        wrong = std::string(view.status().message());
      } else if (!IsPageOf(view->header, pending.written_by[p], pending.written_epoch[p],
                           options_.calibration_hash, static_cast<int>(c), p) ||
                 view->header.num_tokens != page_size ||
                 !(view->header.layout == plan.caches[c].layout)) {
        wrong = absl::StrCat("its header says request ", view->header.request_id, ", epoch ",
                             view->header.epoch, ", cache layer ", view->header.cache_layer,
                             ", page ", view->header.page_index, ", ", view->header.num_tokens,
                             " tokens, or its calibration or layout is not this worker's");
      }
      if (!wrong.empty()) {
        stats_->cache_refused_pages.Increment();
        return absl::DataLossError(
            absl::StrCat("prefix-cache page ", p, " of cache layer ", c, " from KV store ",
                         store.address(), " is not what its name promises (", wrong, "): refused"));
      }
      pending.cached_pages.push_back(*view);
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int> PrefillWorker::StartSequence(Pending& pending) {
  const int cached = pending.CachedTokens(engine_->options().kv_page_size);
  if (cached == 0) return engine_->AddSequence();
  PDSERVE_ASSIGN_OR_RETURN(const int sequence, engine_->AddSequenceWithTokens(cached));
  for (const KvPageView& page : pending.cached_pages) {
    const absl::Status imported = ImportKvPage(*engine_, sequence, page, /*write_v=*/true);
    if (!imported.ok()) {
      (void)engine_->RemoveSequence(sequence);
      return imported;
    }
  }
  // In the engine now: the bytes read from the store are not needed any more.
  pending.cached_pages.clear();
  pending.cached_bytes.clear();
  return sequence;
}

absl::Status PrefillWorker::Seal(Pending& pending) {
  v1::SealRequest request;
  request.set_allocation_id(pending.allocation_id);
  request.set_lease_token(pending.lease_token);
  const int page_size = engine_->options().kv_page_size;
  const int n = pending.stored_tokens;
  for (size_t c = 0; c < pending.encoded_bytes.size(); ++c) {
    for (int p = pending.reused_pages; p < pending.pages_per_cache; ++p) {
      v1::PageRef* page = request.add_pages();
      page->set_cache_layer(static_cast<int32_t>(c));
      page->set_page_index(p);
      page->set_num_tokens(TokensInPage(n, page_size, p));
      page->set_remote_address(pending.slots[c * pending.pages_per_cache + p]);
      page->set_encoded_bytes(pending.encoded_bytes[c]);
    }
  }
  v1::SealReply reply;
  return pending.job.store->Call("Seal", &v1::KvStore::Stub::Seal, request, &reply);
}

void PrefillWorker::Renew(Pending& pending) {
  const absl::StatusOr<double> granted =
      pending.job.store->Renew(pending.allocation_id, pending.lease_token, pending.lease_seconds);
  if (!granted.ok()) {
    // Seal will then fail and say why; the request ends there.
    GetLogger("prefill")->warn("request {}: renewing its KV pages' lease: {}",
                               pending.job.request_id, std::string(granted.status().message()));
  }
}

void PrefillWorker::Release(Pending& pending) {
  if (pending.allocation_id == 0) return;
  const absl::Status status =
      pending.job.store->Release(pending.allocation_id, pending.lease_token);
  if (!status.ok()) {
    // The lease will free the pages; nothing else can be done here.
    GetLogger("prefill")->warn("request {}: {}; its pages expire with their lease",
                               pending.job.request_id, std::string(status.message()));
  }
  pending.allocation_id = 0;
}

absl::StatusOr<PrefillOutcome> PrefillWorker::Run(PrefillJob job) {
  const int64_t tokens = static_cast<int64_t>(job.prompt.size());
  absl::StatusOr<PrefillOutcome> outcome = RunJob(std::move(job));
  if (outcome.ok()) {
    // What this request computed and wrote: cached pages count where they were written.
    const ModelConfig& config = engine_->config();
    const int64_t computed = tokens - outcome->cached_tokens;
    stats_->uncompressed_bytes.Increment(
        static_cast<double>(computed * config.n_layers * 2 * config.kv_dim() * sizeof(float)));
    int64_t stored = 0;
    for (const v1::PageRef& page : outcome->manifest.pages()) {
      if (page.written_by() == 0) stored += page.encoded_bytes();
    }
    stats_->stored_bytes.Increment(static_cast<double>(stored));
    stats_->cached_tokens.Increment(static_cast<double>(outcome->cached_tokens));
  }
  return outcome;
}

absl::StatusOr<PrefillOutcome> PrefillWorker::RunJob(PrefillJob job) {
  const int n = static_cast<int>(job.prompt.size());
  if (n < 1) return absl::InvalidArgumentError("the prompt has no tokens");
  if (n >= engine_->max_context()) {
    return absl::InvalidArgumentError(absl::StrCat("prompt of ", n,
                                                   " tokens leaves no room in the ",
                                                   engine_->max_context(), "-token context"));
  }
  const int vocab = engine_->config().vocab_size;
  for (int32_t id : job.prompt) {
    if (id < 0 || id >= vocab) {
      return absl::InvalidArgumentError(
          absl::StrCat("token id ", id, " is outside [0, ", vocab, ")"));
    }
  }
  PDSERVE_RETURN_IF_ERROR(job.sampling.Validate());
  if (job.store == nullptr) return absl::InvalidArgumentError("no KV store given");

  auto pending = std::make_shared<Pending>();
  pending->job = std::move(job);
  pending->arrival = absl::Now();
  {
    MutexLock lock(&mu_);
    if (static_cast<int>(queue_.size()) >= options_.max_queued_requests) {
      return absl::ResourceExhaustedError(
          absl::StrCat("prefill queue full (", queue_.size(), " requests); retry later"));
    }
  }
  PDSERVE_RETURN_IF_ERROR(Allocate(*pending));
  absl::Cleanup release = [&] { Release(*pending); };
  PDSERVE_RETURN_IF_ERROR(FetchCachedPages(*pending));
  const int page_size = engine_->options().kv_page_size;
  {
    MutexLock lock(&mu_);
    queue_.push_back(pending);
    queued_tokens_ += pending->ComputedTokens(page_size);
  }
  queue_cv_.Signal();
  {
    // The pages' lease runs while the request waits for the batcher and computes: renewed at a
    // third of its length, a long queue of long prompts keeps its pages until Seal.
    const absl::Duration renew_every = absl::Seconds(std::max(0.05, pending->lease_seconds / 3));
    while (!WaitFinished(*pending, absl::Now() + renew_every)) Renew(*pending);
  }
  PDSERVE_RETURN_IF_ERROR(pending->status);
  PDSERVE_RETURN_IF_ERROR(pending->write_status);
  PDSERVE_RETURN_IF_ERROR(Seal(*pending));

  PrefillOutcome outcome;
  outcome.first_token = pending->first_token;
  outcome.queue_seconds = pending->queue_seconds;
  outcome.compute_seconds = pending->compute_seconds;
  outcome.transfer_seconds = std::max(0.0, Seconds(pending->writes_done - pending->compute_end));
  outcome.cached_tokens = pending->CachedTokens(page_size);
  // Seal published every named page the store did not hold (a name published first by another
  // request keeps that request's page): the store holds them all.
  outcome.published_tokens = options_.prefix_cache ? NamedPrefixTokens(n, page_size) : 0;
  outcome.page_tokens = page_size;
  v1::PageManifest& manifest = outcome.manifest;
  manifest.set_request_id(pending->job.request_id);
  manifest.set_calibration_hash(options_.calibration_hash);
  manifest.set_num_tokens(pending->stored_tokens);
  manifest.set_next_position(n);
  manifest.set_kvstore_grpc_address(pending->job.store->address());
  manifest.set_kvstore_instance(pending->job.store->info().instance_id());
  manifest.set_kvstore_worker_address(pending->job.store->info().worker_address());
  manifest.set_pool_rkey(pending->job.store->info().pool_rkey());
  manifest.set_allocation_id(pending->allocation_id);
  manifest.set_lease_token(pending->lease_token);
  for (size_t c = 0; c < pending->encoded_bytes.size(); ++c) {
    for (int p = 0; p < pending->pages_per_cache; ++p) {
      v1::PageRef* page = manifest.add_pages();
      page->set_cache_layer(static_cast<int32_t>(c));
      page->set_page_index(p);
      page->set_num_tokens(TokensInPage(pending->stored_tokens, page_size, p));
      page->set_remote_address(pending->slots[c * pending->pages_per_cache + p]);
      page->set_encoded_bytes(pending->encoded_bytes[c]);
      if (p < pending->reused_pages) {
        page->set_written_by(pending->written_by[p]);
        page->set_epoch(pending->written_epoch[p]);
      } else {
        page->set_epoch(pending->allocation_id);
      }
    }
  }
  pending->allocation_id = 0;  // the pages now belong to the manifest's holder
  return outcome;
}

std::vector<std::shared_ptr<PrefillWorker::Pending>> PrefillWorker::TakeBatch() {
  MutexLock lock(&mu_);
  while (!stop_ && queue_.empty()) queue_cv_.Wait(&mu_);
  std::vector<std::shared_ptr<Pending>> batch;
  int64_t tokens = 0;
  const int budget = engine_->options().max_batch_tokens;
  const int max_sequences = engine_->options().max_sequences;
  const int page_size = engine_->options().kv_page_size;
  while (!queue_.empty() && static_cast<int>(batch.size()) < max_sequences) {
    const int64_t n = queue_.front()->ComputedTokens(page_size);
    if (!batch.empty() && tokens + n > budget) break;
    tokens += n;
    queued_tokens_ -= n;
    batch.push_back(std::move(queue_.front()));
    queue_.pop_front();
  }
  running_ = static_cast<int>(batch.size());
  return batch;
}

void PrefillWorker::BatcherLoop() {
  while (true) {
    std::vector<std::shared_ptr<Pending>> batch = TakeBatch();
    if (batch.empty()) return;  // stopping
    RunBatch(batch);
    MutexLock lock(&mu_);
    running_ = 0;
  }
}

absl::Status PrefillWorker::ForwardBatch(const std::vector<std::shared_ptr<Pending>>& batch,
                                         std::vector<int>& sequences) {
  for (size_t b = 0; b < batch.size(); ++b) {
    PDSERVE_ASSIGN_OR_RETURN(int sequence, StartSequence(*batch[b]));
    sequences.push_back(sequence);
  }
  // A prompt beyond the budget runs alone: its leading chunks first, unobserved.
  const int page_size = engine_->options().kv_page_size;
  std::vector<ForwardChunk> chunks;
  for (size_t b = 0; b < batch.size(); ++b) {
    std::span<const int32_t> prompt =
        std::span<const int32_t>(batch[b]->job.prompt).subspan(batch[b]->CachedTokens(page_size));
    const std::vector<int> sizes = PromptChunkSizes(*engine_, static_cast<int>(prompt.size()));
    for (size_t c = 0; c + 1 < sizes.size(); ++c) {
      ForwardChunk lead{sequences[b], prompt.first(sizes[c])};
      PDSERVE_RETURN_IF_ERROR(engine_->Forward({&lead, 1}).status());
      prompt = prompt.subspan(sizes[c]);
    }
    ForwardChunk last{sequences[b], prompt};
    last.retain = true;  // the prompt's end: token retention (when on) keeps part of it
    chunks.push_back(last);
  }
  LayerStreamer streamer(*this, batch, sequences);
  engine_->set_cache_layer_observer(&streamer);
  absl::StatusOr<std::span<const float>> logits = engine_->Forward(chunks);
  engine_->set_cache_layer_observer(nullptr);
  const absl::Time end = absl::Now();
  if (!logits.ok()) return logits.status();
  const size_t vocab = engine_->config().vocab_size;
  for (size_t b = 0; b < batch.size(); ++b) {
    Sampler sampler(batch[b]->job.sampling);
    batch[b]->first_token = sampler.Sample(logits->subspan(b * vocab, vocab));
    batch[b]->compute_end = end;
  }
  return absl::OkStatus();
}

void PrefillWorker::RunBatch(const std::vector<std::shared_ptr<Pending>>& batch) {
  const absl::Time start = absl::Now();
  for (const auto& pending : batch) pending->queue_seconds = Seconds(start - pending->arrival);
  std::vector<int> sequences;
  absl::Status status = ForwardBatch(batch, sequences);
  const double compute = Seconds(absl::Now() - start);
  int64_t tokens = 0;
  const int page_size = engine_->options().kv_page_size;
  for (const auto& pending : batch) tokens += pending->ComputedTokens(page_size);
  stats_->batch_requests.Observe(static_cast<double>(batch.size()));
  stats_->batch_tokens.Observe(static_cast<double>(tokens));
  stats_->forward_seconds.Observe(compute);
  // The sender reads the engine's pages: they must stay until every write has gone out.
  WaitForWrites();
  for (int sequence : sequences) (void)engine_->RemoveSequence(sequence);
  if (!status.ok()) {
    GetLogger("prefill")->warn("prefill batch of {} failed: {}", batch.size(),
                               std::string(status.message()));
  }
  for (const auto& pending : batch) {
    MutexLock lock(&pending->mu);
    if (pending->status.ok()) pending->status = status;
    pending->compute_seconds = compute;
    pending->finished = true;
    pending->cv.SignalAll();
  }
}

bool PrefillWorker::WaitFinished(Pending& pending, absl::Time deadline) {
  MutexLock lock(&pending.mu);
  while (!pending.finished && !pending.cv.WaitWithDeadline(&pending.mu, deadline)) {
  }
  return pending.finished;
}

void PrefillWorker::EnqueueWrites(std::vector<PageWrite> writes) {
  if (writes.empty()) return;
  {
    MutexLock lock(&send_mu_);
    sends_in_flight_ += static_cast<int64_t>(writes.size());
    for (PageWrite& write : writes) sends_.push_back(std::move(write));
  }
  send_cv_.SignalAll();
}

void PrefillWorker::WaitForWrites() {
  MutexLock lock(&send_mu_);
  while (sends_in_flight_ != 0) send_cv_.Wait(&send_mu_);
}

void PrefillWorker::SenderLoop() {
  while (true) {
    std::vector<PageWrite> group;
    {
      MutexLock lock(&send_mu_);
      while (sends_.empty() && !send_stop_) send_cv_.Wait(&send_mu_);
      if (sends_.empty()) return;
      // One transfer batch: consecutive writes of the same request.
      const Pending* owner = sends_.front().pending.get();
      while (!sends_.empty() && sends_.front().pending.get() == owner) {
        group.push_back(std::move(sends_.front()));
        sends_.pop_front();
      }
    }
    Pending& pending = *group.front().pending;
    std::vector<std::string> encoded;
    encoded.reserve(group.size());
    std::vector<TransferOp> ops;
    absl::Status status = pending.write_status;
    for (const PageWrite& write : group) {
      if (!status.ok()) break;
      const KvLayerLayout& layout = write.header.layout;
      absl::StatusOr<std::string> page =
          EncodeKvPage(write.header, {write.k, static_cast<size_t>(layout.k.bytes())},
                       {write.v, static_cast<size_t>(layout.v.bytes())});
      if (!page.ok()) {
        status = page.status();
        break;
      }
      encoded.push_back(std::move(*page));
      ops.push_back(TransferOp{encoded.back().data(), encoded.back().size(), write.remote_address});
    }
    if (status.ok()) {
      const absl::Time put_start = absl::Now();
      status = pending.job.store->endpoint()->PutBatch(pending.job.store->info().pool_rkey(), ops);
      int64_t bytes = 0;
      for (const TransferOp& op : ops) bytes += static_cast<int64_t>(op.length);
      if (status.ok()) {
        stats_->transfer.Record(bytes, static_cast<int64_t>(ops.size()), absl::Now() - put_start);
      }
    }
    const absl::Time done = absl::Now();
    {
      MutexLock lock(&send_mu_);
      if (!status.ok() && pending.write_status.ok()) {
        pending.write_status = absl::Status(
            status.code(), absl::StrCat("writing pages to KV store ", pending.job.store->address(),
                                        ": ", status.message()));
      }
      pending.writes_done = std::max(pending.writes_done, done);
      sends_in_flight_ -= static_cast<int64_t>(group.size());
    }
    send_cv_.SignalAll();
  }
}

}  // namespace pdserve
