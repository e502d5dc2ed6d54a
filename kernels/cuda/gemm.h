// CUDA projections through cuBLAS: y[n, rows] = x[n, cols] · Wᵀ for a device weight matrix W
// [rows, cols] in f32, f16 or bf16, with x and y fp32 and fp32 accumulation — the contract of
// kernels/matmul.h. f32 weights run SGEMM with pedantic fp32 math (no TF32), so results differ
// from the CPU only by summation order. 16-bit weights: x is converted to W's dtype into the
// Gemm's own workspace, then one cublasGemmEx with 16-bit inputs, fp32 compute and fp32 output
// (tensor cores). Owns a cuBLAS handle bound to one stream; Run enqueues without synchronizing or
// allocating. Not thread-safe.
#ifndef PDSERVE_KERNELS_CUDA_GEMM_H_
#define PDSERVE_KERNELS_CUDA_GEMM_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <memory>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/tensor/dtype.h"

namespace pdserve::kernels::cuda {

struct DeviceMatrix {
  const void* data = nullptr;  // [rows, cols] row-major, device
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
};

class Gemm {
 public:
  // Workspace for activations of up to max_n rows of max_cols columns.
  static absl::StatusOr<std::unique_ptr<Gemm>> Create(cudaStream_t stream, int64_t max_n,
                                                      int64_t max_cols);
  ~Gemm();

  // InvalidArgument when n or the matrix exceeds what Create was sized for; Internal for a cuBLAS
  // failure (with the cuBLAS status name).
  absl::Status Run(const float* x, int64_t n, const DeviceMatrix& w, float* y);

 private:
  struct State;
  explicit Gemm(std::unique_ptr<State> state);
  std::unique_ptr<State> state_;
};

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_GEMM_H_
