// LlamaEngine: the fast CPU forward pass of a Llama-family model over a batch of sequences with a
// paged KV cache. One Forward call takes any mix of prefill chunks (many tokens of a sequence) and
// decode steps (one token), runs every matmul over all their tokens at once (SGEMM for prefill
// sized batches, GEMV for decode sized ones) and attention per sequence.
//
// Weights are converted once at Create to EngineOptions::weight_dtype and held in memory of the
// engine's own; q/k/v and gate/up projections are stacked into one matrix each, so a layer runs
// four matmuls. Buffers, workspaces, the KV pool and the thread pool are allocated at Create
// (ResourceExhausted up front when they would not fit in memory); Forward allocates only small
// bookkeeping (page lists, task closures). Not thread-safe: one caller drives an engine.
#ifndef PDSERVE_CORE_MODEL_LLAMA_ENGINE_H_
#define PDSERVE_CORE_MODEL_LLAMA_ENGINE_H_

#include <memory>
#include <span>
#include <vector>

#include "absl/status/statusor.h"
#include "core/base/thread_pool.h"
#include "core/kv/paged_kv_cache.h"
#include "core/model/model_weights.h"
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

  absl::Status Validate() const;
};

// Tokens to append to one sequence in a Forward call.
struct ForwardChunk {
  int sequence = -1;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token, not only the last
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
  // Frees the sequence and its KV pages; NotFound for an unknown id.
  absl::Status RemoveSequence(int sequence);
  // Tokens in the sequence's cache, or -1 for an unknown id.
  int SequenceLength(int sequence) const;

  // Appends every chunk's tokens to its sequence and returns logits [rows, vocab]: per chunk in
  // order, one row per token when all_logits, else one row for its last token. InvalidArgument for
  // unknown or repeated sequences, empty chunks, token ids outside the vocabulary, more than
  // max_batch_tokens tokens or a sequence beyond max_context; ResourceExhausted when the KV pool is
  // full. On error no sequence changes. The span is valid until the next Forward.
  absl::StatusOr<std::span<const float>> Forward(std::span<const ForwardChunk> chunks);

 private:
  struct Buffers;
  // Projections that read the same input, stacked so one matmul computes them.
  struct FusedLayer {
    Tensor wqkv;  // [dim + 2·kv_dim, dim] = [wq; wk; wv]
    Tensor w13;   // [2·hidden, dim] = [w1; w3]
  };
  struct Sequence {
    bool live = false;
    BlockTable table;
  };
  LlamaEngine(ModelWeights weights, const EngineOptions& options, int max_context);

  absl::Status ValidateChunks(std::span<const ForwardChunk> chunks) const;
  absl::Status ReserveKv(std::span<const ForwardChunk> chunks);
  void Layer(int layer, std::span<const ForwardChunk> chunks, int n_tokens);
  void RotateAndStoreKv(int layer, std::span<const ForwardChunk> chunks, int n_tokens);
  // Runs fn over tokens [0, n) on the pool when n is large enough to pay for it, else inline.
  void ForTokens(int n, const ThreadPool::RangeFn& fn);
  void Attend(int layer, std::span<const ForwardChunk> chunks);
  int ComputeLogits(std::span<const ForwardChunk> chunks);

  ModelWeights weights_;
  std::vector<FusedLayer> fused_;
  EngineOptions options_;
  int max_context_;
  ThreadPool pool_;
  kernels::RopeTable rope_;
  std::unique_ptr<PagedKvCache> kv_;
  std::vector<Sequence> sequences_;
  std::unique_ptr<Buffers> buffers_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_MODEL_LLAMA_ENGINE_H_
