// SwiGLU: out[i] = silu(gate[i]) · up[i] = gate[i] / (1 + e^(−gate[i])) · up[i] over n values;
// `out` may alias `gate`. AVX2, e^x as kernels/cpu/exp_avx2.h computes it (relative error below
// 2e-7; libm's expf for the last n % 8 values).
#ifndef PDSERVE_KERNELS_SWIGLU_H_
#define PDSERVE_KERNELS_SWIGLU_H_

#include <cstdint>

namespace pdserve::kernels {

void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_SWIGLU_H_
