// Matmul: y[n, rows] = x[n, cols] · Wᵀ, W a [rows, cols] weight matrix in f32, f16, bf16 or a
// ggml block format (core/tensor/quant_blocks.h), x and y fp32, accumulation in fp32, on weights
// as stored. (An engine's f32/16-bit matrices are packed once at load instead and multiplied by
// kernels/projection.h, which falls back to these for quantized ones.)
//
// The fast path splits W's rows across the pool's threads. Few activation rows (decode) run
// vectorized GEMV kernels that stream each weight row once for up to kGemvMaxBatch rows of x
// (AVX-512 when present, else AVX2); more (a decode step of many sequences) widen each block of 16
// weight rows to fp32 once and sweep every x row over it in register tiles; for quantized W each
// x row is first quantized to int8 blocks and the rows are integer dot products, as ggml computes
// them (kernels/cpu/quant_dot.h). Many rows
// (prefill) run our own GEMM: each thread packs a chunk of 128 weight rows (widened or dequantized
// to fp32) into k-major panels, then register-blocked micro-kernels (kernels/cpu/gemm_kernels.h;
// AVX-512 12 × 32 or AVX2 6 × 16, chosen by cpuid) sweep the activation rows over each K block.
// The reference is the specification: plain loops over the weights as floats (quantized ones
// dequantized), sequential fp32 sums.
#ifndef PDSERVE_KERNELS_MATMUL_H_
#define PDSERVE_KERNELS_MATMUL_H_

#include <cstdint>
#include <span>

#include "core/base/thread_pool.h"
#include "core/tensor/tensor.h"

namespace pdserve::kernels {

inline constexpr int kGemvMaxBatch = 4;

// Floats of workspace that Matmul needs for `num_threads` threads and matrices of up to
// `max_cols` columns.
size_t MatmulWorkspaceFloats(int num_threads, int64_t max_cols);

// Requires w.shape == {rows, cols}, x with n·cols and y with n·rows floats, y not aliasing x, and
// a workspace of MatmulWorkspaceFloats(pool.size(), cols) floats. Does not allocate.
void Matmul(ThreadPool& pool, const float* x, int64_t n, const Tensor& w, float* y,
            std::span<float> workspace);

// Matrices of one column count stacked row-wise, possibly in different formats (Q4_K_M files keep
// some layers' V in Q6_K beside Q4_K Q/K): y[n, Σ rows], part p's outputs after those of the
// parts before it. Otherwise as above, with the workspace sized for the widest part.
void Matmul(ThreadPool& pool, const float* x, int64_t n, std::span<const Tensor> parts, float* y,
            std::span<float> workspace);

// Same contract as the first, single-threaded, no workspace.
void MatmulReference(const float* x, int64_t n, const Tensor& w, float* y);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_MATMUL_H_
