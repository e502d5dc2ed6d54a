// Internal: the SIMD GEMV row kernels behind Matmul, one set per instruction-set level. Each
// computes y[b, r] = Σ_c x[b, c]·W[r, c] for b < nb ≤ kGemvMaxBatch and r in [row_begin, row_end),
// with x rows `ldx` floats apart and y rows `ldy` floats apart. Any `cols` works (scalar tail).
#ifndef PDSERVE_KERNELS_CPU_GEMV_KERNELS_H_
#define PDSERVE_KERNELS_CPU_GEMV_KERNELS_H_

#include <cstdint>

#include "core/tensor/dtype.h"

namespace pdserve::kernels {

struct GemvArgs {
  const float* x;
  int nb;
  int64_t ldx;
  const void* w;
  DType w_dtype;
  int64_t cols;
  float* y;
  int64_t ldy;
};

// Batches of x rows too many for GemvArgs (decode steps of many sequences): y[b, j] =
// Σ_c x[b, c]·w[j, c] for b < n and j < rows, over weight rows of `w_dtype` (f32, f16 or bf16;
// 16-bit weights are widened in registers) `ldw` elements apart. Any n, rows, cols.
struct BatchGemvArgs {
  const float* x;
  int64_t ldx;
  int64_t n;
  const void* w;
  DType w_dtype;
  int64_t ldw;
  int64_t rows;
  int64_t cols;
  float* y;
  int64_t ldy;
  bool accumulate;  // add to y's values instead of overwriting them
  // Bytes for the kernel to prefetch into L2 while it computes (the caller's next weights), spread
  // over its tiles; none when prefetch_bytes is 0.
  const void* prefetch;
  int64_t prefetch_bytes;
};

namespace avx2 {
void GemvRows(const GemvArgs& args, int64_t row_begin, int64_t row_end);
void BatchGemvRows(const BatchGemvArgs& args);
// dst[i] = float(src[i]) for a 16-bit row; used to widen weight blocks for SGEMM.
void WidenRow(const void* src, DType dtype, int64_t n, float* dst);
}  // namespace avx2

namespace avx512 {
void GemvRows(const GemvArgs& args, int64_t row_begin, int64_t row_end);
void BatchGemvRows(const BatchGemvArgs& args);
}  // namespace avx512

// BatchGemvRows of the active instruction set (kernels/cpu_features.h).
void ActiveBatchGemvRows(const BatchGemvArgs& args);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_GEMV_KERNELS_H_
