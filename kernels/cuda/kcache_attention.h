// CUDA KCache decode attention: the contract of kernels/kcache_attention.h with V read straight
// from device pages (kv.v) instead of through a fetch callback. Per (sequence, KV head): scores of
// every cached key for each of the group's query heads, the full softmax, the probability summed
// over the group, the selection (first `sink`, last `recent`, then `top_n` by summed probability,
// ties to the lower position), and the output of each query head from the selected values only,
// weighted by the full-softmax probabilities (renormalized over the selection when asked). Only
// the V rows of selected tokens are read. With top_n + sink + recent ≥ the context every token is
// selected and the result equals kernels/cuda/attention.h's up to rounding.
#ifndef PDSERVE_KERNELS_CUDA_KCACHE_ATTENTION_H_
#define PDSERVE_KERNELS_CUDA_KCACHE_ATTENTION_H_

#include <cuda_runtime_api.h>

#include <cstddef>

#include "kernels/cuda/attention.h"
#include "kernels/kcache_attention.h"

namespace pdserve::kernels::cuda {

// Bytes of device workspace for batches of up to kMaxBatchSequences one-query sequences with
// contexts up to max_context.
size_t KCacheWorkspaceBytes(const AttentionShape& shape, int max_context);

// Every sequence must have n_queries == 1. `selected`, when not null, is device memory of
// batch.n · n_kv_heads ints receiving how many tokens each (sequence, KV head) selected.
void KCacheAttention(const AttentionShape& shape, const SequenceBatch& batch,
                     const TopNOptions& options, int max_context, void* workspace, int* selected,
                     cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_KCACHE_ATTENTION_H_
