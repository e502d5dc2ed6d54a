// LlamaEngine: the fast CPU forward pass of a Llama-family model over a batch of sequences with a
// paged KV cache. One Forward call takes any mix of prefill chunks (many tokens of a sequence) and
// decode steps (one token), runs every matmul over all their tokens at once (SGEMM for prefill
// sized batches, GEMV for decode sized ones) and attention per sequence.
//
// Weights are converted once at Create to EngineOptions::weight_dtype and held in memory of the
// engine's own, except quantized matrices (GGUF block formats), which stay as stored and are read
// in place (WeightFormat, core/model/weight_format.h); q/k/v and gate/up projections are stacked
// into one matrix each, so a layer runs four matmuls. SwiftKV models (ModelWeights::swiftkv) run
// prompt tokens through the first l layers only, computing every later layer's KV from h_l in one
// fused matmul; ZACK, FP8 and KCache (EngineOptions::compression) change what the cache stores and
// how it is read (core/engine/kv_plan.h). Buffers, workspaces, the KV pool and the thread pool are
// allocated at Create (ResourceExhausted up front when they would not fit in memory); Forward
// allocates only small bookkeeping (page lists, task closures) and, with token retention, its
// scores: per retaining prompt caches · n_kv_heads · prompt floats for that Forward, per decoding
// sequence under max_tokens its running scores (as wide as its rows). Not thread-safe: one caller
// drives an engine.
//
// Token retention (KvCompression::retention, KVCrush): a Forward with retain chunks scores each
// such sequence's tokens per cache layer from the chunk's last queries as its layers run, then
// compacts the kept rows to the front of the sequence's pages and frees the rest; a
// CacheLayerObserver then hears of every cache layer only after that compaction.
//
// Disaggregation (Engine::SequencePage, core/engine/kv_transfer.h): its pool is host memory, so
// pages are exported and imported in place. Its KCache V pages may live in a value tier of the
// caller's (EngineOptions::value_tier_factory).
#ifndef PDSERVE_CORE_ENGINE_LLAMA_ENGINE_H_
#define PDSERVE_CORE_ENGINE_LLAMA_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/thread_pool.h"
#include "core/engine/engine.h"
#include "core/engine/kv_compression.h"
#include "core/engine/kv_plan.h"
#include "core/engine/sequence_table.h"
#include "core/kv/paged_kv_cache.h"
#include "core/kv/value_tier.h"
#include "core/model/layer_graph.h"
#include "core/model/model_weights.h"
#include "kernels/kv_view.h"
#include "kernels/projection.h"
#include "kernels/rope.h"

namespace pdserve {

// Sees intermediate values of a Forward, for calibration. Called on the Forward caller's thread
// between steps; pointers are valid during the call only. Rows are the tokens the step ran on.
class ForwardObserver {
 public:
  virtual ~ForwardObserver() = default;
  // h_j, the residual stream entering layer j: [n, dim].
  virtual void LayerInput(int layer, const float* x, int n) = 0;
  // Post-RoPE queries of layer j before any ZACK projection: [n, n_heads·head_dim], rows `stride`
  // floats apart.
  virtual void Queries(int layer, const float* q, int64_t stride, int n) = 0;
  // What cache layer c is given to store, before ZACK and FP8: post-RoPE k [n, kv_dim] and v
  // [n, kv_dim] (under ZACK v is already V/O-folded, Σ r_v wide), rows `stride` floats apart.
  virtual void CachedKv(int cache_layer, const float* k, const float* v, int64_t stride, int n) = 0;
};

class LlamaEngine : public Engine {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaEngine>> Create(const ModelWeights& weights,
                                                             const EngineOptions& options);
  ~LlamaEngine();

  const ModelConfig& config() const override { return weights_.config; }
  const EngineOptions& options() const override { return options_; }
  int max_context() const override { return max_context_; }

  absl::StatusOr<int> AddSequence() override;
  absl::StatusOr<int> AddSequenceWithTokens(int num_tokens) override;
  absl::Status RemoveSequence(int sequence) override;
  int SequenceLength(int sequence) const override;
  int SequencePosition(int sequence) const override;
  absl::Status SetSequencePosition(int sequence, int position) override;

  // The plan's f32/f16/bf16 matrices keep their shapes and dtypes but no bytes: the engine packed
  // them (projections_).
  const KvPlan& plan() const override { return plan_; }
  // Pages in place: K in the pool, V in the value tier for a KCache cache layer.
  absl::StatusOr<KvPageSlots> SequencePage(int sequence, int cache_layer, int page_index) override;
  // V bytes decode steps fetched from the value tier (KCache), since creation.
  int64_t kv_bytes_fetched() const override { return tier_ ? tier_->bytes_fetched() : 0; }
  void set_cache_layer_observer(CacheLayerObserver* observer) override {
    layer_observer_ = observer;
  }
  // Calibration taps; not owned; null to stop observing.
  void set_observer(ForwardObserver* observer) { observer_ = observer; }

  absl::StatusOr<std::span<const float>> Forward(std::span<const ForwardChunk> chunks) override;

 private:
  struct Buffers;
  LlamaEngine(ModelWeights weights, KvPlan plan, const EngineOptions& options, int max_context);
  absl::Status CreateCaches();

  // FailedPrecondition for a chunk of several tokens when KCache V lives in a remote tier.
  absl::Status CheckTier(std::span<const ForwardChunk> chunks) const;
  // Runs the layer's graph (graph_) over the n rows of buffers_->x.
  void Layer(int layer, int n);
  void Step(LayerStep step, int layer, int n);
  // out = RmsNorm(x) · weight ([dim] f32), n rows of dim.
  void RmsNormRows(const float* x, const Tensor& weight, int n, float* out);
  // RMSNorm weights ([head_dim]) for `heads` heads starting `offset` floats into a row.
  struct HeadNorm {
    int64_t offset;
    int heads;
    const float* weights;
  };
  // The family's extras on n projected rows of `stride` floats, before RoPE: `bias` added to each
  // row's first bias.size() floats, then every head of `norms` RMS-normalized in place.
  void AddBiasAndNormHeads(float* rows, int64_t stride, int n, std::span<const float> bias,
                           std::span<const HeadNorm> norms);
  // SwiftKV: every leader's K/V from x = RMSNorm(h_l) for all n rows (with the plan's biases and
  // K head norms), stored in its cache.
  void SwiftKvProjectAndStore(int n);
  // Keeps only the rows that need logits (a segment's last, or all when all_logits), moved to the
  // front; returns their count. Idempotent.
  int CompactToLogitRows();
  // RoPE on the queries of every row; under ZACK also projects them into the packed buffer.
  void RotateQueries(int layer, float* q, int64_t stride, int n);
  void StoreKv(int cache, float* k, const float* v, int64_t stride, int n);
  // Runs fn over tokens [0, n) on the pool when n is large enough to pay for it, else inline.
  void ForTokens(int n, const ThreadPool::RangeFn& fn);
  void Attend(int layer, const float* q, int64_t q_stride);
  kernels::PagedKvView CacheView(int cache, const BlockTable& table) const;
  kernels::AttentionShape CacheShape(int cache) const;
  // Tells the layer observer that `cache` is stored, or, in a Forward that retains, remembers to
  // once RetainTokens has compacted it.
  void CacheLayerStored(int cache);

  // Token retention, in llama_engine_retention.cc. A sequence of this Forward that keeps part of
  // its tokens at its end: its segment and tokens, and whether it is a prompt (scored into
  // `importance`, [caches, n_kv_heads, tokens]) or a decode step past max_tokens (scored by its
  // running scores).
  struct Retaining {
    int segment = 0;
    int tokens = 0;
    bool prompt = true;
    std::vector<float> importance;
  };
  // Picks this Forward's retaining sequences (retain chunks holding more than the budget, decode
  // steps reaching max_tokens + a page) and its decode steps that add to their running scores.
  void BeginRetention();
  // Adds the importance of each retaining prompt's window queries, and of each scored decode
  // step's query, for `layer`'s cache.
  void ObserveImportance(int layer, const float* q, int64_t q_stride);
  // Selects, compacts and truncates every retaining sequence; then tells the layer observer.
  void RetainTokens();
  // One retaining sequence: each cache layer keeps its `budget` best rows of [0, tokens) by
  // `scores` ([caches, n_kv_heads, ld], rows [0, tokens) read; null: the recent policy's, which
  // needs none); rows, positions and running scores move to the front.
  void KeepSelected(int sequence, int tokens, int budget, const float* scores, int64_t ld);
  // Makes the sequence's running scores hold rows [0, tokens), keeping those it holds.
  void GrowRunningScores(int sequence, int tokens);
  // Position of row `row` of cache layer `cache` of a live sequence; -1 for one given its
  // position by SetSequencePosition.
  int32_t RowPosition(int sequence, int cache, int row) const override;
  float RowScoreBias(int sequence, int cache, int row) const override;
  absl::Status StoreRowScoreBiases(int sequence, int cache, int first,
                                   std::span<const float> biases) override;
  // The sequence's row biases for cache layer `cache` (token_bias of its attention), or null
  // when it has none.
  const float* RowBiases(int sequence, int cache) const;
  // Makes room for the sequence's row biases: zero for every row of every cache layer.
  void AllocateRowBiases(int sequence);
  // A new sequence in slot `sequence`: no retained positions, no position set, no row biases.
  void ForgetPositions(int sequence);
  int ComputeLogits(int n);

  ModelWeights weights_;  // embedding, norms, MLP and classifier (attention weights are in plan_)
  KvPlan plan_;
  std::vector<LayerStep> graph_;  // every layer's steps (the family's LayerGraph)
  // The matrices Forward multiplies by, as kernels::Projection runs them (f32/f16/bf16 packed once
  // into the GEMM's panels); the tensors of packed ones, in plan_ and weights_, keep their shapes
  // and dtypes but no bytes.
  struct LayerProjections {
    kernels::Projection w_in, wo;
    kernels::Projection w13;  // [2·hidden, dim] = [w1; w3]
    kernels::Projection w2;
  };
  std::vector<LayerProjections> projections_;
  kernels::Projection classifier_, swiftkv_kv_;
  EngineOptions options_;
  int max_context_;
  ThreadPool pool_;
  kernels::RopeTable rope_;
  std::unique_ptr<PagedKvCache> kv_;
  std::unique_ptr<ValueTier> tier_;           // KCache V pages; null when no layer uses KCache
  InProcessValueTier* local_tier_ = nullptr;  // tier_ when in-process: dense attention reads it
  std::vector<int> k_section_, v_section_;    // per cache layer: section in kv_ (V: or in tier_)
  std::unique_ptr<SequenceTable> table_;      // after kv_: it allocates from kv_
  std::span<Segment> segments_;               // of the current Forward, in table_
  std::unique_ptr<Buffers> buffers_;
  ForwardObserver* observer_ = nullptr;
  CacheLayerObserver* layer_observer_ = nullptr;
  std::vector<Retaining> retaining_;         // of the current Forward
  std::vector<float> importance_workspace_;  // AttentionImportance's, with retention only
  // Decode-time eviction (retention.max_tokens): the segments of this Forward's scored decode
  // steps, and per sequence slot the running (H2O) scores of its rows, [caches, n_kv_heads,
  // running_ld_], zero for rows no decode step has scored yet; empty until its first step, then
  // max(rows, max_tokens + a page) wide (grown when a later chunk adds rows).
  std::vector<int> scoring_;
  std::vector<std::vector<float>> running_scores_;
  std::vector<int> running_ld_;
  // Per sequence slot, per cache layer: the positions of the rows token retention kept (rows
  // beyond: their row + the tokens dropped); empty when nothing was dropped. position_set_: the
  // slot's position came from SetSequencePosition (its rows' positions are unknown).
  std::vector<std::vector<std::vector<int32_t>>> kept_positions_;
  std::vector<char> position_set_;
  // Per sequence slot, per cache layer: each row's score bias (KVCrush representatives'
  // weights), max_context_ floats, 0 beyond the rows; empty until a selection or an import gives
  // the sequence one.
  std::vector<std::vector<std::vector<float>>> row_biases_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_LLAMA_ENGINE_H_
