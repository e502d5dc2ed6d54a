#include "kernels/swiglu.h"

#include <cmath>

namespace pdserve::kernels {

void SwiGlu(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    float g = gate[i];
    gate[i] = g * (1.0f / (1.0f + expf(-g))) * up[i];
  }
}

}  // namespace pdserve::kernels
