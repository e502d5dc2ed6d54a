// Internal: the one place kernels call OpenBLAS. SGEMM runs single-threaded inside whichever of our
// pool's threads calls it (the pool splits the work), so OpenBLAS' own threading is switched off
// on first use. Thread-safe.
#ifndef PDSERVE_KERNELS_CPU_BLAS_H_
#define PDSERVE_KERNELS_CPU_BLAS_H_

#include <cstdint>

namespace pdserve::kernels {

struct SgemmArgs {
  int64_t m, n, k;  // C[m, n] = alpha · A[m, k] · op(B) + beta · C
  float alpha = 1.0f;
  const float* a;
  int64_t lda;
  const float* b;  // [k, n] rows ldb apart, or [n, k] when b_transposed
  int64_t ldb;
  bool b_transposed;
  float beta = 0.0f;
  float* c;
  int64_t ldc;
};

// Row-major SGEMM.
void Sgemm(const SgemmArgs& args);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_BLAS_H_
