#include "kernels/cuda/cuda_status.h"

#include "absl/strings/str_cat.h"

namespace pdserve::kernels::cuda {

absl::Status CudaStatus(cudaError_t error, const char* call, const char* file, int line) {
  if (error == cudaSuccess) return absl::OkStatus();
  const std::string message =
      absl::StrCat(call, " failed at ", file, ":", line, ": ", cudaGetErrorName(error), " (",
                   cudaGetErrorString(error), ")");
  if (error == cudaErrorMemoryAllocation) return absl::ResourceExhaustedError(message);
  return absl::InternalError(message);
}

bool CudaDeviceAvailable(std::string* why_not) {
  int count = 0;
  const cudaError_t error = cudaGetDeviceCount(&count);
  if (error != cudaSuccess) {
    cudaGetLastError();  // clear the sticky-free error so later calls start clean
    if (why_not != nullptr) {
      *why_not = absl::StrCat("cudaGetDeviceCount: ", cudaGetErrorName(error), " (",
                              cudaGetErrorString(error), ")");
    }
    return false;
  }
  if (count == 0 && why_not != nullptr) *why_not = "cudaGetDeviceCount found no device";
  return count > 0;
}

absl::StatusOr<DeviceInfo> GetDeviceInfo(int device) {
  cudaDeviceProp prop;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaGetDeviceProperties(&prop, device));
  int memory_clock_khz = 0, clock_khz = 0;
  PDSERVE_CUDA_RETURN_IF_ERROR(
      cudaDeviceGetAttribute(&memory_clock_khz, cudaDevAttrMemoryClockRate, device));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaDeviceGetAttribute(&clock_khz, cudaDevAttrClockRate, device));
  DeviceInfo info;
  info.name = prop.name;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.memory_bytes = static_cast<int64_t>(prop.totalGlobalMem);
  info.l2_bytes = prop.l2CacheSize;
  info.max_shared_per_block = static_cast<int64_t>(prop.sharedMemPerBlockOptin);
  info.peak_memory_bandwidth = 2.0 * memory_clock_khz * 1e3 * (prop.memoryBusWidth / 8.0);
  if (prop.major == 9) info.peak_bf16_flops = 4096.0 * info.sm_count * clock_khz * 1e3;
  return info;
}

}  // namespace pdserve::kernels::cuda
