#include <cuda_runtime.h>

#include "kernels/cuda/rms_norm.h"

namespace pdserve::kernels::cuda {
namespace {

constexpr int kWarpSize = 32;
constexpr int kNormThreads = 256;
constexpr int kNormWarps = kNormThreads / kWarpSize;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ float WarpSum(float v) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kFullMask, v, offset);
  }
  return v;
}

// The sum of every thread's `v` over the block (kNormThreads threads), returned to all threads.
// Called by every thread of the block, from non-divergent code.
__device__ float BlockSum(float v) {
  __shared__ float warp_sums[kNormWarps];
  __shared__ float total;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  v = WarpSum(v);
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  if (warp == 0) {
    v = WarpSum(lane < kNormWarps ? warp_sums[lane] : 0.0f);
    if (lane == 0) total = v;
  }
  __syncthreads();
  return total;
}

// One block per row of [n, dim]. With kAdd, sum[r] = x[r] + delta[r] is stored first (sum may be
// x) and normalized; otherwise x[r] is. out may alias x only without kAdd: every element of a row
// is read before the reduction's barrier and written after it, each by the same thread.
template <bool kAdd>
__global__ void __launch_bounds__(kNormThreads)
    RmsNormKernel(const float* x, const float* delta, float* sum, const float* weight, int64_t dim,
                  float eps, float* out) {
  const int64_t base = int64_t{blockIdx.x} * dim;
  float squares = 0.0f;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    float v = x[base + i];
    if constexpr (kAdd) {
      v += delta[base + i];
      sum[base + i] = v;
    }
    squares += v * v;
  }
  // As the CPU: scale = 1 / sqrt(sum / dim + eps) with IEEE division and square root.
  const float scale = 1.0f / sqrtf(BlockSum(squares) / static_cast<float>(dim) + eps);
  const float* normalized = kAdd ? sum : x;
  for (int64_t i = threadIdx.x; i < dim; i += kNormThreads) {
    out[base + i] = weight[i] * (scale * normalized[base + i]);
  }
}

}  // namespace

// n < 2^31 rows (one block each).
void RmsNorm(const float* x, const float* weight, int64_t n, int64_t dim, float eps, float* out,
             cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  RmsNormKernel<false><<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(
      x, nullptr, nullptr, weight, dim, eps, out);
}

void AddRmsNorm(float* x, const float* delta, const float* weight, int64_t n, int64_t dim,
                float eps, float* out, cudaStream_t stream) {
  if (n <= 0 || dim <= 0) return;
  RmsNormKernel<true>
      <<<static_cast<unsigned>(n), kNormThreads, 0, stream>>>(x, delta, x, weight, dim, eps, out);
}

}  // namespace pdserve::kernels::cuda
