#include "kernels/cpu/blas.h"

#include <cblas.h>

namespace pdserve::kernels {

void Sgemm(const SgemmArgs& a) {
  static const bool single_threaded = [] {
    openblas_set_num_threads(1);
    return true;
  }();
  (void)single_threaded;
  cblas_sgemm(CblasRowMajor, CblasNoTrans, a.b_transposed ? CblasTrans : CblasNoTrans,
              static_cast<int>(a.m), static_cast<int>(a.n), static_cast<int>(a.k), a.alpha, a.a,
              static_cast<int>(a.lda), a.b, static_cast<int>(a.ldb), a.beta, a.c,
              static_cast<int>(a.ldc));
}

}  // namespace pdserve::kernels
