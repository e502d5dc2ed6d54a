// Device helpers of kernels/cuda/attention.cu: reading one token's row of one KV head out of a
// paged section (f32 or FP8 e4m3, any alignment) into registers, a warp lane at a time. Include
// from attention.cu only.
//
// Lane mapping shared by every caller: lane `lane` holds chunk j (j < J) of a row, the channels
// [4·(lane + 32·j), +4); channels at or past the row's width read as 0.
#ifndef PDSERVE_KERNELS_CUDA_ATTENTION_INTERNAL_CUH_
#define PDSERVE_KERNELS_CUDA_ATTENTION_INTERNAL_CUH_

#include <cstdint>

#include "kernels/attention_shape.h"
#include "kernels/cuda/fp8_device.cuh"

namespace pdserve::kernels::cuda::internal {

inline constexpr int kWarpSize = 32;

// Where KV head g's rows of one section live, resolved once per block.
struct RowSource {
  const uint8_t* pool;
  int64_t page_stride;
  int64_t head_offset;  // bytes from the page start to the head's first row
  int dim;              // elements per row
  int row_bytes;
  int scale_index;  // float index (from the page start) of the head's first scale
  int scale_step;   // 1: one scale per token slot; 0: one per page
  bool e4m3;
  // Every row starts 16-byte (f32) or 4-byte (e4m3) aligned and dim % 4 == 0: whole chunks are
  // one vector load.
  bool vector;
};

__device__ __forceinline__ RowSource MakeRowSource(const KvSectionView& s, int g, int page_size) {
  RowSource r;
  r.pool = s.pool;
  r.page_stride = s.page_stride;
  r.head_offset = s.head_offset(g, page_size);
  r.dim = s.dim(g);
  r.row_bytes = r.dim * s.element_bytes();
  r.scale_index = g * s.scales_per_head;
  r.scale_step = s.scales_per_head > 1 ? 1 : 0;
  r.e4m3 = s.e4m3;
  const uint64_t alignment = s.e4m3 ? 4 : 16;
  const uint64_t bits = reinterpret_cast<uintptr_t>(s.pool) | static_cast<uint64_t>(s.page_stride) |
                        static_cast<uint64_t>(r.head_offset);
  r.vector = r.dim % 4 == 0 && bits % alignment == 0;
  return r;
}

// One row's chunks as loaded: f32 bit patterns (x..w), or four e4m3 codes in x (byte e = channel
// e); `scale` multiplies FP8 codes (1 for f32).
template <int J>
struct RawRow {
  uint4 chunk[J];
  float scale;
};

// Chunk starting at channel c0 of `row`; zeros past the row's width.
__device__ __forceinline__ uint4 LoadChunk(const RowSource& s, const uint8_t* row, int c0) {
  uint4 v = make_uint4(0, 0, 0, 0);
  if (c0 >= s.dim) return v;
  if (s.e4m3) {
    if (s.vector) {
      v.x = __ldg(reinterpret_cast<const unsigned*>(row + c0));
    } else {
      for (int e = 0; e < 4 && c0 + e < s.dim; ++e) v.x |= unsigned{__ldg(row + c0 + e)} << (8 * e);
    }
    return v;
  }
  const float* f = reinterpret_cast<const float*>(row) + c0;
  if (s.vector) {
    const float4 x = __ldg(reinterpret_cast<const float4*>(f));
    return make_uint4(__float_as_uint(x.x), __float_as_uint(x.y), __float_as_uint(x.z),
                      __float_as_uint(x.w));
  }
  v.x = __float_as_uint(__ldg(f));
  if (c0 + 1 < s.dim) v.y = __float_as_uint(__ldg(f + 1));
  if (c0 + 2 < s.dim) v.z = __float_as_uint(__ldg(f + 2));
  if (c0 + 3 < s.dim) v.w = __float_as_uint(__ldg(f + 3));
  return v;
}

// Issues the loads of token `key`'s row (this lane's chunks) without waiting on them.
template <int J>
__device__ __forceinline__ void LoadRow(const RowSource& s, const PagedKvView& kv, int key,
                                        int lane, RawRow<J>& out) {
  const int32_t page_id = __ldg(kv.pages + key / kv.page_size);
  const int slot = key % kv.page_size;
  const uint8_t* page = s.pool + page_id * s.page_stride;
  const uint8_t* row = page + s.head_offset + int64_t{slot} * s.row_bytes;
  out.scale =
      s.e4m3 ? __ldg(reinterpret_cast<const float*>(page) + s.scale_index + slot * s.scale_step)
             : 1.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) out.chunk[j] = LoadChunk(s, row, 4 * (lane + kWarpSize * j));
}

template <int J>
__device__ __forceinline__ void ZeroRow(RawRow<J>& out) {
  out.scale = 0.0f;
#pragma unroll
  for (int j = 0; j < J; ++j) out.chunk[j] = make_uint4(0, 0, 0, 0);
}

// Channel values of one loaded chunk.
__device__ __forceinline__ float4 Dequantize(bool e4m3, uint4 raw, float scale) {
  if (!e4m3) {
    return make_float4(__uint_as_float(raw.x), __uint_as_float(raw.y), __uint_as_float(raw.z),
                       __uint_as_float(raw.w));
  }
  return make_float4(DecodeE4M3(raw.x & 0xff) * scale, DecodeE4M3((raw.x >> 8) & 0xff) * scale,
                     DecodeE4M3((raw.x >> 16) & 0xff) * scale, DecodeE4M3(raw.x >> 24) * scale);
}

__device__ __forceinline__ float Component(const float4& v, int e) {
  return e == 0 ? v.x : e == 1 ? v.y : e == 2 ? v.z : v.w;
}

__device__ __forceinline__ float Dot4(const float4& a, const float4& b, float sum) {
  sum = fmaf(a.x, b.x, sum);
  sum = fmaf(a.y, b.y, sum);
  sum = fmaf(a.z, b.z, sum);
  return fmaf(a.w, b.w, sum);
}

__device__ __forceinline__ float4 Fma4(float p, const float4& v, const float4& acc) {
  return make_float4(fmaf(p, v.x, acc.x), fmaf(p, v.y, acc.y), fmaf(p, v.z, acc.z),
                     fmaf(p, v.w, acc.w));
}

__device__ __forceinline__ float4 Scale4(const float4& v, float s) {
  return make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
}

}  // namespace pdserve::kernels::cuda::internal

#endif  // PDSERVE_KERNELS_CUDA_ATTENTION_INTERNAL_CUH_
