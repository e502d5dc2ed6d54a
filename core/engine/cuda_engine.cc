#include "core/engine/cuda_engine.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/base/status_macros.h"
#include "core/engine/cuda_model.h"
#include "core/engine/kv_plan.h"
#include "core/engine/sequence_table.h"
#include "core/model/layer_graph.h"
#include "kernels/cuda/attention.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/embedding.h"
#include "kernels/cuda/kcache_attention.h"
#include "kernels/cuda/kv_store.h"
#include "kernels/cuda/residual.h"
#include "kernels/cuda/rms_norm.h"
#include "kernels/cuda/rope.h"
#include "kernels/cuda/swiglu.h"

namespace pdserve {
namespace {

namespace cu = kernels::cuda;
using cu::DeviceBuffer;
using cu::PinnedBuffer;

// Device activation buffers for max_batch_tokens rows, and their pinned host staging.
struct DeviceBuffers {
  DeviceBuffer<float> x, xb, xn, qkv, attn, q_packed, swiftkv, gate_up, hb, logits;
  DeviceBuffer<int32_t> tokens, positions, page_ids, slots, kept_rows;
  DeviceBuffer<int32_t> page_table;  // [max_sequences, pages_per_sequence]
  DeviceBuffer<uint8_t> attention_workspace;
  // Pinned mirrors of the per-step tables; logits come back here.
  // Pinned memory a Forward's asynchronous copies read is written once per Forward: positions
  // after compaction go to host_compacted_positions, not back into host_positions.
  PinnedBuffer<int32_t> host_tokens, host_positions, host_page_ids, host_slots, host_kept_rows,
      host_compacted_positions;
  std::vector<int32_t> kept_scratch;  // CompactToLogitRows' answer, before it is known to move
  PinnedBuffer<int32_t> host_page_table;
  PinnedBuffer<float> host_logits;
};

// One cache layer's K and V pools, page for page in pinned host memory (host_kv_pages).
struct HostMirror {
  PinnedBuffer<uint8_t> k, v;
};

// Disaggregation's state: the mirror, the copy stream the export runs on, and per Forward the
// pages to export and the cache layers stored so far.
struct PageExchange {
  std::vector<HostMirror> mirror;  // per cache layer; empty without host_kv_pages
  cudaStream_t copy_stream = nullptr;
  std::vector<cudaEvent_t> stored, copied;  // per cache layer
  std::vector<char> needs_upload;           // per sequence slot: mirror written, device not yet
  CacheLayerObserver* observer = nullptr;
  std::vector<int32_t> batch_pages;   // every page of this Forward's sequences, ascending
  std::vector<int32_t> upload_pages;  // one imported sequence's pages, ascending
  std::vector<int> stored_layers;     // cache layers this Forward stored, in order

  ~PageExchange() {
    for (cudaEvent_t event : stored) cudaEventDestroy(event);
    for (cudaEvent_t event : copied) cudaEventDestroy(event);
    if (copy_stream != nullptr) cudaStreamDestroy(copy_stream);
  }
};

absl::Status CheckSupported(const ModelConfig& c, const EngineOptions& o, const KvPlan& plan) {
  if (c.traits().qkv_bias || c.traits().qk_norm) {
    return absl::UnimplementedError(absl::StrCat(
        "cuda engine: ", c.traits().name,
        " models (q/k/v biases or q/k head norms) run on the CPU only for now; use --device cpu"));
  }
  if (c.q_dim() != c.dim) {
    return absl::UnimplementedError(
        absl::StrCat("cuda engine: heads of ", c.head_dim(), " on a width of ", c.dim, " (",
                     c.n_heads, " heads) run on the CPU only for now; use --device cpu"));
  }
  if (o.value_tier_factory) {
    return absl::InvalidArgumentError(
        "cuda engine: value_tier_factory is CPU-only; KCache V lives in device memory");
  }
  if (o.compression.f16) {
    return absl::UnimplementedError(
        "cuda engine: an f16 KV cache runs on the CPU only for now; use --kv-dtype f32, --fp8, or "
        "--device cpu");
  }
  if (o.compression.retention.enabled()) {
    return absl::UnimplementedError(
        "cuda engine: token retention (--kv-retention) runs on the CPU only for now; use "
        "--device cpu");
  }
  if (o.max_sequences > cu::kMaxBatchSequences) {
    return absl::InvalidArgumentError(absl::StrCat("cuda engine: max_sequences ", o.max_sequences,
                                                   " exceeds ", cu::kMaxBatchSequences));
  }
  if (c.head_dim() > cu::kMaxHeadDim) {
    return absl::InvalidArgumentError(
        absl::StrCat("cuda engine: head dim ", c.head_dim(), " exceeds ", cu::kMaxHeadDim));
  }
  if (plan.swiftkv() && plan.swiftkv_v_offsets.size() > cu::kMaxStoreTargets) {
    return absl::InvalidArgumentError(absl::StrCat("cuda engine: ", plan.swiftkv_v_offsets.size(),
                                                   " SwiftKV cache layers exceed ",
                                                   cu::kMaxStoreTargets));
  }
  for (const CachePlan& cache : plan.caches) {
    if (cache.layout.k.scale_mode() == KvScaleMode::kPerPageHead ||
        cache.layout.v.scale_mode() == KvScaleMode::kPerPageHead) {
      return absl::InvalidArgumentError(
          "cuda engine: per-page FP8 scales are CPU-only; use per-token scales");
    }
  }
  return absl::OkStatus();
}

absl::Status NoHostPages() {
  return absl::FailedPreconditionError(
      "cuda engine: KV pages are in device memory; create the engine with host_kv_pages to "
      "export or import them");
}

}  // namespace

struct CudaEngine::State {
  ModelConfig config;
  EngineOptions options;
  int max_context = 0;
  int pages_per_sequence = 0;
  KvPlan plan;
  std::vector<LayerStep> graph;  // every layer's steps (the family's LayerGraph)
  CudaModel model;
  cudaStream_t stream = nullptr;
  std::unique_ptr<cu::Gemm> gemm;
  std::unique_ptr<PageAllocator> pages;
  std::unique_ptr<SequenceTable> table;
  std::span<Segment> segments;
  DeviceBuffers b;
  PageExchange exchange;

  ~State() {
    if (stream != nullptr) cudaStreamDestroy(stream);
  }

  absl::Status Allocate();
  absl::Status AllocateExchange();
  // Copies `pages` (ascending, so that pages reused in any order still form runs) of one cache
  // layer's K and V pools between the device and the host mirror, one copy per run of
  // consecutive page ids.
  absl::Status CopyPages(int cache, std::span<const int32_t> pages, cudaMemcpyKind kind,
                         cudaStream_t on);
  absl::Status UploadImportedPages();
  // After cache layer `cache` is stored: with an observer, copies the batch's pages of it to the
  // mirror on the copy stream once the store is done.
  absl::Status ExportStored(int cache);
  // Tells the observer of each stored layer once its copy is done.
  absl::Status NotifyStored();
  absl::StatusOr<std::span<const float>> Run(std::span<const ForwardChunk> chunks);
  absl::StatusOr<int> Begin(std::span<const ForwardChunk> chunks);
  // Runs the layer's graph over the n rows of b.x, one step at a time.
  absl::Status Layer(int layer, int n);
  absl::Status Step(LayerStep step, int layer, int n);
  absl::Status SwiftKvProjectAndStore(int n);
  absl::Status Compact(int& n);
  void Store(std::span<const cu::KvStoreTarget> targets, const float* rows, int64_t stride, int n);
  cu::KvStoreTarget StoreTarget(int cache, int64_t k_column, int64_t v_column) const;
  void Attend(int layer, const float* q, int64_t q_stride);
  absl::Status Matmul(const float* x, int n, const DeviceTensor& w, float* y) {
    return gemm->Run(x, n, w.matrix, y);
  }
};

absl::Status CudaEngine::State::Allocate() {
  const ModelConfig& c = config;
  const size_t n = options.max_batch_tokens;
  int64_t qkv_width = 0;
  for (const LayerPlan& layer : plan.layers) qkv_width = std::max(qkv_width, layer.w_in.rows());
  const int64_t swiftkv_width = plan.swiftkv() ? plan.swiftkv_kv.rows() : 0;
  for (auto [buffer, width] :
       {std::pair{&b.x, int64_t{c.dim}}, std::pair{&b.xb, int64_t{c.dim}},
        std::pair{&b.xn, int64_t{c.dim}}, std::pair{&b.qkv, qkv_width},
        std::pair{&b.attn, int64_t{c.dim}}, std::pair{&b.q_packed, int64_t{c.dim}},
        std::pair{&b.swiftkv, swiftkv_width}, std::pair{&b.gate_up, int64_t{2} * c.hidden_dim},
        std::pair{&b.hb, int64_t{c.hidden_dim}}, std::pair{&b.logits, int64_t{c.vocab_size}}}) {
    PDSERVE_ASSIGN_OR_RETURN(*buffer, DeviceBuffer<float>::Allocate(n * width));
  }
  for (auto* buffer : {&b.tokens, &b.positions, &b.page_ids, &b.slots, &b.kept_rows}) {
    PDSERVE_ASSIGN_OR_RETURN(*buffer, DeviceBuffer<int32_t>::Allocate(n));
  }
  for (auto* buffer : {&b.host_tokens, &b.host_positions, &b.host_page_ids, &b.host_slots,
                       &b.host_kept_rows, &b.host_compacted_positions}) {
    PDSERVE_ASSIGN_OR_RETURN(*buffer, PinnedBuffer<int32_t>::Allocate(n));
  }
  b.kept_scratch.resize(n);
  const size_t table_entries = static_cast<size_t>(options.max_sequences) * pages_per_sequence;
  PDSERVE_ASSIGN_OR_RETURN(b.page_table, DeviceBuffer<int32_t>::Allocate(table_entries));
  PDSERVE_ASSIGN_OR_RETURN(b.host_page_table, PinnedBuffer<int32_t>::Allocate(table_entries));
  PDSERVE_ASSIGN_OR_RETURN(b.host_logits, PinnedBuffer<float>::Allocate(n * c.vocab_size));
  const kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
  // Dense attention and KCache run one after the other on `stream`: one workspace serves both.
  // KCache's ([64 sequences, n_heads, max_context] probabilities, GBs at long contexts) only when
  // some cache layer selects.
  size_t workspace = cu::AttentionWorkspaceBytes(shape, {options.max_batch_tokens, max_context});
  if (std::any_of(plan.caches.begin(), plan.caches.end(),
                  [](const CachePlan& cache) { return cache.kcache; })) {
    workspace = std::max(workspace, cu::KCacheWorkspaceBytes(shape, max_context));
  }
  PDSERVE_ASSIGN_OR_RETURN(b.attention_workspace, DeviceBuffer<uint8_t>::Allocate(workspace));
  PDSERVE_ASSIGN_OR_RETURN(gemm,
                           cu::Gemm::Create(stream, options.max_batch_tokens,
                                            std::max<int64_t>({c.dim, c.hidden_dim, qkv_width})));
  return absl::OkStatus();
}

absl::Status CudaEngine::State::AllocateExchange() {
  PageExchange& x = exchange;
  x.needs_upload.assign(options.max_sequences, 0);
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&x.copy_stream, cudaStreamNonBlocking));
  for (size_t c = 0; c < plan.caches.size(); ++c) {
    for (std::vector<cudaEvent_t>* events : {&x.stored, &x.copied}) {
      events->push_back(nullptr);
      PDSERVE_CUDA_RETURN_IF_ERROR(
          cudaEventCreateWithFlags(&events->back(), cudaEventDisableTiming));
    }
  }
  if (!options.host_kv_pages) return absl::OkStatus();
  for (const DeviceCache& device : model.caches) {
    HostMirror mirror;
    PDSERVE_ASSIGN_OR_RETURN(mirror.k, PinnedBuffer<uint8_t>::Allocate(device.k_pool.size()));
    PDSERVE_ASSIGN_OR_RETURN(mirror.v, PinnedBuffer<uint8_t>::Allocate(device.v_pool.size()));
    std::fill_n(mirror.k.data(), mirror.k.size(), uint8_t{0});
    std::fill_n(mirror.v.data(), mirror.v.size(), uint8_t{0});
    x.mirror.push_back(std::move(mirror));
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::State::CopyPages(int cache, std::span<const int32_t> pages,
                                          cudaMemcpyKind kind, cudaStream_t on) {
  DeviceCache& device = model.caches[cache];
  HostMirror& host = exchange.mirror[cache];
  const bool up = kind == cudaMemcpyHostToDevice;
  for (size_t i = 0; i < pages.size();) {
    size_t j = i + 1;
    while (j < pages.size() && pages[j] == pages[j - 1] + 1) ++j;
    for (auto [pool, mirror, stride] :
         {std::tuple{device.k_pool.data(), host.k.data(), device.k.page_stride},
          std::tuple{device.v_pool.data(), host.v.data(), device.v.page_stride}}) {
      const int64_t offset = int64_t{pages[i]} * stride;
      const size_t bytes = (j - i) * stride;
      PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(up ? pool + offset : mirror + offset,
                                                   up ? mirror + offset : pool + offset, bytes,
                                                   kind, on));
    }
    i = j;
  }
  return absl::OkStatus();
}

// Sequences from AddSequenceWithTokens in this batch: their pages go up from the mirror on
// `stream`, ahead of every kernel of the Forward.
absl::Status CudaEngine::State::UploadImportedPages() {
  for (const Segment& segment : segments) {
    char& needs_upload = exchange.needs_upload[segment.sequence];
    if (!needs_upload) continue;
    const std::vector<int32_t>& pages = table->table(segment.sequence).pages();
    exchange.upload_pages.assign(pages.begin(), pages.end());
    std::sort(exchange.upload_pages.begin(), exchange.upload_pages.end());
    for (size_t c = 0; c < plan.caches.size(); ++c) {
      PDSERVE_RETURN_IF_ERROR(
          CopyPages(static_cast<int>(c), exchange.upload_pages, cudaMemcpyHostToDevice, stream));
    }
    needs_upload = 0;
  }
  return absl::OkStatus();
}

absl::Status CudaEngine::State::ExportStored(int cache) {
  PageExchange& x = exchange;
  if (x.observer == nullptr) return absl::OkStatus();
  x.stored_layers.push_back(cache);
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(x.stored[cache], stream));
  if (x.mirror.empty()) return absl::OkStatus();
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(x.copy_stream, x.stored[cache], 0));
  PDSERVE_RETURN_IF_ERROR(CopyPages(cache, x.batch_pages, cudaMemcpyDeviceToHost, x.copy_stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(x.copied[cache], x.copy_stream));
  return absl::OkStatus();
}

absl::Status CudaEngine::State::NotifyStored() {
  PageExchange& x = exchange;
  for (int cache : x.stored_layers) {
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cudaEventSynchronize(x.mirror.empty() ? x.stored[cache] : x.copied[cache]));
    x.observer->CacheLayerStored(cache);
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<CudaEngine>> CudaEngine::Create(const ModelWeights& weights,
                                                               const EngineOptions& options) {
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  auto state = std::make_unique<State>();
  state->config = weights.config;
  state->graph = LayerGraph(weights.config.traits());
  state->options = options;
  state->max_context = options.ResolvedMaxContext(weights.config);
  state->pages_per_sequence =
      (state->max_context + options.kv_page_size - 1) / options.kv_page_size;
  PDSERVE_ASSIGN_OR_RETURN(state->options.kv_pages, options.ResolvedKvPages(state->max_context));
  state->options.num_threads = 1;  // host threads: the GPU does the work
  // No quantized kernels on the GPU: block formats are dequantized to the weight dtype.
  PDSERVE_ASSIGN_OR_RETURN(
      state->plan, BuildKvPlan(weights, options.compression, options.kv_page_size,
                               WeightFormat{options.weight_dtype, /*keep_quantized=*/false}));
  PDSERVE_RETURN_IF_ERROR(CheckSupported(weights.config, options, state->plan));
  std::string why_not;
  if (!cu::CudaDeviceAvailable(&why_not)) {
    return absl::FailedPreconditionError(absl::StrCat("device cuda: no CUDA device: ", why_not));
  }
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&state->stream, cudaStreamNonBlocking));
  PDSERVE_ASSIGN_OR_RETURN(state->model, UploadModel(weights, state->plan, options.weight_dtype,
                                                     state->options.kv_pages, state->max_context));
  PDSERVE_RETURN_IF_ERROR(state->Allocate());
  PDSERVE_RETURN_IF_ERROR(state->AllocateExchange());
  // The uploads and the KV pools' cudaMemset ran on the legacy default stream, which `stream`
  // (non-blocking) does not wait for, and may still be in flight: finish them before any Forward.
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  state->pages = std::make_unique<PageAllocator>(options.kv_page_size, state->options.kv_pages);
  state->table = std::make_unique<SequenceTable>(
      *state->pages, SequenceLimits{options.max_sequences, state->max_context,
                                    options.max_batch_tokens, weights.config.vocab_size});
  return std::unique_ptr<CudaEngine>(new CudaEngine(std::move(state)));
}

CudaEngine::CudaEngine(std::unique_ptr<State> state) : state_(std::move(state)) {}
CudaEngine::~CudaEngine() = default;

const ModelConfig& CudaEngine::config() const { return state_->config; }
const EngineOptions& CudaEngine::options() const { return state_->options; }
int CudaEngine::max_context() const { return state_->max_context; }
const KvPlan& CudaEngine::plan() const { return state_->plan; }
absl::StatusOr<int> CudaEngine::AddSequence() { return state_->table->Add(); }
absl::Status CudaEngine::RemoveSequence(int sequence) {
  PDSERVE_RETURN_IF_ERROR(state_->table->Remove(sequence));
  state_->exchange.needs_upload[sequence] = 0;
  return absl::OkStatus();
}
int CudaEngine::SequenceLength(int sequence) const { return state_->table->Length(sequence); }

absl::StatusOr<int> CudaEngine::AddSequenceWithTokens(int num_tokens) {
  if (state_->exchange.mirror.empty()) return NoHostPages();
  PDSERVE_ASSIGN_OR_RETURN(const int sequence, state_->table->AddWithTokens(num_tokens));
  state_->exchange.needs_upload[sequence] = 1;
  return sequence;
}

absl::StatusOr<KvPageSlots> CudaEngine::SequencePage(int sequence, int cache_layer,
                                                     int page_index) {
  State& s = *state_;
  if (s.exchange.mirror.empty()) return NoHostPages();
  KvPageSlots slots;
  PDSERVE_ASSIGN_OR_RETURN(
      slots.page_id,
      s.table->PageId(sequence, cache_layer, static_cast<int>(s.plan.caches.size()), page_index));
  const DeviceCache& device = s.model.caches[cache_layer];
  HostMirror& mirror = s.exchange.mirror[cache_layer];
  slots.k = mirror.k.data() + int64_t{slots.page_id} * device.k.page_stride;
  slots.v = mirror.v.data() + int64_t{slots.page_id} * device.v.page_stride;
  return slots;
}

void CudaEngine::set_cache_layer_observer(CacheLayerObserver* observer) {
  state_->exchange.observer = observer;
}

// Books the batch, then sends its tokens, positions, store slots and the page tables of its
// sequences to the device. Returns the batch's rows.
absl::StatusOr<int> CudaEngine::State::Begin(std::span<const ForwardChunk> chunks) {
  PDSERVE_ASSIGN_OR_RETURN(segments,
                           table->Begin(chunks, b.host_tokens.data(), b.host_positions.data()));
  const int page_size = options.kv_page_size;
  int n = 0;
  for (const Segment& segment : segments) {
    const std::vector<int32_t>& pages = table->table(segment.sequence).pages();
    for (int i = 0; i < segment.n; ++i, ++n) {
      const int pos = segment.start_pos + i;
      b.host_page_ids.data()[n] = pages[pos / page_size];
      b.host_slots.data()[n] = pos % page_size;
    }
    int32_t* row = b.host_page_table.data() + int64_t{segment.sequence} * pages_per_sequence;
    std::copy(pages.begin(), pages.end(), row);
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(b.page_table.data() + (row - b.host_page_table.data()), row,
                        pages.size() * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  }
  for (auto [device, host] :
       {std::pair{&b.tokens, &b.host_tokens}, std::pair{&b.positions, &b.host_positions},
        std::pair{&b.page_ids, &b.host_page_ids}, std::pair{&b.slots, &b.host_slots}}) {
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device->data(), host->data(), n * sizeof(int32_t),
                                                 cudaMemcpyHostToDevice, stream));
  }
  PDSERVE_RETURN_IF_ERROR(UploadImportedPages());
  exchange.stored_layers.clear();
  exchange.batch_pages.clear();
  if (exchange.observer != nullptr) {
    for (const Segment& segment : segments) {
      const std::vector<int32_t>& pages = table->table(segment.sequence).pages();
      exchange.batch_pages.insert(exchange.batch_pages.end(), pages.begin(), pages.end());
    }
    std::sort(exchange.batch_pages.begin(), exchange.batch_pages.end());
  }
  return n;
}

absl::StatusOr<std::span<const float>> CudaEngine::Forward(std::span<const ForwardChunk> chunks) {
  absl::StatusOr<std::span<const float>> logits = state_->Run(chunks);
  // A failed step may leave copies from or to pinned memory in flight: let them finish before the
  // next Forward rewrites it.
  if (!logits.ok()) {
    cudaStreamSynchronize(state_->stream);
    cudaStreamSynchronize(state_->exchange.copy_stream);
  }
  return logits;
}

absl::StatusOr<std::span<const float>> CudaEngine::State::Run(
    std::span<const ForwardChunk> chunks) {
  State& s = *this;
  PDSERVE_ASSIGN_OR_RETURN(int n, s.Begin(chunks));
  const ModelConfig& c = s.config;
  cu::EmbeddingLookup(s.model.embedding.matrix.data, s.model.embedding.matrix.dtype, c.dim,
                      s.b.tokens.data(), n, s.b.x.data(), s.stream);
  for (int layer = 0; layer < c.n_layers; ++layer) {
    if (layer == s.plan.swiftkv_layer) {
      PDSERVE_RETURN_IF_ERROR(s.SwiftKvProjectAndStore(n));
      PDSERVE_RETURN_IF_ERROR(s.Compact(n));
    }
    PDSERVE_RETURN_IF_ERROR(s.Layer(layer, n));
  }
  PDSERVE_RETURN_IF_ERROR(s.Compact(n));
  cu::RmsNorm(s.b.x.data(), s.model.final_norm.f32(), n, c.dim, c.norm_eps, s.b.xb.data(),
              s.stream);
  PDSERVE_RETURN_IF_ERROR(s.Matmul(s.b.xb.data(), n, s.model.classifier, s.b.logits.data()));
  const size_t count = static_cast<size_t>(n) * c.vocab_size;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(s.b.host_logits.data(), s.b.logits.data(),
                                               count * sizeof(float), cudaMemcpyDeviceToHost,
                                               s.stream));
  PDSERVE_RETURN_IF_ERROR(s.NotifyStored());
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(s.stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaGetLastError());
  return std::span<const float>(s.b.host_logits.data(), count);
}

// Keeps the rows that need logits (SequenceTable::CompactToLogitRows), gathering x and the
// positions on the device; nothing moves when every row is kept. Compaction is idempotent, so
// at most one call per Forward moves rows and writes the pinned buffers it copies from.
absl::Status CudaEngine::State::Compact(int& n) {
  const int32_t* kept = b.kept_scratch.data();
  const int rows = table->CompactToLogitRows(b.kept_scratch.data());
  bool identity = rows == n;
  for (int r = 0; identity && r < rows; ++r) identity = kept[r] == r;
  n = rows;
  if (identity) return absl::OkStatus();
  std::copy(kept, kept + rows, b.host_kept_rows.data());
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(b.kept_rows.data(), b.host_kept_rows.data(),
                                               rows * sizeof(int32_t), cudaMemcpyHostToDevice,
                                               stream));
  cu::GatherRows(b.x.data(), b.kept_rows.data(), rows, config.dim, b.xb.data(), stream);
  std::swap(b.x, b.xb);
  // Positions as floats would round; gather them on the host and send them again.
  int32_t* positions = b.host_compacted_positions.data();
  for (int r = 0; r < rows; ++r) positions[r] = b.host_positions.data()[kept[r]];
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      b.positions.data(), positions, rows * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
  return absl::OkStatus();
}

cu::KvStoreTarget CudaEngine::State::StoreTarget(int cache, int64_t k_column,
                                                 int64_t v_column) const {
  const DeviceCache& device = model.caches[cache];
  cu::KvStoreTarget target;
  target.k = device.k;
  target.v = device.v;
  if (plan.caches[cache].zack()) {
    target.k_basis = device.k_basis.data();
    target.k_basis_offsets = device.k_basis_offsets.data();
  }
  target.k_column = k_column;
  target.v_column = v_column;
  return target;
}

void CudaEngine::State::Store(std::span<const cu::KvStoreTarget> targets, const float* rows,
                              int64_t stride, int n) {
  cu::KvStoreBatch batch;
  batch.n = static_cast<int>(targets.size());
  std::copy(targets.begin(), targets.end(), batch.targets);
  cu::KvStoreRows store{rows,
                        stride,
                        n,
                        b.page_ids.data(),
                        b.slots.data(),
                        options.kv_page_size,
                        config.n_kv_heads,
                        config.head_dim()};
  cu::StoreKv(batch, store, stream);
}

absl::Status CudaEngine::State::Layer(int layer, int n) {
  for (LayerStep step : graph) PDSERVE_RETURN_IF_ERROR(Step(step, layer, n));
  return absl::OkStatus();
}

absl::Status CudaEngine::State::Step(LayerStep step, int layer, int n) {
  const ModelConfig& c = config;
  const DeviceLayer& w = model.layers[layer];
  const LayerPlan& layer_plan = plan.layers[layer];
  const CachePlan& cache = plan.caches[layer_plan.cache];
  const int64_t width = layer_plan.w_in.rows();
  float* q = b.qkv.data();
  switch (step) {
    case LayerStep::kAttentionNorm:
      cu::RmsNorm(b.x.data(), w.attn_norm.f32(), n, c.dim, c.norm_eps, b.xb.data(), stream);
      return absl::OkStatus();
    case LayerStep::kQkvProjection:
      return Matmul(b.xb.data(), n, w.w_in, q);
    case LayerStep::kQkvBias:
    case LayerStep::kQkHeadNorm:  // CheckSupported refuses the families whose graphs have them
      return absl::UnimplementedError(
          absl::StrCat("cuda engine: layer step ", StepName(step), " runs on the CPU only"));
    case LayerStep::kKeyRopeAndStore: {
      if (!layer_plan.writes_kv) return absl::OkStatus();
      cu::ApplyRope(q + c.dim, n, width, c.n_kv_heads, b.positions.data(), model.rope,
                    c.rope_pairing, stream);
      const cu::KvStoreTarget target = StoreTarget(layer_plan.cache, c.dim, c.dim + c.kv_dim());
      Store({&target, 1}, q, width, n);
      return ExportStored(layer_plan.cache);
    }
    case LayerStep::kQueryRope:
      cu::ApplyRope(q, n, width, c.n_heads, b.positions.data(), model.rope, c.rope_pairing, stream);
      if (cache.zack()) {
        const DeviceCache& device = model.caches[layer_plan.cache];
        const cu::QueryProjection projection{device.k_basis.data(),
                                             device.k_basis_offsets.data(),
                                             device.k_dims.data(),
                                             device.q_offsets.data(),
                                             c.n_heads,
                                             c.n_kv_heads,
                                             c.head_dim()};
        cu::ProjectQueries(projection, q, width, n, b.q_packed.data(), cache.q_width, stream);
      }
      return absl::OkStatus();
    case LayerStep::kAttention:
      if (cache.zack()) {
        Attend(layer, b.q_packed.data(), cache.q_width);
      } else {
        Attend(layer, q, width);
      }
      return absl::OkStatus();
    case LayerStep::kOutputProjection:
      return Matmul(b.attn.data(), n, w.wo, b.xb.data());
    case LayerStep::kResidualFfnNorm:
      cu::AddRmsNorm(b.x.data(), b.xb.data(), w.ffn_norm.f32(), n, c.dim, c.norm_eps, b.xn.data(),
                     stream);
      return absl::OkStatus();
    case LayerStep::kGateUpProjection:
      return Matmul(b.xn.data(), n, w.w13, b.gate_up.data());
    case LayerStep::kSwiGlu:
      cu::SwiGlu(b.gate_up.data(), n, c.hidden_dim, b.hb.data(), stream);
      return absl::OkStatus();
    case LayerStep::kDownProjection:
      return Matmul(b.hb.data(), n, w.w2, b.xb.data());
    case LayerStep::kResidual:
      cu::AddInPlace(b.x.data(), b.xb.data(), int64_t{n} * c.dim, stream);
      return absl::OkStatus();
  }
  return absl::InternalError("cuda engine: unknown layer step");
}

// Every SwiftKV cache layer's K/V from x = RMSNorm(h_l): one fused projection, one RoPE over all
// their K heads, one bulk store.
absl::Status CudaEngine::State::SwiftKvProjectAndStore(int n) {
  const ModelConfig& c = config;
  cu::RmsNorm(b.x.data(), model.swiftkv_norm.f32(), n, c.dim, c.norm_eps, b.xb.data(), stream);
  PDSERVE_RETURN_IF_ERROR(Matmul(b.xb.data(), n, model.swiftkv_kv, b.swiftkv.data()));
  const int64_t width = plan.swiftkv_kv.rows();
  const int leaders = static_cast<int>(plan.swiftkv_v_offsets.size());
  cu::ApplyRope(b.swiftkv.data(), n, width, leaders * c.n_kv_heads, b.positions.data(), model.rope,
                c.rope_pairing, stream);
  std::vector<cu::KvStoreTarget> targets;
  const int64_t v_base = int64_t{leaders} * c.kv_dim();
  for (int i = 0; i < leaders; ++i) {
    targets.push_back(StoreTarget(plan.swiftkv_layer + i, int64_t{i} * c.kv_dim(),
                                  v_base + plan.swiftkv_v_offsets[i]));
  }
  Store(targets, b.swiftkv.data(), width, n);
  for (int i = 0; i < leaders; ++i) PDSERVE_RETURN_IF_ERROR(ExportStored(plan.swiftkv_layer + i));
  return absl::OkStatus();
}

void CudaEngine::State::Attend(int layer, const float* q, int64_t q_stride) {
  const ModelConfig& c = config;
  const int cache_index = plan.layers[layer].cache;
  const CachePlan& cache = plan.caches[cache_index];
  const DeviceCache& device = model.caches[cache_index];
  cu::SequenceBatch dense, kcache;
  cu::BatchBounds bounds;
  for (const Segment& segment : segments) {
    kernels::AttentionSequence seq =
        SegmentQueries(segment, q, q_stride, b.attn.data(), cache.out_width);
    seq.kv.k = device.k;
    seq.kv.v = device.v;
    seq.kv.pages = b.page_table.data() + int64_t{segment.sequence} * pages_per_sequence;
    seq.kv.page_size = options.kv_page_size;
    // KCache selects for decode steps; prompts (even their last token alone) attend densely.
    cu::SequenceBatch& batch = cache.kcache && segment.decode ? kcache : dense;
    batch.sequences[batch.n++] = seq;
    bounds.max_queries = std::max(bounds.max_queries, segment.n);
    bounds.max_context = std::max(bounds.max_context, segment.start_pos + segment.n);
  }
  kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
  shape.q_offsets = device.q_offsets.data();
  shape.out_offsets = device.out_offsets.data();
  void* workspace = b.attention_workspace.data();
  if (dense.n > 0) cu::Attention(shape, dense, bounds, workspace, stream);
  if (kcache.n > 0) {
    const KCacheOptions& o = options.compression.kcache;
    cu::KCacheAttention(
        shape, kcache,
        {.top_n = o.top_n, .sink = o.sink, .recent = o.recent, .renormalize = o.renormalize},
        max_context, workspace, nullptr, stream);
  }
}

}  // namespace pdserve
