// ggml's quantized block formats, as GGUF files store them, and their dequantization.
//
// Each block holds BlockElements(dtype) consecutive elements of a row. The 32-element formats
// (Q8_0, Q4_0, Q4_1, Q5_0, Q5_1) have an f16 scale d (and an f16 minimum m for the _1 types):
// value = d·q (+ m). The 256-element K-quants split a block into sub-blocks with their own 6-bit
// (Q4_K, Q5_K) or 8-bit (Q6_K) scales under an f16 super-scale. The layouts and arithmetic follow
// ggml's reference (ggml-common.h, dequantize_row_* in ggml-quants.c), so DequantizeRow gives
// ggml's floats bit for bit. Everything here is plain data and pure functions: thread-safe.
#ifndef PDSERVE_CORE_TENSOR_QUANT_BLOCKS_H_
#define PDSERVE_CORE_TENSOR_QUANT_BLOCKS_H_

#include <array>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "core/tensor/dtype.h"

namespace pdserve::quant {

inline constexpr int kQK = 32;     // elements per block of the 32-element formats
inline constexpr int kQK_K = 256;  // elements per K-quant super-block
inline constexpr int kScaleBytesK = 12;

struct BlockQ8_0 {
  uint16_t d;  // f16
  int8_t qs[kQK];
};
struct BlockQ4_0 {
  uint16_t d;
  uint8_t qs[kQK / 2];  // element j in the low nibble of byte j, element j + 16 in the high one
};
struct BlockQ4_1 {
  uint16_t d, m;
  uint8_t qs[kQK / 2];
};
struct BlockQ5_0 {
  uint16_t d;
  uint8_t qh[4];  // bit j: the fifth bit of element j
  uint8_t qs[kQK / 2];
};
struct BlockQ5_1 {
  uint16_t d, m;
  uint8_t qh[4];
  uint8_t qs[kQK / 2];
};
struct BlockQ4_K {
  uint16_t d, dmin;              // f16 super-scales of the sub-block scales and minimums
  uint8_t scales[kScaleBytesK];  // 8 sub-blocks × (6-bit scale, 6-bit minimum)
  uint8_t qs[kQK_K / 2];         // per 64 elements: 32 bytes, low nibbles first
};
struct BlockQ5_K {
  uint16_t d, dmin;
  uint8_t scales[kScaleBytesK];
  uint8_t qh[kQK_K / 8];  // fifth bits: element 64·i + l (l < 32) at bit 2i of qh[l], +32 at 2i+1
  uint8_t qs[kQK_K / 2];
};
struct BlockQ6_K {
  uint8_t ql[kQK_K / 2];      // low 4 bits
  uint8_t qh[kQK_K / 4];      // high 2 bits
  int8_t scales[kQK_K / 16];  // 16 sub-blocks of 16 elements
  uint16_t d;
};

static_assert(sizeof(BlockQ8_0) == BlockBytes(DType::kQ8_0));
static_assert(sizeof(BlockQ4_0) == BlockBytes(DType::kQ4_0));
static_assert(sizeof(BlockQ4_1) == BlockBytes(DType::kQ4_1));
static_assert(sizeof(BlockQ5_0) == BlockBytes(DType::kQ5_0));
static_assert(sizeof(BlockQ5_1) == BlockBytes(DType::kQ5_1));
static_assert(sizeof(BlockQ4_K) == BlockBytes(DType::kQ4_K));
static_assert(sizeof(BlockQ5_K) == BlockBytes(DType::kQ5_K));
static_assert(sizeof(BlockQ6_K) == BlockBytes(DType::kQ6_K));

// The block struct of a 32-element format: Q8_0, Q4_0, Q4_1, Q5_0 or Q5_1.
template <DType D>
requires(D == DType::kQ8_0 || D == DType::kQ4_0 || D == DType::kQ4_1 || D == DType::kQ5_0 ||
         D == DType::kQ5_1) using Block32Of =
    std::conditional_t<
        D == DType::kQ8_0, BlockQ8_0,
        std::conditional_t<
            D == DType::kQ4_0, BlockQ4_0,
            std::conditional_t<D == DType::kQ4_1, BlockQ4_1,
                               std::conditional_t<D == DType::kQ5_0, BlockQ5_0, BlockQ5_1>>>>;

// Sub-block j's (j < 8) 6-bit scale and minimum of a Q4_K/Q5_K block (ggml's get_scale_min_k4).
inline void ScaleMinK4(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = (q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4);
    *min = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
  }
}

// ScaleMinK4 for all eight sub-blocks at once, from a block's 12 scale bytes: the 8 scales in
// bytes 0-7 and the 8 minimums in bytes 8-15 of the four little-endian words (integer code only,
// so each SIMD unit that loads the words into a register compiles the same instructions).
inline std::array<uint32_t, 4> ScalesAndMinsK4(const uint8_t* q) {
  uint32_t u[3];
  std::memcpy(u, q, sizeof(u));
  constexpr uint32_t kLow6 = 0x3f3f3f3f, kLow4 = 0x0f0f0f0f, kTop2 = 0x03030303;
  return {u[0] & kLow6, (u[2] & kLow4) | (((u[0] >> 6) & kTop2) << 4), u[1] & kLow6,
          ((u[2] >> 4) & kLow4) | (((u[1] >> 6) & kTop2) << 4)};
}

// Q6_K: the four codes less 32 of elements l, l + 32, l + 64 and l + 96 (l < 32) of a 128-element
// half of a block, from that half's ql (64 bytes) and qh (32 bytes).
inline void Q6KSignedCodes(const uint8_t* ql, const uint8_t* qh, int l, int q[4]) {
  q[0] = ((ql[l] & 0xF) | (((qh[l] >> 0) & 3) << 4)) - 32;
  q[1] = ((ql[l + 32] & 0xF) | (((qh[l] >> 2) & 3) << 4)) - 32;
  q[2] = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
  q[3] = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
}

// dst[i] = element i of a row of `n` elements stored as `dtype` at `src`, for any dtype.
// Requires n % BlockElements(dtype) == 0.
void DequantizeRow(DType dtype, const void* src, int64_t n, float* dst);

}  // namespace pdserve::quant

#endif  // PDSERVE_CORE_TENSOR_QUANT_BLOCKS_H_
