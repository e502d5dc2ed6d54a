#include "core/engine/llama_engine.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/base/default_init_allocator.h"
#include "core/base/status_macros.h"
#include "core/base/system_memory.h"
#include "core/kv/kv_row_codec.h"
#include "kernels/attention.h"
#include "kernels/attention_importance.h"
#include "kernels/basis_projection.h"
#include "kernels/embedding.h"
#include "kernels/kcache_attention.h"
#include "kernels/matmul.h"
#include "kernels/panel_matrix.h"
#include "kernels/rms_norm.h"
#include "kernels/swiglu.h"

namespace pdserve {

// Rows [first, last) of segments_[segment], all in one KV page.
struct StoreRun {
  int segment = 0;
  int first = 0;
  int last = 0;
};

// Activation buffers sized for max_batch_tokens rows, uninitialized: each Forward writes the rows
// it reads, and rows no call has used (most of `logits` outside eval) never become resident.
struct LlamaEngine::Buffers {
  std::vector<int32_t> tokens;  // [n]
  std::vector<int32_t> positions;
  std::vector<int32_t> kept_rows;                            // [n]: CompactToLogitRows' source rows
  UninitializedVector<float> x, xb, qkv, attn, gate_up, hb;  // [n, width]
  UninitializedVector<float> q_packed;  // [n, n_heads·head_dim]: ZACK-projected q
  UninitializedVector<float> swiftkv;   // [n, swiftkv_kv rows]
  UninitializedVector<float> logits;    // [n, vocab]
  UninitializedVector<float> matmul_workspace;
  UninitializedVector<float> attention_workspace;
  std::vector<kernels::AttentionSequence> attention, kcache;
  std::vector<StoreRun> store_runs;  // per (segment, page) while storing KV
  std::vector<float> projected;      // [threads, head_dim]: a ZACK-projected key
};

namespace {

// A matrix Forward multiplies by, as `format` runs it: a kept quantized one that PanelMatrix does
// not take copied into memory of the engine's own (ApplyOwned), any other as ApplyReleasing leaves
// it — possibly still `source`'s bytes, which the engine's Projection packs into memory of its own
// without a copy in between (TakeSourceProjection).
Tensor ForProjection(const WeightFormat& format, const Tensor& t) {
  Tensor applied = format.ApplyReleasing(t);  // t itself where PanelMatrix does not take it
  return kernels::PanelMatrix::Takes(applied.dtype) ? applied : format.ApplyOwned(t);
}

// The weights Forward streams outside attention (the plan holds those), as `format` runs them and
// in memory of the engine's own (huge pages, see CopyTensor) once packed — the embedding, only
// gathered from, may stay shared with `source` (often a file mapping). gate/up are copied anyway
// when stacked.
ModelWeights OwnedWeights(const ModelWeights& source, const WeightFormat& format) {
  ModelWeights run;
  run.config = source.config;
  run.token_embedding = format.ApplyReleasing(source.token_embedding);
  run.classifier = ForProjection(format, source.classifier);
  run.final_norm = ToF32(source.final_norm);
  for (const LayerWeights& layer : source.layers) {
    LayerWeights& out = run.layers.emplace_back();
    out.attn_norm = layer.attn_norm;
    out.ffn_norm = layer.ffn_norm;
    out.q_norm = layer.q_norm;  // the biases are in the plan, with w_in
    out.k_norm = layer.k_norm;
    VectorsToF32(out);
    out.w1 = format.ApplyReleasing(layer.w1);
    out.w3 = format.ApplyReleasing(layer.w3);
    out.w2 = ForProjection(format, layer.w2);
  }
  return run;
}

// The tensor keeps its shape and dtype but lets go of its bytes (they are packed elsewhere).
void DropBytes(Tensor& t) {
  t.data = nullptr;
  t.owner.reset();
}

// `parts` (a stack) as a projection, packed on `pool`'s threads; when that packed them, they drop
// their bytes. With `release_source`, packed parts release their pages as they are packed.
kernels::Projection TakeProjection(std::span<Tensor> parts, ThreadPool& pool,
                                   bool release_source = false) {
  kernels::Projection projection({parts.begin(), parts.end()}, release_source, &pool);
  if (projection.packed()) {
    for (Tensor& part : parts) DropBytes(part);
  }
  return projection;
}

// A ForProjection matrix as a projection: one packed from `source`'s bytes (a file mapping, often)
// releases their pages as it goes, so that the model is not resident twice.
kernels::Projection TakeSourceProjection(Tensor& t, ThreadPool& pool) {
  return TakeProjection({&t, 1}, pool, true);
}

// Threads for num_threads = 0. Below ~2M layer parameters a matmul is a few microseconds of work
// and waking a second thread costs more than it saves (stories260K: 1 thread ~5x faster than 2).
int AutoThreads(const ModelConfig& c) {
  const int64_t layer_parameters = c.NumParameters() - int64_t{c.vocab_size} * c.dim;
  const int cores = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  return layer_parameters < 2'000'000 ? 1 : cores;
}

// Decode-path queries one Attention call can hold: up to kAttentionDecodeMaxQueries per live
// sequence, within a batch.
int DecodeQueriesBound(const EngineOptions& o) {
  return std::min(o.max_batch_tokens, o.max_sequences * kernels::kAttentionDecodeMaxQueries);
}

// Floats of the workspace dense and KCache attention share.
size_t AttentionFloats(const ModelConfig& c, const EngineOptions& o, int max_context) {
  const kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
  return std::max(kernels::AttentionWorkspaceFloats(shape, o.num_threads, max_context,
                                                    o.kv_page_size, DecodeQueriesBound(o)),
                  kernels::KCacheWorkspaceFloats(shape, o.num_threads, max_context));
}

// Bytes Create allocates for buffers, workspaces, the RoPE table and the KV pool (weights aside).
double PlannedBytes(const ModelConfig& c, const EngineOptions& o, const KvPlan& plan,
                    int max_context, int kv_pages) {
  const double n = o.max_batch_tokens;
  const double activations =
      n * (2.0 * c.dim + 3.0 * c.q_dim() + 2.0 * c.kv_dim() + 3.0 * c.hidden_dim + c.vocab_size +
           (plan.swiftkv() ? static_cast<double>(plan.swiftkv_kv.rows()) : 0.0));
  const double workspaces =
      kernels::MatmulWorkspaceFloats(o.num_threads, std::max({c.dim, c.q_dim(), c.hidden_dim})) +
      static_cast<double>(AttentionFloats(c, o, max_context)) +
      static_cast<double>(max_context) * c.head_dim();
  const double kv = plan.kv_bytes_per_token() * kv_pages * o.kv_page_size;
  return (activations + workspaces) * sizeof(float) + kv;
}

}  // namespace

absl::StatusOr<std::unique_ptr<LlamaEngine>> LlamaEngine::Create(const ModelWeights& weights,
                                                                 const EngineOptions& options) {
  PDSERVE_RETURN_IF_ERROR(ValidateWeights(weights));
  PDSERVE_RETURN_IF_ERROR(options.Validate());
  if (options.device != Device::kCpu) {
    return absl::InvalidArgumentError(
        absl::StrCat("LlamaEngine runs on the CPU; device ", DeviceName(options.device),
                     " needs CreateEngine (core/engine/create_engine.h)"));
  }
  if (options.compression.retention.max_tokens > 0 && options.value_tier_factory &&
      options.compression.kcache.enabled()) {
    return absl::InvalidArgumentError(
        "engine: decode-time eviction (--kvcrush-max-tokens) moves KCache's V rows, which a value "
        "tier from value_tier_factory (the KV store's) does not hold here; drop one of them");
  }
  const ModelConfig& c = weights.config;
  const int max_context = options.ResolvedMaxContext(c);
  EngineOptions resolved = options;
  if (resolved.num_threads == 0) resolved.num_threads = AutoThreads(c);
  PDSERVE_ASSIGN_OR_RETURN(resolved.kv_pages, options.ResolvedKvPages(max_context));
  const WeightFormat format{options.weight_dtype, /*keep_quantized=*/true};
  PDSERVE_ASSIGN_OR_RETURN(KvPlan plan,
                           BuildKvPlan(weights, options.compression, options.kv_page_size, format));
  const double planned = PlannedBytes(c, resolved, plan, max_context, resolved.kv_pages);
  if (planned > kMaxMemoryShare * static_cast<double>(PhysicalMemoryBytes())) {
    return absl::ResourceExhaustedError(
        absl::StrCat("engine: buffers and KV cache for a context of ", max_context, " tokens, ",
                     options.max_sequences, " sequences and batches of ", options.max_batch_tokens,
                     " tokens need ", planned / 1e9, " GB; the machine has ",
                     PhysicalMemoryBytes() / 1e9, " GB. Reduce the context or the sequences."));
  }
  auto engine = std::unique_ptr<LlamaEngine>(
      new LlamaEngine(OwnedWeights(weights, format), std::move(plan), resolved, max_context));
  PDSERVE_RETURN_IF_ERROR(engine->CreateCaches());
  return engine;
}

// K sections in the cache; V sections in the cache, or in the value tier for KCache layers.
absl::Status LlamaEngine::CreateCaches() {
  KvCacheConfig resident;
  resident.page_size = options_.kv_page_size;
  resident.num_pages = options_.kv_pages;
  std::vector<KvSectionLayout> tiered;
  for (const CachePlan& cache : plan_.caches) {
    k_section_.push_back(static_cast<int>(resident.sections.size()));
    resident.sections.push_back(cache.layout.k);
    std::vector<KvSectionLayout>& v_home = cache.kcache ? tiered : resident.sections;
    v_section_.push_back(static_cast<int>(v_home.size()));
    v_home.push_back(cache.layout.v);
  }
  PDSERVE_ASSIGN_OR_RETURN(kv_, PagedKvCache::Create(resident));
  table_ = std::make_unique<SequenceTable>(
      *kv_, SequenceLimits{options_.max_sequences, max_context_, options_.max_batch_tokens,
                           config().vocab_size});
  kept_positions_.resize(options_.max_sequences);
  row_biases_.resize(options_.max_sequences);
  running_scores_.resize(options_.max_sequences);
  running_ld_.resize(options_.max_sequences);
  position_set_.resize(options_.max_sequences);
  if (tiered.empty()) return absl::OkStatus();
  if (options_.value_tier_factory) {
    PDSERVE_ASSIGN_OR_RETURN(
        tier_, options_.value_tier_factory(options_.kv_page_size, options_.kv_pages, tiered));
    if (tier_ == nullptr) return absl::InvalidArgumentError("engine: value_tier_factory gave null");
    return absl::OkStatus();
  }
  PDSERVE_ASSIGN_OR_RETURN(
      std::unique_ptr<InProcessValueTier> local,
      InProcessValueTier::Create(options_.kv_page_size, options_.kv_pages, std::move(tiered)));
  local_tier_ = local.get();
  tier_ = std::move(local);
  return absl::OkStatus();
}

LlamaEngine::LlamaEngine(ModelWeights weights, KvPlan plan, const EngineOptions& options,
                         int max_context)
    : weights_(std::move(weights)),
      plan_(std::move(plan)),
      graph_(LayerGraph(weights_.config.traits())),
      options_(options),
      max_context_(max_context),
      pool_(options.num_threads),
      rope_(weights_.config.head_dim(), max_context, weights_.config.rope_theta,
            weights_.config.rope_scaling),
      buffers_(std::make_unique<Buffers>()) {
  const ModelConfig& c = weights_.config;
  const size_t n = options.max_batch_tokens;
  Buffers& b = *buffers_;
  b.tokens.resize(n);
  b.positions.resize(n);
  b.kept_rows.resize(n);
  int64_t qkv_width = 0;
  for (const LayerPlan& layer : plan_.layers) qkv_width = std::max(qkv_width, layer.w_in.rows());
  const int64_t swiftkv_width = plan_.swiftkv() ? plan_.swiftkv_kv.rows() : 0;
  const bool zack = plan_.caches.front().zack();
  // Attention reads queries of at most q_dim columns and writes outputs of at most q_dim (ZACK
  // packs both narrower).
  const int64_t q_dim = c.q_dim();
  for (auto [buffer, width] :
       {std::pair{&b.x, int64_t{c.dim}}, std::pair{&b.xb, int64_t{c.dim}},
        std::pair{&b.qkv, qkv_width}, std::pair{&b.attn, q_dim},
        std::pair{&b.q_packed, zack ? q_dim : 0}, std::pair{&b.swiftkv, swiftkv_width},
        std::pair{&b.gate_up, int64_t{2} * c.hidden_dim},
        std::pair{&b.hb, int64_t{c.hidden_dim}}}) {
    buffer->resize(n * width);
  }
  for (size_t i = 0; i < weights_.layers.size(); ++i) {
    LayerWeights& layer = weights_.layers[i];
    LayerPlan& layer_plan = plan_.layers[i];
    StackedWeights w13 = WeightFormat{options.weight_dtype}.Stack({layer.w1, layer.w3});
    layer.w1 = layer.w3 = Tensor{};  // now only in w13
    projections_.push_back({.w_in = TakeProjection(layer_plan.w_in.parts, pool_),
                            .wo = TakeProjection({&layer_plan.wo, 1}, pool_),
                            .w13 = kernels::Projection(std::move(w13.parts), false, &pool_),
                            .w2 = TakeSourceProjection(layer.w2, pool_)});
  }
  classifier_ = TakeSourceProjection(weights_.classifier, pool_);
  if (plan_.swiftkv()) swiftkv_kv_ = TakeProjection(plan_.swiftkv_kv.parts, pool_);
  b.logits.resize(n * c.vocab_size);
  b.matmul_workspace.resize(
      kernels::MatmulWorkspaceFloats(pool_.size(), std::max({c.dim, c.q_dim(), c.hidden_dim})));
  b.attention_workspace.resize(AttentionFloats(c, options, max_context));
  b.attention.reserve(options.max_sequences);
  b.kcache.reserve(options.max_sequences);
  b.projected.resize(static_cast<size_t>(pool_.size()) * c.head_dim());
  if (options.compression.retention.enabled()) {
    importance_workspace_.resize(kernels::AttentionImportanceWorkspaceFloats(
        {c.n_heads, c.n_kv_heads, c.head_dim()}, pool_.size(), max_context, options.kv_page_size));
  }
}

LlamaEngine::~LlamaEngine() = default;

absl::StatusOr<int> LlamaEngine::AddSequence() {
  PDSERVE_ASSIGN_OR_RETURN(const int sequence, table_->Add());
  ForgetPositions(sequence);
  return sequence;
}

absl::StatusOr<int> LlamaEngine::AddSequenceWithTokens(int num_tokens) {
  PDSERVE_ASSIGN_OR_RETURN(const int sequence, table_->AddWithTokens(num_tokens));
  ForgetPositions(sequence);
  return sequence;
}

absl::StatusOr<KvPageSlots> LlamaEngine::SequencePage(int sequence, int cache_layer,
                                                      int page_index) {
  KvPageSlots slots;
  PDSERVE_ASSIGN_OR_RETURN(
      slots.page_id,
      table_->PageId(sequence, cache_layer, static_cast<int>(plan_.caches.size()), page_index));
  slots.k = kv_->Page(k_section_[cache_layer], slots.page_id);
  if (plan_.caches[cache_layer].kcache) {
    slots.tier_section = v_section_[cache_layer];
    slots.v = tier_->WritablePage(slots.tier_section, slots.page_id);
  } else {
    slots.v = kv_->Page(v_section_[cache_layer], slots.page_id);
  }
  return slots;
}

absl::Status LlamaEngine::RemoveSequence(int sequence) {
  PDSERVE_RETURN_IF_ERROR(table_->Remove(sequence));
  ForgetPositions(sequence);
  return absl::OkStatus();
}

int LlamaEngine::SequenceLength(int sequence) const { return table_->Length(sequence); }

int LlamaEngine::SequencePosition(int sequence) const { return table_->Position(sequence); }

absl::Status LlamaEngine::SetSequencePosition(int sequence, int position) {
  PDSERVE_RETURN_IF_ERROR(table_->SetPosition(sequence, position));
  position_set_[sequence] = position != table_->Length(sequence);
  return absl::OkStatus();
}

absl::Status LlamaEngine::CheckTier(std::span<const ForwardChunk> chunks) const {
  if (tier_ == nullptr || local_tier_ != nullptr) return absl::OkStatus();
  for (const ForwardChunk& chunk : chunks) {
    if (chunk.tokens.size() > 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "engine: a chunk of ", chunk.tokens.size(), " tokens for sequence ", chunk.sequence,
          " needs dense attention over KCache V, which a value tier from value_tier_factory does "
          "not offer; this engine runs decode steps (one-token chunks) only"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::span<const float>> LlamaEngine::Forward(std::span<const ForwardChunk> chunks) {
  PDSERVE_RETURN_IF_ERROR(CheckTier(chunks));
  Buffers& b = *buffers_;
  // Nothing below fails: observers see the new lengths (SequenceLength counts this Forward's
  // tokens once their cache layer is stored).
  PDSERVE_ASSIGN_OR_RETURN(segments_, table_->Begin(chunks, b.tokens.data(), b.positions.data()));
  int n = 0;
  for (const Segment& segment : segments_) n += segment.n;
  BeginRetention();
  kernels::EmbeddingLookup(weights_.token_embedding, b.tokens.data(), n, b.x.data());
  for (int layer = 0; layer < config().n_layers; ++layer) {
    if (layer == plan_.swiftkv_layer) {
      SwiftKvProjectAndStore(n);
      n = CompactToLogitRows();
    }
    Layer(layer, n);
  }
  RetainTokens();
  const int rows = ComputeLogits(CompactToLogitRows());
  return std::span<const float>(b.logits.data(), static_cast<size_t>(rows) * config().vocab_size);
}

void LlamaEngine::ForTokens(int n, const ThreadPool::RangeFn& fn) {
  constexpr int kMinTokensPerThread = 8;
  if (n < 2 * kMinTokensPerThread) {
    fn(0, n, 0);
  } else {
    pool_.ParallelFor(n, kMinTokensPerThread, fn);
  }
}

void LlamaEngine::Layer(int layer, int n) {
  if (observer_ != nullptr) observer_->LayerInput(layer, buffers_->x.data(), n);
  for (LayerStep step : graph_) Step(step, layer, n);
}

void LlamaEngine::Step(LayerStep step, int layer, int n) {
  const ModelConfig& c = config();
  const LayerWeights& w = weights_.layers[layer];
  const LayerPlan& plan = plan_.layers[layer];
  const LayerProjections& p = projections_[layer];
  Buffers& b = *buffers_;
  std::span<float> ws(b.matmul_workspace);
  const int64_t width = p.w_in.rows(), dim = c.dim, hidden = c.hidden_dim;
  switch (step) {
    case LayerStep::kAttentionNorm:
      RmsNormRows(b.x.data(), w.attn_norm, n, b.xb.data());
      return;
    case LayerStep::kQkvProjection:
      kernels::Matmul(pool_, b.xb.data(), n, p.w_in, b.qkv.data(), ws);
      return;
    case LayerStep::kQkvBias:
      AddBiasAndNormHeads(b.qkv.data(), width, n, plan.b_in, {});
      return;
    case LayerStep::kQkHeadNorm: {
      const HeadNorm norms[] = {{0, c.n_heads, w.q_norm.as<float>()},
                                {c.q_dim(), c.n_kv_heads, w.k_norm.as<float>()}};
      AddBiasAndNormHeads(b.qkv.data(), width, n, {},
                          std::span(norms).first(plan.writes_kv ? 2 : 1));
      return;
    }
    case LayerStep::kKeyRopeAndStore: {
      if (!plan.writes_kv) return;
      float* k = b.qkv.data() + c.q_dim();
      ForTokens(n, [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          kernels::ApplyRope(k + t * width, c.n_kv_heads, rope_, b.positions[t], c.rope_pairing);
        }
      });
      StoreKv(plan.cache, k, k + c.kv_dim(), width, n);
      CacheLayerStored(plan.cache);
      return;
    }
    case LayerStep::kQueryRope:
      RotateQueries(layer, b.qkv.data(), width, n);
      return;
    case LayerStep::kAttention: {
      const CachePlan& cache = plan_.caches[plan.cache];
      const float* q = cache.zack() ? b.q_packed.data() : b.qkv.data();
      const int64_t q_stride = cache.zack() ? cache.q_width : width;
      Attend(layer, q, q_stride);
      ObserveImportance(layer, q, q_stride);
      return;
    }
    case LayerStep::kOutputProjection:
      kernels::Matmul(pool_, b.attn.data(), n, p.wo, b.xb.data(), ws);
      return;
    case LayerStep::kResidualFfnNorm:
      ForTokens(n, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin * dim; i < end * dim; ++i) b.x[i] += b.xb[i];
        kernels::RmsNorm(b.x.data() + begin * dim, w.ffn_norm.as<float>(), end - begin, c.dim,
                         c.norm_eps, b.xb.data() + begin * dim);
      });
      return;
    case LayerStep::kGateUpProjection:
      kernels::Matmul(pool_, b.xb.data(), n, p.w13, b.gate_up.data(), ws);
      return;
    case LayerStep::kSwiGlu:
      ForTokens(n, [&](int64_t begin, int64_t end, int) {
        for (int64_t t = begin; t < end; ++t) {
          const float* gate = b.gate_up.data() + t * 2 * hidden;
          kernels::SwiGlu(gate, gate + hidden, hidden, b.hb.data() + t * hidden);
        }
      });
      return;
    case LayerStep::kDownProjection:
      kernels::Matmul(pool_, b.hb.data(), n, p.w2, b.xb.data(), ws);
      return;
    case LayerStep::kResidual:
      ForTokens(n, [&](int64_t begin, int64_t end, int) {
        for (int64_t i = begin * dim; i < end * dim; ++i) b.x[i] += b.xb[i];
      });
      return;
  }
}

void LlamaEngine::RmsNormRows(const float* x, const Tensor& weight, int n, float* out) {
  const ModelConfig& c = config();
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    kernels::RmsNorm(x + begin * c.dim, weight.as<float>(), end - begin, c.dim, c.norm_eps,
                     out + begin * c.dim);
  });
}

void LlamaEngine::AddBiasAndNormHeads(float* rows, int64_t stride, int n,
                                      std::span<const float> bias,
                                      std::span<const HeadNorm> norms) {
  if (bias.empty() && norms.empty()) return;
  const ModelConfig& c = config();
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      float* row = rows + t * stride;
      for (size_t i = 0; i < bias.size(); ++i) row[i] += bias[i];
      for (const HeadNorm& norm : norms) {
        kernels::RmsNorm(row + norm.offset, norm.weights, norm.heads, c.head_dim(), c.norm_eps,
                         row + norm.offset);
      }
    }
  });
}

void LlamaEngine::SwiftKvProjectAndStore(int n) {
  const ModelConfig& c = config();
  Buffers& b = *buffers_;
  RmsNormRows(b.x.data(), plan_.swiftkv_norm, n, b.xb.data());
  kernels::Matmul(pool_, b.xb.data(), n, swiftkv_kv_, b.swiftkv.data(), b.matmul_workspace);
  const int64_t width = swiftkv_kv_.rows();
  const int leaders = static_cast<int>(plan_.swiftkv_v_offsets.size());
  std::vector<HeadNorm> norms;
  for (int i = 0; i < leaders && !plan_.swiftkv_k_norms.empty(); ++i) {
    norms.push_back({int64_t{i} * c.kv_dim(), c.n_kv_heads,
                     plan_.swiftkv_k_norms.data() + int64_t{i} * c.head_dim()});
  }
  AddBiasAndNormHeads(b.swiftkv.data(), width, n, plan_.swiftkv_b, norms);
  // One RoPE call per token over every leader's K heads: they sit side by side.
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      kernels::ApplyRope(b.swiftkv.data() + t * width, leaders * c.n_kv_heads, rope_,
                         b.positions[t], c.rope_pairing);
    }
  });
  const float* v_base = b.swiftkv.data() + int64_t{leaders} * c.kv_dim();
  for (int i = 0; i < leaders; ++i) {
    StoreKv(plan_.swiftkv_layer + i, b.swiftkv.data() + int64_t{i} * c.kv_dim(),
            v_base + plan_.swiftkv_v_offsets[i], width, n);
  }
  for (int i = 0; i < leaders; ++i) CacheLayerStored(plan_.swiftkv_layer + i);
}

int LlamaEngine::CompactToLogitRows() {
  const int dim = config().dim;
  Buffers& b = *buffers_;
  const int rows = table_->CompactToLogitRows(b.kept_rows.data());
  for (int r = 0; r < rows; ++r) {  // kept_rows[r] ≥ r: moving forward never overwrites a source
    const int from = b.kept_rows[r];
    if (from == r) continue;
    std::memmove(b.x.data() + int64_t{r} * dim, b.x.data() + int64_t{from} * dim,
                 sizeof(float) * dim);
    b.positions[r] = b.positions[from];
  }
  return rows;
}

void LlamaEngine::RotateQueries(int layer, float* q, int64_t stride, int n) {
  const ModelConfig& c = config();
  const CachePlan& cache = plan_.caches[plan_.layers[layer].cache];
  const int d = c.head_dim(), group = c.n_heads / c.n_kv_heads;
  Buffers& b = *buffers_;
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      kernels::ApplyRope(q + t * stride, c.n_heads, rope_, b.positions[t], c.rope_pairing);
    }
  });
  if (observer_ != nullptr) observer_->Queries(layer, q, stride, n);
  if (!cache.zack()) return;
  ForTokens(n, [&](int64_t begin, int64_t end, int) {
    for (int64_t t = begin; t < end; ++t) {
      for (int h = 0; h < c.n_heads; ++h) {
        const int g = h / group;
        kernels::ProjectRows(cache.k_basis.data() + cache.k_basis_offsets[g], cache.layout.k.dim(g),
                             d, q + t * stride + int64_t{h} * d,
                             b.q_packed.data() + t * cache.q_width + cache.q_offsets[h]);
      }
    }
  });
}

void LlamaEngine::StoreKv(int cache_index, float* k, const float* v, int64_t stride, int n) {
  const ModelConfig& c = config();
  const CachePlan& cache = plan_.caches[cache_index];
  const int d = c.head_dim(), page_size = options_.kv_page_size;
  if (observer_ != nullptr) observer_->CachedKv(cache_index, k, v, stride, n);
  // One task per (segment, page): the rows of a page are written by one thread, in order.
  const int v_section = v_section_[cache_index], k_section = k_section_[cache_index];
  Buffers& b = *buffers_;
  b.store_runs.clear();
  for (size_t s = 0; s < segments_.size(); ++s) {
    const Segment& segment = segments_[s];
    for (int i = 0; i < segment.n;) {
      const int page_end = ((segment.start_pos + i) / page_size + 1) * page_size;
      const int last = std::min(segment.n, page_end - segment.start_pos);
      b.store_runs.push_back({static_cast<int>(s), i, last});
      i = last;
    }
  }
  auto store = [&](const StoreRun& run, float* projected) {
    const Segment& segment = segments_[run.segment];
    const std::vector<int32_t>& pages = table_->table(segment.sequence).pages();
    for (int i = run.first; i < run.last; ++i) {
      const int64_t t = segment.row + i;
      const int pos = segment.start_pos + i;
      const int32_t page = pages[pos / page_size];
      uint8_t* k_page = kv_->Page(k_section, page);
      uint8_t* v_page =
          cache.kcache ? tier_->WritablePage(v_section, page) : kv_->Page(v_section, page);
      int v_offset = 0;
      for (int g = 0; g < c.n_kv_heads; ++g) {
        const float* k_row = k + t * stride + int64_t{g} * d;
        if (cache.zack()) {
          kernels::ProjectRows(cache.k_basis.data() + cache.k_basis_offsets[g],
                               cache.layout.k.dim(g), d, k_row, projected);
          k_row = projected;
        }
        WriteKvRow(cache.layout.k, k_page, g, pos % page_size, k_row);
        WriteKvRow(cache.layout.v, v_page, g, pos % page_size, v + t * stride + v_offset);
        v_offset += cache.layout.v.dim(g);
      }
    }
  };
  pool_.ParallelForDynamic(static_cast<int64_t>(b.store_runs.size()), 1,
                           [&](int64_t begin, int64_t end, int thread) {
                             for (int64_t r = begin; r < end; ++r) {
                               store(b.store_runs[r], b.projected.data() + int64_t{thread} * d);
                             }
                           });
}

kernels::PagedKvView LlamaEngine::CacheView(int cache_index, const BlockTable& table) const {
  const CachePlan& cache = plan_.caches[cache_index];
  const int ks = k_section_[cache_index], vs = v_section_[cache_index];
  kernels::PagedKvView view;
  view.k = SectionView(cache.layout.k, kv_->section_pool(ks), kv_->section_stride(ks));
  if (!cache.kcache) {
    view.v = SectionView(cache.layout.v, kv_->section_pool(vs), kv_->section_stride(vs));
  } else if (local_tier_ != nullptr) {
    view.v =
        SectionView(cache.layout.v, local_tier_->section_pool(vs), local_tier_->section_stride(vs));
  } else {  // decode steps only (Forward refuses the rest): KCache fetches V through the tier
    view.v = SectionView(cache.layout.v, nullptr, 0);
  }
  view.pages = table.pages().data();
  view.page_size = options_.kv_page_size;
  return view;
}

kernels::AttentionShape LlamaEngine::CacheShape(int cache_index) const {
  const ModelConfig& c = config();
  const CachePlan& cache = plan_.caches[cache_index];
  kernels::AttentionShape shape{c.n_heads, c.n_kv_heads, c.head_dim()};
  shape.q_offsets = cache.q_offsets.data();
  shape.out_offsets = cache.out_offsets.data();
  return shape;
}

void LlamaEngine::Attend(int layer, const float* q, int64_t q_stride) {
  const int cache_index = plan_.layers[layer].cache;
  const CachePlan& cache = plan_.caches[cache_index];
  Buffers& b = *buffers_;
  b.attention.clear();
  b.kcache.clear();
  for (const Segment& segment : segments_) {
    kernels::AttentionSequence seq =
        SegmentQueries(segment, q, q_stride, b.attn.data(), cache.out_width);
    seq.kv = CacheView(cache_index, table_->table(segment.sequence));
    seq.token_bias = RowBiases(segment.sequence, cache_index);
    // KCache selects for decode steps; prompts (even their last token alone) attend densely.
    (cache.kcache && segment.decode ? b.kcache : b.attention).push_back(seq);
  }
  const kernels::AttentionShape shape = CacheShape(cache_index);
  if (!b.attention.empty()) {
    kernels::Attention(pool_, shape, b.attention, b.attention_workspace);
  }
  if (!b.kcache.empty()) {
    const KCacheOptions& o = options_.compression.kcache;
    const int v_section = v_section_[cache_index];
    auto fetch = [&](int sequence, int page_index, int head) {
      return tier_->FetchHead(v_section, b.kcache[sequence].kv.pages[page_index], head);
    };
    kernels::KCacheAttention(
        pool_, shape, b.kcache,
        {.top_n = o.top_n, .sink = o.sink, .recent = o.recent, .renormalize = o.renormalize}, fetch,
        b.attention_workspace);
  }
}

int LlamaEngine::ComputeLogits(int rows) {
  const ModelConfig& c = config();
  Buffers& b = *buffers_;
  kernels::RmsNorm(b.x.data(), weights_.final_norm.as<float>(), rows, c.dim, c.norm_eps,
                   b.xb.data());
  kernels::Matmul(pool_, b.xb.data(), rows, classifier_, b.logits.data(), b.matmul_workspace);
  return rows;
}

}  // namespace pdserve
