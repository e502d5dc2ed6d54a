// For GPU tests (ctest label `gpu`): PDSERVE_REQUIRE_GPU() at the top of a test skips it, with the
// runtime's reason, when no CUDA device is present; Upload copies host data into a new device
// buffer. Include only in tests.
#ifndef PDSERVE_KERNELS_CUDA_GPU_TEST_H_
#define PDSERVE_KERNELS_CUDA_GPU_TEST_H_

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <utility>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"

#define PDSERVE_REQUIRE_GPU()                                                \
  do {                                                                       \
    std::string pdserve_why_not_;                                            \
    if (!::pdserve::kernels::cuda::CudaDeviceAvailable(&pdserve_why_not_)) { \
      GTEST_SKIP() << "no CUDA device: " << pdserve_why_not_;                \
    }                                                                        \
  } while (0)

namespace pdserve::kernels::cuda {

// A device copy of `host`. A test cannot go on without its inputs, so a failing device aborts the
// test binary with the CUDA error.
template <typename T>
DeviceBuffer<T> Upload(std::span<const T> host) {
  auto buffer = DeviceBuffer<T>::FromHost(host);
  if (!buffer.ok()) {
    std::fprintf(stderr, "upload failed: %s\n", buffer.status().ToString().c_str());
    std::abort();
  }
  return std::move(*buffer);
}

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_GPU_TEST_H_
