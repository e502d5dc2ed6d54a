#include "kernels/swiglu.h"

#include <cmath>

namespace pdserve::kernels {

void SwiGlu(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    out[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
  }
}

}  // namespace pdserve::kernels
