#include <cuda_runtime.h>

#include "kernels/cuda/elementwise.cuh"
#include "kernels/cuda/swiglu.h"

namespace pdserve::kernels::cuda {
namespace {

using internal::ElementwiseBlocks;
using internal::FirstElement;
using internal::GridStride;
using internal::kElementwiseThreads;

// out[e] for e < n · hidden, as kernels/cpu/swiglu.cc: g · (1 / (1 + expf(−g))) · u with exact
// expf (not __expf) and IEEE division. out must not alias gate_up (rows have different strides).
__global__ void __launch_bounds__(kElementwiseThreads)
    SwiGluKernel(const float* gate_up, int64_t n, int64_t hidden, float* out) {
  const int64_t count = n * hidden;
  for (int64_t e = FirstElement(); e < count; e += GridStride()) {
    const int64_t t = e / hidden, i = e - t * hidden;
    const float* row = gate_up + 2 * hidden * t;
    const float g = row[i];
    out[e] = g * (1.0f / (1.0f + expf(-g))) * row[hidden + i];
  }
}

}  // namespace

void SwiGlu(const float* gate_up, int64_t n, int64_t hidden, float* out, cudaStream_t stream) {
  const int64_t count = n * hidden;
  if (count <= 0) return;
  SwiGluKernel<<<ElementwiseBlocks(count), kElementwiseThreads, 0, stream>>>(gate_up, n, hidden,
                                                                             out);
}

}  // namespace pdserve::kernels::cuda
