#include <algorithm>

#include "kernels/cuda/fp8.h"
#include "kernels/cuda/fp8_device.cuh"

namespace pdserve::kernels::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int64_t kMaxBlocks = 8192;  // grid-stride loops cover the rest

// Blocks for n elements, one per kThreads up to kMaxBlocks; n > 0.
unsigned Blocks(int64_t n) {
  return static_cast<unsigned>(std::min<int64_t>((n + kThreads - 1) / kThreads, kMaxBlocks));
}

__global__ void QuantizeKernel(const float* x, int64_t n, float scale, uint8_t* codes) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += step) {
    codes[i] = EncodeE4M3(__fdiv_rn(x[i], scale));  // IEEE division, as the CPU's
  }
}

__global__ void DequantizeKernel(const uint8_t* codes, int64_t n, float scale, float* out) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += step) {
    out[i] = __fmul_rn(DecodeE4M3(codes[i]), scale);
  }
}

__global__ void EncodeBitPatternsKernel(uint32_t first, int64_t n, uint8_t* codes) {
  const int64_t step = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < n; i += step) {
    codes[i] = EncodeE4M3(__uint_as_float(first + static_cast<uint32_t>(i)));
  }
}

}  // namespace

void QuantizeE4M3(const float* x, int64_t n, float scale, uint8_t* codes, cudaStream_t stream) {
  if (n <= 0) return;
  QuantizeKernel<<<Blocks(n), kThreads, 0, stream>>>(x, n, scale, codes);
}

void DequantizeE4M3(const uint8_t* codes, int64_t n, float scale, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  DequantizeKernel<<<Blocks(n), kThreads, 0, stream>>>(codes, n, scale, out);
}

void EncodeBitPatterns(uint32_t first, int64_t n, uint8_t* codes, cudaStream_t stream) {
  if (n <= 0) return;
  EncodeBitPatternsKernel<<<Blocks(n), kThreads, 0, stream>>>(first, n, codes);
}

}  // namespace pdserve::kernels::cuda
