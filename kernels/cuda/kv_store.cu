#include <cuda_runtime.h>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/kv_device.cuh"
#include "kernels/cuda/kv_store.h"

namespace pdserve::kernels::cuda {
namespace {

using internal::E4M3ScaleFor;
using internal::kLanes;
using internal::Row;
using internal::RowOf;
using internal::WarpMax;
using internal::WarpSum;

// A warp per (row, target, KV head); a block holds kStoreWarps of one (row, target).
constexpr int kStoreWarps = 4;
constexpr int kChannelsPerLane = kMaxHeadDim / kLanes;

// out[i] = basis[i] · x for i < rank, x of head_dim ≤ kMaxHeadDim floats held by the lanes
// (channel lane + 32·j in x_lane[j]); basis rows head_dim floats apart. Called by a whole warp;
// out is written by lane 0.
__device__ void ProjectRow(const float* basis, int rank, int head_dim,
                           const float (&x_lane)[kChannelsPerLane], float* out) {
  const int lane = threadIdx.x % kLanes;
  for (int i = 0; i < rank; ++i) {
    const float* basis_row = basis + int64_t{i} * head_dim;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kChannelsPerLane; ++j) {
      const int c = lane + kLanes * j;
      if (c < head_dim) sum = fmaf(basis_row[c], x_lane[j], sum);
    }
    sum = WarpSum(sum);
    if (lane == 0) out[i] = sum;
  }
}

__device__ void LoadLanes(const float* x, int n, float (&x_lane)[kChannelsPerLane]) {
  const int lane = threadIdx.x % kLanes;
#pragma unroll
  for (int j = 0; j < kChannelsPerLane; ++j) {
    const int c = lane + kLanes * j;
    x_lane[j] = c < n ? x[c] : 0.0f;
  }
}

// core/kv/kv_row_codec.h's WriteKvRow for f32 and per-token FP8 sections: src holds row.dim
// floats. Called by a whole warp.
__device__ void WriteRow(const Row& row, const float* src) {
  const int lane = threadIdx.x % kLanes;
  if (!row.e4m3) {
    float* dst = reinterpret_cast<float*>(row.bytes);
    for (int c = lane; c < row.dim; c += kLanes) dst[c] = src[c];
    return;
  }
  float amax = 0.0f;
  for (int c = lane; c < row.dim; c += kLanes) amax = fmaxf(amax, fabsf(src[c]));
  const float scale = E4M3ScaleFor(WarpMax(amax));
  if (lane == 0) *row.scale = scale;
  for (int c = lane; c < row.dim; c += kLanes) {
    row.bytes[c] = EncodeE4M3(__fdiv_rn(src[c], scale));
  }
}

// grid (rows.n, batch.n), kStoreWarps warps: warp w stores KV heads w, w + kStoreWarps, ... of
// row blockIdx.x into target blockIdx.y.
__global__ void __launch_bounds__(kStoreWarps* kLanes)
    StoreKvKernel(const __grid_constant__ KvStoreBatch batch, const KvStoreRows rows) {
  __shared__ float projected[kStoreWarps][kMaxHeadDim];
  const int t = blockIdx.x, warp = threadIdx.x / kLanes;
  const KvStoreTarget& target = batch.targets[blockIdx.y];
  const float* row = rows.rows + int64_t{t} * rows.row_stride;
  const int32_t page_id = rows.page_ids[t];
  const int slot = rows.slots[t];
  int64_t v_column = target.v_column;
  for (int g = 0; g < rows.n_kv_heads; ++g) {
    const int64_t v_begin = v_column;
    v_column += target.v.dim(g);
    if (g % kStoreWarps != warp) continue;
    const float* k_src = row + target.k_column + int64_t{g} * rows.head_dim;
    if (target.k_basis != nullptr) {
      float x_lane[kChannelsPerLane];
      LoadLanes(k_src, rows.head_dim, x_lane);
      ProjectRow(target.k_basis + target.k_basis_offsets[g], target.k.dim(g), rows.head_dim, x_lane,
                 projected[warp]);
      __syncwarp();
      k_src = projected[warp];
    }
    WriteRow(RowOf(target.k, page_id, g, slot, rows.page_size), k_src);
    WriteRow(RowOf(target.v, page_id, g, slot, rows.page_size), row + v_begin);
    __syncwarp();  // the next head's projection overwrites projected[warp]
  }
}

// grid (n rows), one warp per query head in turn: blockDim.x / kLanes warps share the heads.
__global__ void __launch_bounds__(kStoreWarps* kLanes)
    ProjectQueriesKernel(const QueryProjection p, const float* q, int64_t q_stride, float* out,
                         int64_t out_stride) {
  const int t = blockIdx.x, warp = threadIdx.x / kLanes;
  const int group = p.n_heads / p.n_kv_heads;
  for (int h = warp; h < p.n_heads; h += kStoreWarps) {
    const int g = h / group;
    float x_lane[kChannelsPerLane];
    LoadLanes(q + int64_t{t} * q_stride + int64_t{h} * p.head_dim, p.head_dim, x_lane);
    ProjectRow(p.basis + p.basis_offsets[g], p.dims[g], p.head_dim, x_lane,
               out + int64_t{t} * out_stride + p.q_offsets[h]);
  }
}

}  // namespace

// Requires head_dim ≤ kMaxHeadDim, every target's K width ≤ head_dim, 0 ≤ batch.n ≤
// kMaxStoreTargets, and FP8 sections with per-token scales (scales_per_head == page_size).
void StoreKv(const KvStoreBatch& batch, const KvStoreRows& rows, cudaStream_t stream) {
  if (rows.n <= 0 || batch.n <= 0) return;
  StoreKvKernel<<<dim3(rows.n, batch.n), kStoreWarps * kLanes, 0, stream>>>(batch, rows);
}

// Requires head_dim ≤ kMaxHeadDim.
void ProjectQueries(const QueryProjection& projection, const float* q, int64_t q_stride, int n,
                    float* out, int64_t out_stride, cudaStream_t stream) {
  if (n <= 0) return;
  ProjectQueriesKernel<<<n, kStoreWarps * kLanes, 0, stream>>>(projection, q, q_stride, out,
                                                               out_stride);
}

}  // namespace pdserve::kernels::cuda
