// PDSERVE_HOST_DEVICE marks small inline helpers of the kernel-facing structs (kernels/kv_view.h,
// kernels/attention.h) so CUDA kernels can call them on the device; plain C++ sees nothing.
#ifndef PDSERVE_KERNELS_HOST_DEVICE_H_
#define PDSERVE_KERNELS_HOST_DEVICE_H_

#if defined(__CUDACC__)
#define PDSERVE_HOST_DEVICE __host__ __device__
#else
#define PDSERVE_HOST_DEVICE
#endif

#endif  // PDSERVE_KERNELS_HOST_DEVICE_H_
