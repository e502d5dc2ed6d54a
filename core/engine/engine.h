// Engine: a Llama forward pass over a batch of sequences with a paged KV cache, whatever the
// device — what its drivers (Generate, bench, eval) need. LlamaEngine (core/engine/llama_engine.h)
// runs on the CPU and is the reference; CudaEngine (core/engine/cuda_engine.h) runs on a GPU.
// CreateEngine (core/engine/create_engine.h) picks by EngineOptions::device. Engines are not
// thread-safe: one caller drives an engine.
//
// Disaggregation (core/engine/kv_transfer.h): a prefill engine exports a sequence's pages through
// SequencePage (CacheLayerObserver::CacheLayerStored says when a cache layer's pages are ready);
// a decode engine takes them into a sequence made by AddSequenceWithTokens and continues it.
#ifndef PDSERVE_CORE_ENGINE_ENGINE_H_
#define PDSERVE_CORE_ENGINE_ENGINE_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/engine/device.h"
#include "core/engine/kv_compression.h"
#include "core/engine/kv_plan.h"
#include "core/kv/kv_layout.h"
#include "core/kv/value_tier.h"
#include "core/model/model_config.h"
#include "core/tensor/dtype.h"

namespace pdserve {

struct EngineOptions {
  Device device = Device::kCpu;
  DType weight_dtype = DType::kF32;
  int num_threads = 1;         // 0 = automatic: every core, or one for models too small to split
  int max_batch_tokens = 512;  // tokens per Forward call
  int max_sequences = 8;       // live sequences at once
  int max_context = 0;         // tokens per sequence; 0 = the model's max_seq_len (may exceed it)
  int kv_page_size = 16;
  int kv_pages = 0;  // 0 = enough for max_sequences sequences of max_context tokens
  KvCompression compression;
  // Makes SequencePage work on an engine whose KV pool is not in host memory: the CUDA engine
  // then keeps a pinned host mirror of its pool (as large as the pool). The CPU engine's pool is
  // host memory: ignored there.
  bool host_kv_pages = false;
  // Makes the value tier holding KCache layers' V pages (one section per KCache cache layer, in
  // cache-layer order; num_pages pages mirroring the engine's KV pool). Empty = an
  // InProcessValueTier; not called when no layer uses KCache. An engine whose KCache V lives in a
  // tier from this factory runs decode steps only (one-token chunks): dense attention over V needs
  // the in-process tier's memory, so Forward refuses longer chunks with FailedPrecondition.
  // CPU engine only.
  std::function<absl::StatusOr<std::unique_ptr<ValueTier>>(int page_size, int num_pages,
                                                           std::vector<KvSectionLayout> sections)>
      value_tier_factory;

  absl::Status Validate() const;
  // Whether SequencePage and AddSequenceWithTokens work: on the CPU, or with host_kv_pages.
  bool KvPagesInHostMemory() const { return device == Device::kCpu || host_kv_pages; }
  // max_context, or the model's max_seq_len when 0.
  int ResolvedMaxContext(const ModelConfig& config) const {
    return max_context > 0 ? max_context : config.max_seq_len;
  }
  // kv_pages, or when 0 enough pages for max_sequences sequences of `context` tokens;
  // InvalidArgument beyond int32.
  absl::StatusOr<int> ResolvedKvPages(int context) const;
};

// Where one page of a sequence's cache layer lives in host memory: its K section bytes and V
// section bytes, laid out by plan().caches[c].layout.k and .v.
struct KvPageSlots {
  uint8_t* k = nullptr;
  uint8_t* v = nullptr;   // in the value tier for a KCache cache layer of the CPU engine
  int32_t page_id = -1;   // the page in the engine's KV pool (and in the value tier)
  int tier_section = -1;  // the value tier's section holding v; -1 when v is resident
};

// Told when a Forward's K/V rows of a cache layer are stored and readable through
// Engine::SequencePage, so that a prefill worker ships that layer's pages while later layers still
// compute. Called on the Forward caller's thread, before Forward returns, once per cache layer per
// Forward, in increasing order (during a Forward, SequenceLength already counts its tokens).
class CacheLayerObserver {
 public:
  virtual ~CacheLayerObserver() = default;
  virtual void CacheLayerStored(int cache_layer) = 0;
};

// Tokens to append to one sequence in a Forward call.
struct ForwardChunk {
  int sequence = -1;
  std::span<const int32_t> tokens;
  bool all_logits = false;  // logits for every token, not only the last
  // A chunk of one token is a decode step: with KCache its later layers select what to read.
  // The prompt ends with this chunk: with token retention (KvCompression::retention) the
  // sequence then keeps only the tokens retention selects, scored by this chunk's last
  // retention.window queries. Retained tokens keep their positions (SequencePosition).
  bool retain = false;
};

class Engine {
 public:
  virtual ~Engine() = default;

  virtual const ModelConfig& config() const = 0;
  // As created, with automatic values resolved.
  virtual const EngineOptions& options() const = 0;
  virtual int max_context() const = 0;
  // The layers and caches it runs (SwiftKV, AcrossKV, ZACK, FP8, KCache applied).
  virtual const KvPlan& plan() const = 0;
  // V bytes decode steps fetched from a value tier (KCache), since creation; 0 without one.
  virtual int64_t kv_bytes_fetched() const { return 0; }

  // Starts an empty sequence; ResourceExhausted when max_sequences are live.
  virtual absl::StatusOr<int> AddSequence() = 0;
  // Frees the sequence and its KV pages; NotFound for an unknown id.
  virtual absl::Status RemoveSequence(int sequence) = 0;
  // Tokens in the sequence's cache, or -1 for an unknown id.
  virtual int SequenceLength(int sequence) const = 0;
  // The position of the sequence's next token: SequenceLength plus the tokens token retention
  // dropped (max_context bounds it), or -1 for an unknown id.
  virtual int SequencePosition(int sequence) const { return SequenceLength(sequence); }

  // Appends every chunk's tokens to its sequence and returns logits [rows, vocab]: per chunk in
  // order, one row per token when all_logits, else one row for its last token. InvalidArgument for
  // unknown or repeated sequences, empty chunks, token ids outside the vocabulary, more than
  // max_batch_tokens tokens or a position beyond max_context; ResourceExhausted when the KV pool is
  // full. On error no sequence changes. The span (host memory) is valid until the next Forward.
  virtual absl::StatusOr<std::span<const float>> Forward(std::span<const ForwardChunk> chunks) = 0;

  // Starts a sequence whose cache already holds num_tokens tokens (SequenceLength = num_tokens,
  // their pages reserved) whose K/V bytes the caller writes through SequencePage before the next
  // Forward touching it. InvalidArgument unless 1 ≤ num_tokens ≤ max_context; ResourceExhausted
  // when no sequence slot or not enough pages are free (then nothing is taken);
  // FailedPrecondition when the pool is not host-visible (EngineOptions::host_kv_pages).
  virtual absl::StatusOr<int> AddSequenceWithTokens(int num_tokens) = 0;
  // Token retention across engines: the cache of `sequence` holds the tokens a prompt kept, and its
  // next token takes `position` (SequencePosition), the tokens in between having been dropped.
  // InvalidArgument unless SequenceLength ≤ position ≤ max_context; NotFound for an unknown
  // sequence; Unimplemented where the engine has no token retention (the CUDA engine).
  virtual absl::Status SetSequencePosition(int sequence, int position) {
    (void)sequence;
    (void)position;
    return absl::UnimplementedError("engine: token retention is not supported on this device");
  }
  // The positions of rows [first, first + count) (count < 0: to SequenceLength) of a cache layer
  // of the sequence: row r's is r unless token retention dropped tokens (each cache layer keeps
  // its own). NotFound for an unknown sequence, OutOfRange for a cache layer outside the plan or
  // rows outside the sequence's, FailedPrecondition for a sequence whose position
  // SetSequencePosition moved (its rows' positions are in the pages it was given).
  absl::StatusOr<std::vector<int32_t>> RowPositions(int sequence, int cache_layer, int first = 0,
                                                    int count = -1) const;
  // The score biases of the same rows: what token retention gave KVCrush representatives that
  // stand for evicted tokens (kernels/attention_shape.h: token_bias; token_retention.h), 0 for
  // every other row. Errors as RowPositions's, but for FailedPrecondition (biases travel with the
  // pages: SetRowScoreBiases).
  absl::StatusOr<std::vector<float>> RowScoreBiases(int sequence, int cache_layer, int first = 0,
                                                    int count = -1) const;
  // Sets the score biases of rows [first, first + biases.size()) of a cache layer of a sequence
  // from AddSequenceWithTokens, before its first Forward (the pages' of an imported prompt).
  // NotFound for an unknown sequence; OutOfRange as RowPositions; InvalidArgument for a bias that
  // is not finite and ≥ 0; Unimplemented for a nonzero bias where the engine has no token
  // retention (the CUDA engine).
  virtual absl::Status SetRowScoreBiases(int sequence, int cache_layer, int first,
                                         std::span<const float> biases);
  // Page page_index (tokens [page_index·P, (page_index+1)·P)) of cache layer cache_layer of a live
  // sequence in host memory, for reading (export) or writing (import); valid until the sequence is
  // removed. Reading sees what a Forward stored once CacheLayerStored was called for the layer;
  // an engine with a host mirror refreshes it only then, for every page of that Forward's
  // sequences (a Forward without an observer leaves the mirror as it was). Writing is for
  // sequences from AddSequenceWithTokens, before their first Forward. NotFound for an unknown
  // sequence; OutOfRange for a cache layer or page index outside [0, plan().caches.size()) or the
  // sequence's pages; FailedPrecondition when the pool is not host-visible.
  virtual absl::StatusOr<KvPageSlots> SequencePage(int sequence, int cache_layer,
                                                   int page_index) = 0;
  // Not owned; null to stop observing.
  virtual void set_cache_layer_observer(CacheLayerObserver* observer) = 0;

 protected:
  // RowPositions' answer for one valid row of a valid cache layer of a live sequence, or -1 where
  // it is not known. Default: the row, unknown once SetSequencePosition moved the sequence.
  virtual int32_t RowPosition(int sequence, int cache_layer, int row) const {
    (void)cache_layer;
    return SequencePosition(sequence) == SequenceLength(sequence) ? row : -1;
  }
  // RowScoreBiases' answer for one valid row. Default: 0.
  virtual float RowScoreBias(int sequence, int cache_layer, int row) const {
    (void)sequence;
    (void)cache_layer;
    (void)row;
    return 0.0f;
  }
  // SetRowScoreBiases once its arguments are checked. Default: Unimplemented unless all are 0.
  virtual absl::Status StoreRowScoreBiases(int sequence, int cache_layer, int first,
                                           std::span<const float> biases);
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_ENGINE_H_
