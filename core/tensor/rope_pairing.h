// RopePairing: which dimensions of a head vector RoPE rotates together. A layout property of q/k
// tensors, shared by model loaders (core/formats) and kernels. Stored in files: DO NOT RENUMBER.
#ifndef PDSERVE_CORE_TENSOR_ROPE_PAIRING_H_
#define PDSERVE_CORE_TENSOR_ROPE_PAIRING_H_

#include <cstdint>

namespace pdserve {

// llama2.c and GGUF rotate adjacent pairs (2i, 2i+1); Hugging Face checkpoints rotate split halves
// (i, i + d/2), their q/k rows being permuted accordingly.
enum class RopePairing : uint8_t {
  kAdjacent = 0,
  kSplitHalf = 1,
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_TENSOR_ROPE_PAIRING_H_
