#include <cuda_runtime.h>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/rope.h"

namespace pdserve::kernels::cuda {
namespace {

using internal::ElementwiseBlocks;
using internal::FirstElement;
using internal::GridStride;
using internal::kElementwiseThreads;

struct RopeLaunch {
  float* x;
  int64_t n;
  int64_t row_stride;
  int n_heads;
  const int32_t* positions;
  RopeTables tables;
  RopePairing pairing;
};

// One thread per rotated pair (row t, head h, pair i), with kernels/cpu/rope.cc's arithmetic:
// explicit fmas over the table's cos and sin, so the result equals the CPU's bit for bit.
__global__ void __launch_bounds__(kElementwiseThreads) RopeKernel(RopeLaunch p) {
  const int half = p.tables.head_dim / 2;
  const int64_t pairs_per_row = int64_t{p.n_heads} * half;
  const int64_t count = p.n * pairs_per_row;
  for (int64_t e = FirstElement(); e < count; e += GridStride()) {
    const int64_t t = e / pairs_per_row;
    const int in_row = static_cast<int>(e - t * pairs_per_row);
    const int h = in_row / half, i = in_row % half;
    const int64_t angle = int64_t{p.positions[t]} * half + i;
    const float c = p.tables.cos[angle], s = p.tables.sin[angle];
    const bool adjacent = p.pairing == RopePairing::kAdjacent;
    const int a = adjacent ? 2 * i : i;
    const int b = adjacent ? 2 * i + 1 : i + half;
    float* head = p.x + t * p.row_stride + int64_t{h} * p.tables.head_dim;
    const float x0 = head[a], x1 = head[b];
    head[a] = fmaf(x0, c, -(x1 * s));
    head[b] = fmaf(x0, s, x1 * c);
  }
}

}  // namespace

void ApplyRope(float* x, int64_t n, int64_t row_stride, int n_heads, const int32_t* positions,
               const RopeTables& tables, RopePairing pairing, cudaStream_t stream) {
  const int64_t count = n * n_heads * (tables.head_dim / 2);
  if (count <= 0) return;
  const RopeLaunch launch = {x, n, row_stride, n_heads, positions, tables, pairing};
  RopeKernel<<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream>>>(launch);
}

}  // namespace pdserve::kernels::cuda
