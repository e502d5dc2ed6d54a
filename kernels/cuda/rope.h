// CUDA rotary position embedding, as kernels/rope.h: rotates `n_heads` head vectors of `head_dim`
// floats at the start of each of n rows (row t at x + t · row_stride, its position positions[t])
// with the pairing given. The angles come from the cos/sin tables of a kernels::RopeTable copied
// to the device ([max_positions, head_dim/2] each), so CPU and GPU rotate by identical values
// (llama3 frequency scaling included, which lives in the table). Device pointers; enqueued on
// `stream`.
#ifndef PDSERVE_KERNELS_CUDA_ROPE_H_
#define PDSERVE_KERNELS_CUDA_ROPE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "core/tensor/rope_pairing.h"

namespace pdserve::kernels::cuda {

struct RopeTables {
  const float* cos = nullptr;  // [max_positions, head_dim / 2], device
  const float* sin = nullptr;
  int head_dim = 0;
};

void ApplyRope(float* x, int64_t n, int64_t row_stride, int n_heads, const int32_t* positions,
               const RopeTables& tables, RopePairing pairing, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_ROPE_H_
