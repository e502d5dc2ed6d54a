// Rows of IEEE f16 values, as an f16 KV cache stores them: narrowing rounds to nearest even and
// saturates finite values beyond ±65504 (so a large activation does not become an infinity that
// poisons every later softmax); NaN stays NaN. Widening is exact. F16C, thread-safe.
#ifndef PDSERVE_KERNELS_FLOAT16_ROWS_H_
#define PDSERVE_KERNELS_FLOAT16_ROWS_H_

#include <cstdint>

namespace pdserve::kernels {

inline constexpr float kF16Max = 65504.0f;

void FloatsToF16Saturating(const float* x, int64_t n, uint16_t* out);
// Round to nearest even without the clamp: beyond the range becomes ±Inf, Inf stays Inf (exact
// for values that are f16 values, e.g. widened from f16).
void FloatsToF16(const float* x, int64_t n, uint16_t* out);
void F16ToFloats(const uint16_t* h, int64_t n, float* out);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_FLOAT16_ROWS_H_
