// CudaEngine: the Llama forward pass of LlamaEngine (core/engine/llama_engine.h) on an NVIDIA GPU,
// with the kernels of kernels/cuda/. Same Engine contract and the same techniques: SwiftKV (one
// fused KV projection and one bulk cache write for every later layer), AcrossKV, ZACK ranks, FP8
// KV with per-token scales, KCache decode steps. Pages use the CPU engine's byte layout
// (core/kv/kv_layout.h) in device memory.
//
// Weights, activation buffers, workspaces and the KV pools are allocated on the device once, at
// Create. Forward enqueues everything on one stream: small per-step tables (tokens, positions,
// page tables, store slots) go up from pinned host memory, and the only synchronization is the
// copy of the logits back to pinned host memory at the end. Not thread-safe.
//
// Disaggregation (EngineOptions::host_kv_pages): a pinned host mirror of the KV pools, page for
// page. With a CacheLayerObserver, each cache layer's pages written by a Forward are copied to the
// mirror on a second stream as soon as the layer is stored, while later layers compute; the
// observer hears of each layer once its copy is done, before Forward returns. Pages written into
// the mirror of a sequence from AddSequenceWithTokens go up to the device at the start of its
// first Forward.
//
// Not supported on the GPU (Create says so): per-page FP8 scales, a value_tier_factory (KCache V
// lives in device memory), more than kernels::cuda::kMaxBatchSequences sequences, head dims above
// kernels::cuda::kMaxHeadDim, more than kernels::cuda::kMaxStoreTargets SwiftKV cache layers, and
// the CPU engine's calibration taps (ForwardObserver).
#ifndef PDSERVE_CORE_ENGINE_CUDA_ENGINE_H_
#define PDSERVE_CORE_ENGINE_CUDA_ENGINE_H_

#include <memory>
#include <span>

#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/model/model_weights.h"

namespace pdserve {

class CudaEngine : public Engine {
 public:
  // FailedPrecondition without a CUDA device; InvalidArgument for options the GPU path does not
  // support (above); ResourceExhausted when the weights, buffers and KV pool do not fit in device
  // memory.
  static absl::StatusOr<std::unique_ptr<CudaEngine>> Create(const ModelWeights& weights,
                                                            const EngineOptions& options);
  ~CudaEngine() override;

  const ModelConfig& config() const override;
  const EngineOptions& options() const override;
  int max_context() const override;
  const KvPlan& plan() const override;
  absl::StatusOr<int> AddSequence() override;
  absl::Status RemoveSequence(int sequence) override;
  int SequenceLength(int sequence) const override;
  absl::StatusOr<std::span<const float>> Forward(std::span<const ForwardChunk> chunks) override;
  absl::StatusOr<int> AddSequenceWithTokens(int num_tokens) override;
  // Slots in the pinned host mirror.
  absl::StatusOr<KvPageSlots> SequencePage(int sequence, int cache_layer, int page_index) override;
  void set_cache_layer_observer(CacheLayerObserver* observer) override;

 private:
  struct State;
  explicit CudaEngine(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_CUDA_ENGINE_H_
