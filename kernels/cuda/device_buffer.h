// DeviceBuffer<T>: n elements of device memory (cudaMalloc), freed on destruction; PinnedBuffer<T>:
// n elements of page-locked host memory (cudaHostAlloc), for asynchronous copies. Move-only.
// Allocation happens once, at setup; the per-step path only uses what was allocated.
#ifndef PDSERVE_KERNELS_CUDA_DEVICE_BUFFER_H_
#define PDSERVE_KERNELS_CUDA_DEVICE_BUFFER_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <span>
#include <utility>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "kernels/cuda/cuda_status.h"

namespace pdserve::kernels::cuda {

template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(DeviceBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  ~DeviceBuffer() {
    if (data_ != nullptr) cudaFree(data_);
  }

  // ResourceExhausted naming the size when the device is full. n = 0 gives an empty buffer.
  static absl::StatusOr<DeviceBuffer> Allocate(size_t n) {
    DeviceBuffer buffer;
    if (n == 0) return buffer;
    const cudaError_t error = cudaMalloc(reinterpret_cast<void**>(&buffer.data_), n * sizeof(T));
    if (error != cudaSuccess) {
      buffer.data_ = nullptr;
      cudaGetLastError();
      return CudaStatus(error, absl::StrCat("cudaMalloc(", n * sizeof(T), " bytes)").c_str(),
                        __FILE__, __LINE__);
    }
    buffer.size_ = n;
    return buffer;
  }
  // Allocate(host.size()) and a synchronous copy of `host` into it (setup only).
  static absl::StatusOr<DeviceBuffer> FromHost(std::span<const T> host) {
    auto buffer = Allocate(host.size());
    if (!buffer.ok() || host.empty()) return buffer;
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(buffer->data(), host.data(), host.size_bytes(), cudaMemcpyHostToDevice));
    return buffer;
  }
  // Synchronous copy of the first host.size() elements to the host (tests, setup).
  absl::Status CopyToHost(std::span<T> host) const {
    PDSERVE_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(host.data(), data_, host.size_bytes(), cudaMemcpyDeviceToHost));
    return absl::OkStatus();
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  size_t bytes() const { return size_ * sizeof(T); }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

template <typename T>
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(PinnedBuffer&& other) noexcept
      : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept {
    std::swap(data_, other.data_);
    std::swap(size_, other.size_);
    return *this;
  }
  ~PinnedBuffer() {
    if (data_ != nullptr) cudaFreeHost(data_);
  }

  static absl::StatusOr<PinnedBuffer> Allocate(size_t n) {
    PinnedBuffer buffer;
    if (n == 0) return buffer;
    PDSERVE_CUDA_RETURN_IF_ERROR(cudaHostAlloc(reinterpret_cast<void**>(&buffer.data_),
                                               n * sizeof(T), cudaHostAllocDefault));
    buffer.size_ = n;
    return buffer;
  }

  T* data() { return data_; }
  const T* data() const { return data_; }
  size_t size() const { return size_; }
  std::span<T> span() { return {data_, size_}; }

 private:
  T* data_ = nullptr;
  size_t size_ = 0;
};

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_DEVICE_BUFFER_H_
