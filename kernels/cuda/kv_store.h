// CUDA KV cache writes: rows of post-RoPE K and V (as projected, several cache layers side by side
// in one row for SwiftKV) go into their page slots in one launch — the SwiftKV bulk cache write,
// and each ordinary layer's write. For each target cache layer and KV head the K row is first
// projected onto the ZACK Q/K basis when the target has one; each row is then stored as
// core/kv/kv_row_codec.h's WriteKvRow stores it: f32 copied, FP8 per-token-per-head quantized with
// scale E4M3ScaleFor(amax of the row) — bit-identical bytes. Per-page FP8 scales are not
// supported on the GPU (the engine refuses them). Device pointers; enqueued on `stream`.
#ifndef PDSERVE_KERNELS_CUDA_KV_STORE_H_
#define PDSERVE_KERNELS_CUDA_KV_STORE_H_

#include <cuda_runtime_api.h>

#include <cstdint>

#include "kernels/kv_view.h"

namespace pdserve::kernels::cuda {

inline constexpr int kMaxStoreTargets = 16;

// One cache layer to write. The views' pools are written (their constness is the readers').
struct KvStoreTarget {
  KvSectionView k;
  KvSectionView v;
  // ZACK Q/K basis: KV head g's k.dim(g) rows of head_dim floats at k_basis + k_basis_offsets[g];
  // null = store K as is (k.dim(g) = head_dim).
  const float* k_basis = nullptr;
  const int64_t* k_basis_offsets = nullptr;
  int64_t k_column = 0;  // this target's K heads start at float k_column of a row (head g at + g·d)
  int64_t v_column = 0;  // its V heads start at v_column, head g's v.dim(g) floats after head g−1's
};

struct KvStoreBatch {
  int n = 0;
  KvStoreTarget targets[kMaxStoreTargets];
};

struct KvStoreRows {
  const float* rows = nullptr;  // [n, row_stride]
  int64_t row_stride = 0;
  int n = 0;
  const int32_t* page_ids = nullptr;  // [n]: the page (in every target's pool) of row t
  const int32_t* slots = nullptr;     // [n]: its slot in that page, < page_size
  int page_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

void StoreKv(const KvStoreBatch& batch, const KvStoreRows& rows, cudaStream_t stream);

// ZACK query projection: for each row t and query head h with KV head g = h / (n_heads /
// n_kv_heads), out[t·out_stride + q_offsets[h] + i] = basis_g[i] · q[t·q_stride + h·head_dim ..]
// for i < dims[g] — kernels/basis_projection.h's ProjectRows per head.
struct QueryProjection {
  const float* basis = nullptr;
  const int64_t* basis_offsets = nullptr;  // [n_kv_heads]
  const int* dims = nullptr;               // [n_kv_heads]
  const int* q_offsets = nullptr;          // [n_heads]
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

void ProjectQueries(const QueryProjection& projection, const float* q, int64_t q_stride, int n,
                    float* out, int64_t out_stride, cudaStream_t stream);

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_KV_STORE_H_
