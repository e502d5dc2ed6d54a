// CUDA embedding lookup: out[i] = float(table[ids[i]]) for a [vocab, dim] table of f32, f16 or
// bf16, as kernels/embedding.h. Device pointers; enqueued on `stream`, no synchronization.
// Requires every id in [0, vocab) (callers validate request ids).
#ifndef PDSERVE_KERNELS_CUDA_EMBEDDING_H_
#define PDSERVE_KERNELS_CUDA_EMBEDDING_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/dtype.h"

namespace pdserve::kernels::cuda {

// table: [vocab, dim] of `dtype`; ids: n; out: [n, dim] floats.
void EmbeddingLookup(const void* table, DType dtype, int64_t dim, const int32_t* ids, int64_t n,
                     float* out, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_EMBEDDING_H_
