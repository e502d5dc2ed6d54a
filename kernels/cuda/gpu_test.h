// For GPU tests (ctest label `gpu`): PDSERVE_REQUIRE_GPU() at the top of a test skips it, with the
// runtime's reason, when no CUDA device is present. Include only in tests.
#ifndef PDSERVE_KERNELS_CUDA_GPU_TEST_H_
#define PDSERVE_KERNELS_CUDA_GPU_TEST_H_

#include <string>

#include "gtest/gtest.h"
#include "kernels/cuda/cuda_status.h"

#define PDSERVE_REQUIRE_GPU()                                                \
  do {                                                                       \
    std::string pdserve_why_not_;                                            \
    if (!::pdserve::kernels::cuda::CudaDeviceAvailable(&pdserve_why_not_)) { \
      GTEST_SKIP() << "no CUDA device: " << pdserve_why_not_;                \
    }                                                                        \
  } while (0)

#endif  // PDSERVE_KERNELS_CUDA_GPU_TEST_H_
