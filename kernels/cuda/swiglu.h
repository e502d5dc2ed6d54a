// CUDA SwiGLU, as kernels/swiglu.h, over the engine's stacked rows: row t of gate_up is
// [gate (hidden floats), up (hidden floats)] and out[t, i] = silu(gate[i]) · up[i] with exact
// expf. Device pointers; enqueued on `stream`.
#ifndef PDSERVE_KERNELS_CUDA_SWIGLU_H_
#define PDSERVE_KERNELS_CUDA_SWIGLU_H_

#include <cuda_runtime_api.h>

#include <cstdint>

namespace pdserve::kernels::cuda {

// gate_up: [n, 2·hidden]; out: [n, hidden], not aliasing gate_up (the rows differ in stride).
void SwiGlu(const float* gate_up, int64_t n, int64_t hidden, float* out, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_SWIGLU_H_
