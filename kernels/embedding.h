// Embedding lookup: out[i] = float(table[ids[i]]) for a [vocab, dim] table of any dtype.
// Requires every id in [0, vocab); callers validate ids from requests.
#ifndef PDSERVE_KERNELS_EMBEDDING_H_
#define PDSERVE_KERNELS_EMBEDDING_H_

#include <cstdint>

#include "core/tensor/tensor.h"

namespace pdserve::kernels {

void EmbeddingLookup(const Tensor& table, const int32_t* ids, int64_t n, float* out);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_EMBEDDING_H_
