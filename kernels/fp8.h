// FP8 e4m3 (OCP "e4m3fn", NVIDIA __NV_E4M3): 1 sign, 4 exponent (bias 7), 3 mantissa bits; max
// finite ±448 (0x7E/0xFE), NaN 0x7F/0xFF, no infinity; subnormals m·2^-9. Encoding is bit-exact
// with CUDA's __nv_cvt_float_to_fp8(x, __NV_SATFINITE, __NV_E4M3) so CPU and GPU caches hold the
// same codes. Scaled (de)quantization follows vLLM: code = fp8(x / scale), x̂ = float(code) · scale.
// All functions are pure and thread-safe.
#ifndef PDSERVE_KERNELS_FP8_H_
#define PDSERVE_KERNELS_FP8_H_

#include <cstdint>

namespace pdserve::kernels {

inline constexpr float kE4M3Max = 448.0f;

// Round to nearest even, saturating: |x| ≤ 2^-10 → ±0 (sign kept, so -0.0 → 0x80); |x| > 464 and
// ±Inf → ±448; NaN → 0x7F.
uint8_t FloatToE4M3(float x);

// Exact. 0x7F and 0xFF decode to a positive quiet NaN.
float E4M3ToFloat(uint8_t code);

// E4M3ToFloat of all 256 codes, indexed by code.
const float* E4M3Table();

// The scale that maps a block with absolute maximum `amax` onto ±448: amax / 448, at least
// FLT_MIN. A block that is all zeros, or whose amax is NaN or infinite (already corrupt data:
// infinities then saturate to ±448), gets 1. Never 0, NaN or infinite.
float E4M3ScaleFor(float amax);

// codes[i] = FloatToE4M3(x[i] / scale), a true fp32 division. Requires scale finite and > 0.
// The AVX2 path; equals QuantizeE4M3Reference bit for bit.
void QuantizeE4M3(const float* x, int64_t n, float scale, uint8_t* codes);
// out[i] = E4M3ToFloat(codes[i]) · scale. The AVX2 path; equals DequantizeE4M3Reference bit for
// bit.
void DequantizeE4M3(const uint8_t* codes, int64_t n, float scale, float* out);

// The specifications: one scalar call per element.
void QuantizeE4M3Reference(const float* x, int64_t n, float scale, uint8_t* codes);
void DequantizeE4M3Reference(const uint8_t* codes, int64_t n, float scale, float* out);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_FP8_H_
