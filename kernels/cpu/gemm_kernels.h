// Internal: the register-blocked micro-kernels of Matmul's prefill GEMM (kernels/cpu/matmul.cc),
// one per instruction-set level. Weights are packed into panels of kGemmNr rows, k-major (panel
// element [k, j] = W[row0 + j, k0 + k] at panel[k · kGemmNr + j], zero past the last row); a
// kernel computes an mr × nr tile y[i, j] (+)= Σ_{k < kc} x[i, k] · panel[k · kGemmNr + j] for
// i < mr ≤ kGemmMr and j < nr ≤ kGemmNr, one fp32 FMA per k in order, writing only j < nr.
#ifndef PDSERVE_KERNELS_CPU_GEMM_KERNELS_H_
#define PDSERVE_KERNELS_CPU_GEMM_KERNELS_H_

#include <cstdint>

namespace pdserve::kernels {

struct GemmTileArgs {
  const float* x;  // x[i, k] at x[i · ldx + k]
  int64_t ldx;
  int mr;
  const float* panel;  // kc × kGemmNr floats
  int64_t kc;
  float* y;  // y[i, j] at y[i · ldy + j]
  int64_t ldy;
  int nr;
  bool accumulate;  // add to y's values instead of overwriting them
};

namespace avx2 {
inline constexpr int kGemmMr = 6, kGemmNr = 16;  // 12 accumulators of 8 floats
void GemmTile(const GemmTileArgs& args);
}  // namespace avx2

namespace avx512 {
inline constexpr int kGemmMr = 12, kGemmNr = 32;  // 24 accumulators of 16 floats
void GemmTile(const GemmTileArgs& args);
}  // namespace avx512

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_GEMM_KERNELS_H_
