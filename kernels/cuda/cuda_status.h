// CUDA runtime errors as absl::Status (with the call, file and line), whether a device is present,
// and what the device is (for benchmarks that compare against its peaks). Thread-safe.
#ifndef PDSERVE_KERNELS_CUDA_CUDA_STATUS_H_
#define PDSERVE_KERNELS_CUDA_CUDA_STATUS_H_

#include <cuda_runtime_api.h>

#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace pdserve::kernels::cuda {

// Internal (a bug or a broken device) for cudaErrorMemoryAllocation's ResourceExhausted aside;
// the message names the call, the CUDA error and where it was made. OK for cudaSuccess.
absl::Status CudaStatus(cudaError_t error, const char* call, const char* file, int line);

// True when the CUDA runtime sees a device; otherwise false and, when `why_not` is given, the
// runtime's reason (no driver, no device). Never fails.
bool CudaDeviceAvailable(std::string* why_not = nullptr);

struct DeviceInfo {
  std::string name;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  int64_t memory_bytes = 0;
  int64_t l2_bytes = 0;
  int64_t max_shared_per_block = 0;  // opt-in maximum
  // Theoretical DRAM bandwidth, bytes/s: 2 (DDR) × memory clock × bus width.
  double peak_memory_bandwidth = 0;
  // Dense bf16 tensor-core peak, FLOP/s, for Hopper (sm_90): 4096 FLOP per clock per SM (NVIDIA's
  // 989 TFLOP/s for the H100 SXM is 132 SMs × 4096 × 1.83 GHz) at the device's maximum SM clock,
  // so a little above the datasheet; 0 for other architectures.
  double peak_bf16_flops = 0;
};

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device = 0);

}  // namespace pdserve::kernels::cuda

// Evaluates a cudaError_t expression; returns its Status from the enclosing function on failure.
#define PDSERVE_CUDA_RETURN_IF_ERROR(expr)                                                         \
  do {                                                                                             \
    const cudaError_t pdserve_cuda_error_ = (expr);                                                \
    if (pdserve_cuda_error_ != cudaSuccess) {                                                      \
      return ::pdserve::kernels::cuda::CudaStatus(pdserve_cuda_error_, #expr, __FILE__, __LINE__); \
    }                                                                                              \
  } while (0)

#endif  // PDSERVE_KERNELS_CUDA_CUDA_STATUS_H_
