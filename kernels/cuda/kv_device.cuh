// Device helpers shared by kernels/cuda/kv_store.cu and kcache_attention.cu: warp reductions, the
// FP8 per-token scale exactly as kernels/fp8.h's E4M3ScaleFor computes it, and element access to
// one token's row of one KV head in a paged section (kernels/kv_view.h), one channel at a time,
// so rows of any width and alignment work. Include from .cu files only.
#ifndef PDSERVE_KERNELS_CUDA_KV_DEVICE_CUH_
#define PDSERVE_KERNELS_CUDA_KV_DEVICE_CUH_

#include <cstdint>

#include "kernels/cuda/fp8_device.cuh"
#include "kernels/kv_view.h"

namespace pdserve::kernels::cuda::internal {

inline constexpr int kLanes = 32;
inline constexpr unsigned kAllLanes = 0xffffffffu;

// Every lane gets the sum (the max) over the warp's 32 values. All lanes must call.
__device__ __forceinline__ float WarpSum(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    v += __shfl_xor_sync(kAllLanes, v, offset);
  }
  return v;
}
__device__ __forceinline__ float WarpMax(float v) {
  for (int offset = kLanes / 2; offset > 0; offset /= 2) {
    v = fmaxf(v, __shfl_xor_sync(kAllLanes, v, offset));
  }
  return v;
}

// kernels::E4M3ScaleFor: amax / 448 (an IEEE division), at least FLT_MIN; 1 when amax is 0, NaN
// or infinite.
__device__ __forceinline__ float E4M3ScaleFor(float amax) {
  if (!(amax > 0.0f) || isinf(amax)) return 1.0f;
  return fmaxf(__fdiv_rn(amax, 448.0f), 0x1p-126f);
}

// One token's row of KV head g of a section: its elements and, for FP8, its scale.
struct Row {
  uint8_t* bytes;
  float* scale;  // null for f32 rows
  int dim;
  bool e4m3;
};

// The row of slot `slot` of page `page_id`. The scale slot is the token's (per-token scales) or
// the page's (per-page scales, scales_per_head == 1).
__device__ __forceinline__ Row RowOf(const KvSectionView& s, int32_t page_id, int g, int slot,
                                     int page_size) {
  uint8_t* page = const_cast<uint8_t*>(s.pool) + page_id * s.page_stride;
  Row row;
  row.dim = s.dim(g);
  row.e4m3 = s.e4m3;
  row.bytes = page + s.head_offset(g, page_size) + int64_t{slot} * row.dim * s.element_bytes();
  row.scale = s.e4m3 ? reinterpret_cast<float*>(page) + int64_t{g} * s.scales_per_head +
                           (s.scales_per_head == 1 ? 0 : slot)
                     : nullptr;
  return row;
}

// Element c < row.dim, dequantized with `scale` (*row.scale, read once by the caller; ignored for
// f32 rows) as kernels::DequantizeE4M3 does: one rounded product, never fused into a later add.
__device__ __forceinline__ float RowValue(const Row& row, float scale, int c) {
  if (row.e4m3) return __fmul_rn(DecodeE4M3(row.bytes[c]), scale);
  return reinterpret_cast<const float*>(row.bytes)[c];
}

}  // namespace pdserve::kernels::cuda::internal

#endif  // PDSERVE_KERNELS_CUDA_KV_DEVICE_CUH_
