// Internal: dot products of quantized weight rows (ggml block formats, core/tensor/quant_blocks.h)
// with activations quantized to int8 blocks, as ggml's own vec_dot does: the integer products of
// a block are summed exactly and scaled once per block. Matmul's decode path (kernels/matmul.h)
// quantizes each activation row once with a QuantGemvKernel's quantizer, then runs the kernel
// over the weight rows.
//
// The standard activation layouts, by the weight type's block size:
//   ActBlock32 for Q8_0, Q4_0, Q4_1, Q5_0, Q5_1 (32 elements; `sum` = d·Σ qs for the minimums,
//   and its halves' for the int8 GEMM's Q6_K panels);
//   ActBlockK for the K-quants (256 elements; bsums = Σ qs per 16 for the minimums and offsets).
// The AVX512-VNNI kernels keep the same codes and scales in layouts of their own, ordered as their
// weight unpacking leaves the codes (quant_gemv_vnni.cc). Pure functions: thread-safe.
#ifndef PDSERVE_KERNELS_CPU_QUANT_DOT_H_
#define PDSERVE_KERNELS_CPU_QUANT_DOT_H_

#include <cstddef>
#include <cstdint>

#include "core/tensor/dtype.h"

namespace pdserve::kernels {

struct ActBlock32 {
  float d;
  float sum;           // d·Σ qs
  float half_sums[2];  // d·Σ qs[0, 16), d·Σ qs[16, 32): Q6_K panels' units (gemm_kernels.h)
  int8_t qs[32];

  // The sum for unit u of a block of kUnits (1 or 2): sum, or half_sums[u]. Always inlined, as
  // the int8 tiles of every ISA call it (no out-of-line copy compiled for one ISA runs in another).
  template <int kUnits>
  [[gnu::always_inline]] float UnitSum(int u) const {
    if constexpr (kUnits == 1) {
      return sum;
    } else {
      return half_sums[u];
    }
  }
};

struct ActBlockK {
  float d;
  int16_t bsums[16];
  int8_t qs[256];
};

// Bytes of one activation row of `cols` elements quantized for weights of `dtype` (quantized).
size_t QuantizedActivationBytes(DType dtype, int64_t cols);

// Quantizes x[cols] for weights of `dtype` into `out` (QuantizedActivationBytes bytes): per
// block qs = round(x·127/max|x|) (half to even) and d ≈ max|x|/127, as ggml quantizes
// activations (Q8_0: d rounded to f16; Q8_K: f32). Requires cols % BlockElements(dtype) == 0.
void QuantizeActivations(DType dtype, const float* x, int64_t cols, void* out);

// One block of QuantizeActivations: the n (32 or 256) codes of x into q; returns the block's d.
float QuantizeActivationBlock(const float* x, int n, int8_t* q);

// Σ_c W[c]·x[c] for one weight row `w` of `cols` elements and its quantized activations `act`.
using QuantDotFn = float (*)(const void* w, const void* act, int64_t cols);

// The scalar reference for `dtype`: blocks in order, each block's integer sum scaled and added
// in fp32. nullptr for plain dtypes.
QuantDotFn ScalarQuantDot(DType dtype);

namespace avx2 {
// The AVX2 kernel for `dtype`, or nullptr where there is none (the scalar one then runs).
QuantDotFn QuantDot(DType dtype);
// quant::DequantizeRow's floats, bit for bit, for Q8_0, Q4_0, Q4_K, Q5_K and Q6_K (true);
// false, writing nothing, for other dtypes (dequantize_avx2.cc).
bool DequantizeRow(DType dtype, const void* src, int64_t n, float* dst);
}  // namespace avx2

namespace avx512 {
// The AVX-512BW kernel for `dtype` (Q8_0, Q4_0), or nullptr (quant_dot_avx512.cc). Only for CPUs
// with AVX-512.
QuantDotFn QuantDot(DType dtype);
}  // namespace avx512

// The fastest kernel the CPU and PDSERVE_SIMD allow for `dtype` (never nullptr for quantized).
QuantDotFn BestQuantDot(DType dtype);

// Block b (32 elements) of a weight row as unsigned codes u[32] with value = scale·u − min as the
// format's dequantization computes it in fp32, bit for bit (for the K-quants, sub-block b of the
// row); the prefill int8 GEMM's weights (gemm_kernels.h).
using Block32AsU8Fn = void (*)(const void* row, int64_t b, uint8_t* u, float* scale, float* min);

// The function for `dtype`, or nullptr where 32-element blocks with one scale do not exist
// (plain dtypes; Q6_K, whose scales cover 16 elements).
Block32AsU8Fn Block32AsU8For(DType dtype);

// The largest code Block32AsU8For(dtype) writes: 255 (Q8_0), 31 (Q5_0, Q5_1, Q5_K), 15 (Q4_0,
// Q4_1, Q4_K).
int Block32AsU8MaxCode(DType dtype);

// A decode GEMV kernel for one weight format: each x row is quantized once into the kernel's
// activation layout (activation_bytes(dtype, cols) bytes), then `rows` computes
// y[b·ldy + r] = Σ_c W[r][c]·x_b[c] for r < n_rows and b < nb, W's rows `row_bytes` apart and
// the activation rows `act_bytes` apart (the VNNI kernels unpack each weight group once for up to
// 4 of them). Kernels with equal `quantize` and block size read the same activation bytes.
//
// Weights are read once per token, mostly from memory: the kernels ask for the bytes
// kQuantPrefetchBytes ahead of those they read (a page ahead, where the hardware prefetchers,
// which stop at page boundaries, do not reach; 110M Q8_0 decode on a Xeon, 2 threads: 130 → 291
// tokens/s).
struct QuantGemvKernel {
  size_t (*activation_bytes)(DType dtype, int64_t cols);
  void (*quantize)(DType dtype, const float* x, int64_t cols, void* act);
  void (*rows)(DType dtype, const uint8_t* w, size_t row_bytes, int64_t n_rows, const void* act,
               size_t act_bytes, int nb, int64_t cols, float* y, int64_t ldy);
  // Activation rows from which Matmul's prefill GEMM, which unpacks every weight once per call,
  // beats this kernel (stories110M Q4_0 decode batches, Intel Xeon, 2 threads: the VNNI kernels,
  // which unpack a weight group once per 4 x rows, 48-63; the one-row kernels 8-16).
  int64_t gemm_from_rows;
};

inline constexpr int kQuantPrefetchBytes = 4096;

namespace avx512 {
// The AVX512-VNNI/VBMI kernel for rows of `cols` elements of `dtype` (Q8_0, Q4_0 with
// cols % 128 == 0; Q4_K, Q6_K), or a kernel whose `rows` is nullptr. Only for CPUs with
// CpuFeatures::avx512_vnni (quant_gemv_vnni.cc).
QuantGemvKernel VnniQuantGemv(DType dtype, int64_t cols);
}  // namespace avx512

// The fastest GEMV kernel the CPU and PDSERVE_SIMD allow for rows of `cols` elements of `dtype`
// (quantized): a VNNI one where there is one, else the standard layout with BestQuantDot per row.
QuantGemvKernel BestQuantGemv(DType dtype, int64_t cols);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_QUANT_DOT_H_
