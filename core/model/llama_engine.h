// LlamaEngine: the fast CPU forward pass of a Llama-family model over a batch of sequences with a
// paged KV cache. One Forward call takes any mix of prefill chunks (many tokens of a sequence) and
// decode steps (one token), runs every matmul over all their tokens at once (SGEMM for prefill
// sized batches, GEMV for decode sized ones) and attention per sequence.
//
// Weights are converted once at Create to EngineOptions::weight_dtype and held in memory of the
// engine's own; q/k/v and gate/up projections are stacked into one matrix each, so a layer runs
// four matmuls. SwiftKV models (ModelWeights::swiftkv) run prompt tokens through the first l
// layers only, computing every later layer's KV from h_l in one fused matmul; ZACK, FP8 and
// KCache (EngineOptions::compression) change what the cache stores and how it is read
// (core/model/kv_plan.h). Buffers, workspaces, the KV pool and the thread pool are allocated at
// Create (ResourceExhausted up front when they would not fit in memory); Forward allocates only
// small bookkeeping (page lists, task closures). Not thread-safe: one caller drives an engine.
//
// Disaggregation (core/model/kv_transfer.h): a prefill engine exports a sequence's pages through
// SequencePage (ForwardObserver::CacheLayerStored says when a cache layer is complete); a decode
// engine takes them into a sequence made by AddSequenceWithTokens and continues it. Its KCache V
// pages may live in a value tier of the caller's (EngineOptions::value_tier_factory).
#ifndef PDSERVE_CORE_MODEL_LLAMA_ENGINE_H_
#define PDSERVE_CORE_MODEL_LLAMA_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/thread_pool.h"
#include "core/kv/paged_kv_cache.h"
#include "core/kv/value_tier.h"
#include "core/model/kv_compression.h"
#include "core/model/kv_plan.h"
#include "core/model/model_weights.h"
#include "kernels/kv_view.h"
#include "kernels/rope.h"

namespace pdserve {

struct EngineOptions {
  DType weight_dtype = DType::kF32;
  int num_threads = 1;         // 0 = automatic: every core, or one for models too small to split
  int max_batch_tokens = 512;  // tokens per Forward call
  int max_sequences = 8;       // live sequences at once
  int max_context = 0;         // tokens per sequence; 0 = the model's max_seq_len (may exceed it)
  int kv_page_size = 16;
  int kv_pages = 0;  // 0 = enough for max_sequences sequences of max_context tokens
  KvCompression compression;
  // Makes the value tier holding KCache layers' V pages (one section per KCache cache layer, in
  // cache-layer order; num_pages pages mirroring the engine's KV pool). Empty = an
  // InProcessValueTier; not called when no layer uses KCache. An engine whose KCache V lives in a
  // tier from this factory runs decode steps only (one-token chunks): dense attention over V needs
  // the in-process tier's memory, so Forward refuses longer chunks with FailedPrecondition.
  std::function<absl::StatusOr<std::unique_ptr<ValueTier>>(int page_size, int num_pages,
                                                           std::vector<KvSectionLayout> sections)>
      value_tier_factory;

  absl::Status Validate() const;
};

// Tokens to append to one sequence in a Forward call.
struct ForwardChunk {
  int sequence = -1;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token, not only the last
  // A chunk of one token is a decode step: with KCache its later layers select what to read.
};

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
  // Cache layer c's K/V rows of every chunk of this Forward are stored (for SwiftKV's later cache
  // layers: after the one fused store, once per later cache layer). Called once per cache layer
  // per Forward, in increasing order; a prefill worker may ship that layer's pages from here on
  // while later layers still compute (during a Forward, SequenceLength already counts its tokens).
  virtual void CacheLayerStored(int /*cache_layer*/) {}
};

// Where one page of a sequence's cache layer lives in the engine: its K section bytes and V
// section bytes, laid out by plan().caches[c].layout.k and .v.
struct KvPageSlots {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;   // in the value tier for a KCache cache layer
  int32_t page_id = -1;   // the page in the engine's KV pool (and in the value tier)
  int tier_section = -1;  // the value tier's section holding v; -1 when v is resident
};

class LlamaEngine {
 public:
  static absl::StatusOr<std::unique_ptr<LlamaEngine>> Create(const ModelWeights& weights,
                                                             const EngineOptions& options);
  ~LlamaEngine();

  const ModelConfig& config() const { return weights_.config; }
  const EngineOptions& options() const { return options_; }
  int max_context() const { return max_context_; }

  // Starts an empty sequence; ResourceExhausted when max_sequences are live.
  absl::StatusOr<int> AddSequence();
  // Starts a sequence whose cache already holds num_tokens tokens (SequenceLength = num_tokens,
  // their pages reserved) whose K/V bytes the caller writes through SequencePage before the next
  // Forward touching it. InvalidArgument unless 1 ≤ num_tokens ≤ max_context; ResourceExhausted
  // when no sequence slot or not enough pages are free (then nothing is taken).
  absl::StatusOr<int> AddSequenceWithTokens(int num_tokens);
  // Frees the sequence and its KV pages; NotFound for an unknown id.
  absl::Status RemoveSequence(int sequence);
  // Tokens in the sequence's cache, or -1 for an unknown id.
  int SequenceLength(int sequence) const;

  const KvPlan& plan() const { return plan_; }
  // Page page_index (tokens [page_index·P, (page_index+1)·P)) of cache layer cache_layer of a live
  // sequence, for reading (export) or writing (import); valid until the sequence is removed.
  // NotFound for an unknown sequence; OutOfRange for a cache layer or page index outside
  // [0, plan().caches.size()) or the sequence's pages.
  absl::StatusOr<KvPageSlots> SequencePage(int sequence, int cache_layer, int page_index);
  // V bytes decode steps fetched from the value tier (KCache), since creation.
  int64_t kv_bytes_fetched() const { return tier_ ? tier_->bytes_fetched() : 0; }
  // Not owned; null to stop observing.
  void set_observer(ForwardObserver* observer) { observer_ = observer; }

  // Appends every chunk's tokens to its sequence and returns logits [rows, vocab]: per chunk in
  // order, one row per token when all_logits, else one row for its last token. InvalidArgument for
  // unknown or repeated sequences, empty chunks, token ids outside the vocabulary, more than
  // max_batch_tokens tokens or a sequence beyond max_context; ResourceExhausted when the KV pool is
  // full. On error no sequence changes. The span is valid until the next Forward.
  absl::StatusOr<std::span<const float>> Forward(std::span<const ForwardChunk> chunks);

 private:
  struct Buffers;
  struct Sequence {
    bool live = false;
    BlockTable table;
  };
  // Rows [row, row + n) of the batch belong to `sequence` at positions [start_pos, start_pos + n).
  struct Segment {
    int sequence = -1;
    int row = 0;
    int n = 0;
    int start_pos = 0;
    bool all_logits = false;
    bool decode = false;  // a one-token chunk: a decode step (KCache selects for these)
  };
  LlamaEngine(ModelWeights weights, KvPlan plan, const EngineOptions& options, int max_context);
  absl::Status CreateCaches();

  absl::Status ValidateChunks(std::span<const ForwardChunk> chunks) const;
  absl::Status ReserveKv(std::span<const ForwardChunk> chunks);
  void Layer(int layer, int n);
  // SwiftKV: every leader's K/V from x = RMSNorm(h_l) for all n rows, stored in its cache.
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
  int ComputeLogits(int n);

  ModelWeights weights_;  // embedding, norms, MLP and classifier (attention weights are in plan_)
  KvPlan plan_;
  std::vector<Tensor> w13_;  // per layer [2·hidden, dim] = [w1; w3]
  EngineOptions options_;
  int max_context_;
  ThreadPool pool_;
  kernels::RopeTable rope_;
  std::unique_ptr<PagedKvCache> kv_;
  std::unique_ptr<ValueTier> tier_;           // KCache V pages; null when no layer uses KCache
  InProcessValueTier* local_tier_ = nullptr;  // tier_ when in-process: dense attention reads it
  std::vector<int> k_section_, v_section_;    // per cache layer: section in kv_ (V: or in tier_)
  std::vector<Sequence> sequences_;
  std::vector<Segment> segments_;
  std::unique_ptr<Buffers> buffers_;
  ForwardObserver* observer_ = nullptr;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_LLAMA_ENGINE_H_
