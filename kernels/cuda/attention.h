// CUDA causal attention over a paged KV cache with grouped KV heads: the contract of
// kernels/attention.h (f32 or FP8 rows, per-head ZACK widths, softmax scale 1/√head_dim, fp32
// arithmetic), with every pointer in `shape` and in the batch's sequences in device memory.
//
// Sequences of several queries (prefill) run a tiled kernel: per (sequence, query head, block of
// queries) it walks the visible keys tile by tile through shared memory with an online softmax.
// One-query sequences (decode) run split-K: each (sequence, query head) is cut into key ranges
// whose cost (keys × that head's stored width) is about equal, so heads of different ZACK ranks
// produce equal-sized work items and no SM waits on the widest head; a second kernel merges the
// partial softmaxes. The batch travels as a kernel parameter (no host→device copy of
// descriptors); nothing is allocated or synchronized.
#ifndef PDSERVE_KERNELS_CUDA_ATTENTION_H_
#define PDSERVE_KERNELS_CUDA_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/attention_shape.h"

namespace pdserve::kernels::cuda {

inline constexpr int kMaxBatchSequences = 64;
inline constexpr int kMaxHeadDim = 256;  // the model's head_dim, and so every stored width

// Sequences of one Forward, passed by value to the kernels (≈10 KB of the 32 KB parameter space).
struct SequenceBatch {
  int n = 0;
  AttentionSequence sequences[kMaxBatchSequences];
};

struct BatchBounds {
  int max_queries = 0;  // ≥ every n_queries in the batch
  int max_context = 0;  // ≥ every start_pos + n_queries
};

// Bytes of device workspace Attention needs for batches of up to kMaxBatchSequences sequences
// bounded by `bounds`.
size_t AttentionWorkspaceBytes(const AttentionShape& shape, const BatchBounds& bounds);

// Requires shape.head_dim ≤ kMaxHeadDim, 0 < batch.n ≤ kMaxBatchSequences and a workspace of
// AttentionWorkspaceBytes(shape, bounds) bytes.
void Attention(const AttentionShape& shape, const SequenceBatch& batch, const BatchBounds& bounds,
               void* workspace, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_ATTENTION_H_
