#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cuda/attention.h"
#include "kernels/cuda/attention_internal.cuh"

namespace pdserve::kernels::cuda {
namespace {

using internal::Component;
using internal::Dequantize;
using internal::Dot4;
using internal::Fma4;
using internal::kWarpSize;
using internal::LoadRow;
using internal::MakeRowSource;
using internal::RawRow;
using internal::RowSource;
using internal::Scale4;
using internal::ZeroRow;

static_assert(sizeof(SequenceBatch) < 32000, "the batch must fit the kernel parameter space");

constexpr unsigned kFullMask = 0xffffffffu;

__device__ int64_t DeviceQStride(const AttentionShape& s, const AttentionSequence& seq) {
  return seq.q_row_stride > 0 ? seq.q_row_stride : int64_t{s.n_heads} * s.head_dim;
}
__device__ int64_t DeviceOutStride(const AttentionShape& s, const AttentionSequence& seq) {
  return seq.out_row_stride > 0 ? seq.out_row_stride : int64_t{s.n_heads} * s.head_dim;
}

// ---------------------------------------------------------------------------------------------
// Prefill: block = (block of kBlockQueries queries, query head, sequence), 16×16 threads. Thread
// (tx, ty) owns query rows ty·4 + i (i < 4): scores against keys tx and tx + 16 of each kBlockKeys
// tile, and output channels tx + 16·j (j < kC). Shared memory (floats, rows `sd` apart, sd odd so
// that rows fall in different banks): Q [kBlockQueries][sd], K and V tiles [kBlockKeys][sd],
// probabilities [kBlockQueries][kBlockKeys + 1].

constexpr int kBlockQueries = 64;
constexpr int kBlockKeys = 32;
constexpr int kPrefillThreads = 256;
constexpr int kPrefillWarps = kPrefillThreads / kWarpSize;
constexpr int kRowsPerThread = 4;  // kBlockQueries / 16
constexpr int kPStride = kBlockKeys + 1;

__host__ __device__ int SmemStride(int head_dim) { return head_dim / 2 * 2 + 1; }

size_t PrefillSmemBytes(int head_dim) {
  const int sd = SmemStride(head_dim);
  return sizeof(float) *
         (size_t{kBlockQueries + 2 * kBlockKeys} * sd + size_t{kBlockQueries} * kPStride);
}

// Rows [k0, k0 + kBlockKeys) of `src` dequantized into tile[row · sd + c] for c < src.dim; rows at
// or past n_keys are zeros. One warp per row, all of a thread's rows loaded before any is stored.
template <int J>
__device__ void LoadTile(const RowSource& src, const PagedKvView& kv, int k0, int n_keys, int sd,
                         float* tile) {
  constexpr int kRows = kBlockKeys / kPrefillWarps;
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;
  RawRow<J> raw[kRows];
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    const int key = k0 + warp + kPrefillWarps * r;
    if (key < n_keys) {
      LoadRow(src, kv, key, lane, raw[r]);
    } else {
      ZeroRow(raw[r]);
    }
  }
#pragma unroll
  for (int r = 0; r < kRows; ++r) {
    float* row = tile + (warp + kPrefillWarps * r) * sd;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float4 v = Dequantize(src.e4m3, raw[r].chunk[j], raw[r].scale);
      const int c0 = 4 * (lane + kWarpSize * j);
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        if (c0 + e < src.dim) row[c0 + e] = Component(v, e);
      }
    }
  }
}

// Max and sum over the 16 lanes of a half warp (the threads of one ty).
__device__ __forceinline__ float HalfWarpMax(float v) {
  for (int offset = 8; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullMask, v, offset));
  return v;
}
__device__ __forceinline__ float HalfWarpSum(float v) {
  for (int offset = 8; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullMask, v, offset);
  return v;
}

// The online-softmax state of this thread's query rows, and its output channels.
template <int kC>
struct PrefillState {
  float m[kRowsPerThread];
  float l[kRowsPerThread];
  float acc[kRowsPerThread][kC];
};

// Scores of the thread's rows against its two keys of the tile starting at k0, folded into the
// running max and sum; the probabilities go to ps. Rows see keys ≤ their position and < n_keys.
template <int kC>
__device__ void ScoreTile(const float* qs, const float* ks, int sd, int dk, float scale, int k0,
                          int n_keys, int first_pos, PrefillState<kC>& st, float* ps) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  float s[kRowsPerThread][2] = {};
  for (int c = 0; c < dk; ++c) {
    const float k_a = ks[tx * sd + c], k_b = ks[(tx + 16) * sd + c];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) {
      const float q = qs[(ty * kRowsPerThread + i) * sd + c];
      s[i][0] = fmaf(q, k_a, s[i][0]);
      s[i][1] = fmaf(q, k_b, s[i][1]);
    }
  }
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int row = ty * kRowsPerThread + i;
    const int pos = first_pos + row;
#pragma unroll
    for (int jj = 0; jj < 2; ++jj) {
      const int key = k0 + tx + 16 * jj;
      s[i][jj] = key < n_keys && key <= pos ? s[i][jj] * scale : -INFINITY;
    }
    // Key 0 is in the first tile and every row sees it, so m_new is finite from then on.
    const float m_new = fmaxf(st.m[i], HalfWarpMax(fmaxf(s[i][0], s[i][1])));
    const float correction = expf(st.m[i] - m_new);
    const float p0 = expf(s[i][0] - m_new), p1 = expf(s[i][1] - m_new);
    st.l[i] = st.l[i] * correction + HalfWarpSum(p0 + p1);
    st.m[i] = m_new;
#pragma unroll
    for (int j = 0; j < kC; ++j) st.acc[i][j] *= correction;
    ps[row * kPStride + tx] = p0;
    ps[row * kPStride + tx + 16] = p1;
  }
}

// acc += P · V over one tile.
template <int kC>
__device__ void AccumulateTile(const float* ps, const float* vs, int sd, int dv,
                               PrefillState<kC>& st) {
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
  for (int k = 0; k < kBlockKeys; ++k) {
    float p[kRowsPerThread];
#pragma unroll
    for (int i = 0; i < kRowsPerThread; ++i) p[i] = ps[(ty * kRowsPerThread + i) * kPStride + k];
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int c = tx + 16 * j;
      if (c < dv) {
        const float v = vs[k * sd + c];
#pragma unroll
        for (int i = 0; i < kRowsPerThread; ++i) st.acc[i][j] = fmaf(p[i], v, st.acc[i][j]);
      }
    }
  }
}

// kC: output channels per thread, 16·kC ≥ head_dim.
template <int kC>
__global__ void __launch_bounds__(kPrefillThreads)
    PrefillKernel(const AttentionShape shape, const __grid_constant__ SequenceBatch batch) {
  constexpr int J = (16 * kC + 127) / 128;
  const AttentionSequence& seq = batch.sequences[blockIdx.z];
  // Heaviest (latest) query blocks first: they see the most keys.
  const int q0 = (gridDim.x - 1 - blockIdx.x) * kBlockQueries;
  if (seq.n_queries <= 1 || q0 >= seq.n_queries) return;  // whole block, before any barrier
  const int h = blockIdx.y, g = h / shape.group();
  const RowSource k_src = MakeRowSource(seq.kv.k, g, seq.kv.page_size);
  const RowSource v_src = MakeRowSource(seq.kv.v, g, seq.kv.page_size);
  const int dk = k_src.dim, dv = v_src.dim;
  const int n_rows = min(kBlockQueries, seq.n_queries - q0);
  const int n_keys = seq.start_pos + q0 + n_rows;  // what the block's last query sees
  const int sd = SmemStride(shape.head_dim);
  extern __shared__ float smem[];
  float* qs = smem;
  float* ks = qs + kBlockQueries * sd;
  float* vs = ks + kBlockKeys * sd;
  float* ps = vs + kBlockKeys * sd;

  const int64_t q_stride = DeviceQStride(shape, seq);
  const float* q = seq.q + q0 * q_stride + shape.q_offset(h);
  for (int idx = threadIdx.x; idx < kBlockQueries * dk; idx += kPrefillThreads) {
    const int r = idx / dk, c = idx % dk;
    qs[r * sd + c] = r < n_rows ? q[r * q_stride + c] : 0.0f;
  }
  PrefillState<kC> st;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    st.m[i] = -INFINITY;
    st.l[i] = 0.0f;
#pragma unroll
    for (int j = 0; j < kC; ++j) st.acc[i][j] = 0.0f;
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(shape.head_dim));
  for (int k0 = 0; k0 < n_keys; k0 += kBlockKeys) {
    __syncthreads();  // the previous tile is consumed (and, the first time, Q is stored)
    LoadTile<J>(k_src, seq.kv, k0, n_keys, sd, ks);
    LoadTile<J>(v_src, seq.kv, k0, n_keys, sd, vs);
    __syncthreads();
    ScoreTile(qs, ks, sd, dk, scale, k0, n_keys, seq.start_pos + q0, st, ps);
    __syncthreads();
    AccumulateTile(ps, vs, sd, dv, st);
  }

  const int64_t out_stride = DeviceOutStride(shape, seq);
  float* out = seq.out + q0 * out_stride + shape.out_offset(h);
  const int tx = threadIdx.x % 16, ty = threadIdx.x / 16;
#pragma unroll
  for (int i = 0; i < kRowsPerThread; ++i) {
    const int r = ty * kRowsPerThread + i;
    if (r >= n_rows) continue;
#pragma unroll
    for (int j = 0; j < kC; ++j) {
      const int c = tx + 16 * j;
      if (c < dv) out[r * out_stride + c] = st.acc[i][j] / st.l[i];
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Decode (split-K): block = (split × head chunk, KV head g, sequence), kDecodeWarps warps. A block
// serves up to kDecodeHeads query heads of g's group (the K/V rows are read once for all of them)
// over the split's keys. Each warp streams its own keys kDecodeUnroll at a time (rows loaded by
// the whole warp, lane chunks as in attention_internal.cuh) with its own online softmax; the warps
// merge in shared memory and the block writes (max, sum, acc[v.dim]) for each head to the
// workspace. A second kernel merges the splits.

constexpr int kDecodeWarps = 4;
constexpr int kDecodeThreads = kDecodeWarps * kWarpSize;
constexpr int kDecodeHeads = 4;
constexpr int kDecodeUnroll = 4;
constexpr int kDecodeStepKeys = kDecodeWarps * kDecodeUnroll;
constexpr int kBaseSplitKeys = 1024;  // keys per split of a head 2·head_dim wide (K + V)
constexpr int kMinSplitKeys = 64;
constexpr int kTargetBlocksPerSm = 8;
constexpr int kCombineThreads = 128;

struct DecodeLaunch {
  int base_split_keys = 0;  // a multiple of kDecodeStepKeys
  int max_splits = 0;       // workspace slots per (sequence, query head)
  int head_chunks = 0;      // ceil(group / kDecodeHeads)
  float2* stats = nullptr;  // [batch.n, n_heads, max_splits] (max, sum)
  float* acc = nullptr;     // [batch.n, n_heads, max_splits, head_dim]
};

// Keys per split of a head storing dk + dv floats per token: equal work (keys × width) for every
// head, at least `base` keys and a multiple of kDecodeStepKeys.
__host__ __device__ int SplitKeys(int base, int head_dim, int dk, int dv) {
  int64_t keys = int64_t{base} * 2 * head_dim / (dk + dv > 0 ? dk + dv : 1);
  keys = keys / kDecodeStepKeys * kDecodeStepKeys;
  return static_cast<int>(keys < base ? base : keys > (1 << 30) ? (1 << 30) : keys);
}

int64_t CeilDiv(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Sums each of the H×U values over the warp (all lanes end with the totals).
template <int H, int U>
__device__ __forceinline__ void WarpSums(float (&v)[H][U]) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
#pragma unroll
    for (int i = 0; i < H; ++i) {
#pragma unroll
      for (int u = 0; u < U; ++u) v[i][u] += __shfl_xor_sync(kFullMask, v[i][u], offset);
    }
  }
}

template <int J>
struct DecodeState {
  float4 q[kDecodeHeads][J];
  float m[kDecodeHeads];
  float l[kDecodeHeads];
  float4 acc[kDecodeHeads][J];
};

// This warp's pass over keys key0 + [0, kDecodeUnroll) (those < k_end).
template <int J>
__device__ __forceinline__ void DecodeStep(const RowSource& k_src, const RowSource& v_src,
                                           const PagedKvView& kv, int key0, int k_end, float scale,
                                           DecodeState<J>& st) {
  const int lane = threadIdx.x % kWarpSize;
  RawRow<J> k_raw[kDecodeUnroll], v_raw[kDecodeUnroll];
#pragma unroll
  for (int u = 0; u < kDecodeUnroll; ++u) {
    if (key0 + u < k_end) {
      LoadRow(k_src, kv, key0 + u, lane, k_raw[u]);
      LoadRow(v_src, kv, key0 + u, lane, v_raw[u]);
    } else {
      ZeroRow(k_raw[u]);
      ZeroRow(v_raw[u]);
    }
  }
  float s[kDecodeHeads][kDecodeUnroll];
#pragma unroll
  for (int u = 0; u < kDecodeUnroll; ++u) {
#pragma unroll
    for (int i = 0; i < kDecodeHeads; ++i) s[i][u] = 0.0f;
#pragma unroll
    for (int j = 0; j < J; ++j) {
      const float4 k = Dequantize(k_src.e4m3, k_raw[u].chunk[j], k_raw[u].scale);
#pragma unroll
      for (int i = 0; i < kDecodeHeads; ++i) s[i][u] = Dot4(st.q[i][j], k, s[i][u]);
    }
  }
  WarpSums(s);
#pragma unroll
  for (int i = 0; i < kDecodeHeads; ++i) {
    float tile_max = -INFINITY;
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      s[i][u] = key0 + u < k_end ? s[i][u] * scale : -INFINITY;
      tile_max = fmaxf(tile_max, s[i][u]);
    }
    const float m_new = fmaxf(st.m[i], tile_max);  // finite: key0 < k_end
    const float correction = expf(st.m[i] - m_new);
    st.l[i] *= correction;
#pragma unroll
    for (int j = 0; j < J; ++j) st.acc[i][j] = Scale4(st.acc[i][j], correction);
#pragma unroll
    for (int u = 0; u < kDecodeUnroll; ++u) {
      const float p = expf(s[i][u] - m_new);
      st.l[i] += p;
#pragma unroll
      for (int j = 0; j < J; ++j) {
        st.acc[i][j] =
            Fma4(p, Dequantize(v_src.e4m3, v_raw[u].chunk[j], v_raw[u].scale), st.acc[i][j]);
      }
    }
    st.m[i] = m_new;
  }
}

// J: chunks per lane, 128·J ≥ head_dim.
template <int J>
__global__ void __launch_bounds__(kDecodeThreads)
    DecodeKernel(const AttentionShape shape, const __grid_constant__ SequenceBatch batch,
                 const DecodeLaunch launch) {
  const AttentionSequence& seq = batch.sequences[blockIdx.z];
  const int g = blockIdx.y;
  const int chunk = blockIdx.x % launch.head_chunks, split = blockIdx.x / launch.head_chunks;
  if (seq.n_queries != 1) return;  // whole block, before any barrier
  const RowSource k_src = MakeRowSource(seq.kv.k, g, seq.kv.page_size);
  const RowSource v_src = MakeRowSource(seq.kv.v, g, seq.kv.page_size);
  const int n_keys = seq.start_pos + 1;
  const int split_keys = SplitKeys(launch.base_split_keys, shape.head_dim, k_src.dim, v_src.dim);
  const int64_t k_begin = int64_t{split} * split_keys;
  if (k_begin >= n_keys) return;  // whole block: this head needs fewer splits
  const int k_end = static_cast<int>(std::min<int64_t>(n_keys, k_begin + split_keys));
  const int group = shape.group();
  const int h0 = g * group + chunk * kDecodeHeads;
  const int n_here = min(kDecodeHeads, group - chunk * kDecodeHeads);
  const int warp = threadIdx.x / kWarpSize, lane = threadIdx.x % kWarpSize;

  DecodeState<J> st;
#pragma unroll
  for (int i = 0; i < kDecodeHeads; ++i) {
    st.m[i] = -INFINITY;
    st.l[i] = 0.0f;
    const float* q = seq.q + shape.q_offset(min(h0 + i, h0 + n_here - 1));
#pragma unroll
    for (int j = 0; j < J; ++j) {
      float x[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = 4 * (lane + kWarpSize * j) + e;
        x[e] = i < n_here && c < k_src.dim ? q[c] : 0.0f;
      }
      st.q[i][j] = make_float4(x[0], x[1], x[2], x[3]);
      st.acc[i][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    }
  }
  const float scale = 1.0f / sqrtf(static_cast<float>(shape.head_dim));
  for (int key0 = static_cast<int>(k_begin) + warp * kDecodeUnroll; key0 < k_end;
       key0 += kDecodeStepKeys) {
    DecodeStep(k_src, v_src, seq.kv, key0, k_end, scale, st);
  }

  // Merge the warps. A warp without keys has m = -inf and contributes nothing; warp 0 has keys.
  __shared__ float sm_m[kDecodeWarps][kDecodeHeads], sm_l[kDecodeWarps][kDecodeHeads];
  __shared__ float4 sm_acc[kDecodeWarps][kDecodeHeads][kWarpSize * J];
#pragma unroll
  for (int i = 0; i < kDecodeHeads; ++i) {
#pragma unroll
    for (int j = 0; j < J; ++j) sm_acc[warp][i][lane + kWarpSize * j] = st.acc[i][j];
    if (lane == 0) {
      sm_m[warp][i] = st.m[i];
      sm_l[warp][i] = st.l[i];
    }
  }
  __syncthreads();
  const int dv = v_src.dim;
  for (int idx = threadIdx.x; idx < n_here * dv; idx += kDecodeThreads) {
    const int i = idx / dv, c = idx % dv;
    float m = -INFINITY;
    for (int w = 0; w < kDecodeWarps; ++w) m = fmaxf(m, sm_m[w][i]);
    float l = 0.0f, acc = 0.0f;
    for (int w = 0; w < kDecodeWarps; ++w) {
      const float f = sm_m[w][i] == -INFINITY ? 0.0f : expf(sm_m[w][i] - m);
      l += f * sm_l[w][i];
      acc += f * reinterpret_cast<const float*>(sm_acc[w][i])[c];
    }
    const int64_t slot = (int64_t{blockIdx.z} * shape.n_heads + h0 + i) * launch.max_splits + split;
    launch.acc[slot * shape.head_dim + c] = acc;
    if (c == 0) launch.stats[slot] = make_float2(m, l);
  }
}

// Merges the splits of (query head blockIdx.x, sequence blockIdx.y) into its output row.
__global__ void __launch_bounds__(kCombineThreads)
    CombineKernel(const AttentionShape shape, const __grid_constant__ SequenceBatch batch,
                  const DecodeLaunch launch) {
  const AttentionSequence& seq = batch.sequences[blockIdx.y];
  if (seq.n_queries != 1) return;
  const int h = blockIdx.x, g = h / shape.group();
  const int dk = seq.kv.k.dim(g), dv = seq.kv.v.dim(g);
  const int split_keys = SplitKeys(launch.base_split_keys, shape.head_dim, dk, dv);
  const int n_splits = static_cast<int>((int64_t{seq.start_pos} + split_keys) / split_keys);
  const int64_t slot0 = (int64_t{blockIdx.y} * shape.n_heads + h) * launch.max_splits;
  float m = -INFINITY;
  for (int i = 0; i < n_splits; ++i) m = fmaxf(m, launch.stats[slot0 + i].x);
  float* out = seq.out + shape.out_offset(h);
  for (int c = threadIdx.x; c < dv; c += kCombineThreads) {
    float num = 0.0f, den = 0.0f;
    for (int i = 0; i < n_splits; ++i) {
      const float2 st = launch.stats[slot0 + i];
      const float f = expf(st.x - m);
      num = fmaf(f, launch.acc[(slot0 + i) * shape.head_dim + c], num);
      den = fmaf(f, st.y, den);
    }
    out[c] = num / den;
  }
}

// ---------------------------------------------------------------------------------------------
// Host side.

// Workspace slots (one per sequence, query head and split) that AttentionWorkspaceBytes provides.
int64_t SlotCapacity(const AttentionShape& shape, const BatchBounds& bounds) {
  return int64_t{kMaxBatchSequences} * shape.n_heads *
         CeilDiv(std::max(bounds.max_context, 1), kBaseSplitKeys);
}

struct BatchSummary {
  int max_prefill_queries = 0;
  int max_decode_context = 0;
  int64_t decode_context_sum = 0;
  int n_decode = 0;
};

BatchSummary Summarize(const SequenceBatch& batch) {
  BatchSummary s;
  for (int i = 0; i < batch.n; ++i) {
    const AttentionSequence& seq = batch.sequences[i];
    if (seq.n_queries > 1) s.max_prefill_queries = std::max(s.max_prefill_queries, seq.n_queries);
    if (seq.n_queries != 1) continue;
    s.max_decode_context = std::max(s.max_decode_context, seq.start_pos + 1);
    s.decode_context_sum += seq.start_pos + 1;
    ++s.n_decode;
  }
  return s;
}

int SmCount() {
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess) {
    return 132;
  }
  return sms;
}

// The split length of the widest heads: kBaseSplitKeys, halved while a small batch would leave SMs
// idle (estimated for heads of full width) and the workspace has room, doubled if it has none.
int ChooseBaseSplitKeys(const AttentionShape& shape, const SequenceBatch& batch,
                        const BatchSummary& summary, int head_chunks, int64_t capacity) {
  const auto slots = [&](int keys) {
    return int64_t{batch.n} * shape.n_heads * CeilDiv(summary.max_decode_context, keys);
  };
  const auto blocks = [&](int keys) {
    return (summary.decode_context_sum / keys + summary.n_decode) * shape.n_kv_heads * head_chunks;
  };
  const int64_t target = int64_t{kTargetBlocksPerSm} * SmCount();
  int keys = kBaseSplitKeys;
  while (keys > kMinSplitKeys && blocks(keys) < target && slots(keys / 2) <= capacity) keys /= 2;
  while (slots(keys) > capacity) keys *= 2;
  return keys;
}

template <int kC>
void LaunchPrefill(const AttentionShape& shape, const SequenceBatch& batch, int max_queries,
                   cudaStream_t stream) {
  const size_t smem = PrefillSmemBytes(shape.head_dim);
  // A failure here surfaces as the launch's error (cudaGetLastError).
  cudaFuncSetAttribute(PrefillKernel<kC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                       static_cast<int>(smem));
  const dim3 grid(static_cast<unsigned>(CeilDiv(max_queries, kBlockQueries)), shape.n_heads,
                  batch.n);
  PrefillKernel<kC><<<grid, kPrefillThreads, smem, stream>>>(shape, batch);
}

template <int J>
void LaunchDecode(const AttentionShape& shape, const SequenceBatch& batch,
                  const DecodeLaunch& launch, int max_context, cudaStream_t stream) {
  const int64_t splits = CeilDiv(max_context, launch.base_split_keys);
  const dim3 grid(static_cast<unsigned>(splits * launch.head_chunks), shape.n_kv_heads, batch.n);
  DecodeKernel<J><<<grid, kDecodeThreads, 0, stream>>>(shape, batch, launch);
  CombineKernel<<<dim3(shape.n_heads, batch.n), kCombineThreads, 0, stream>>>(shape, batch, launch);
}

}  // namespace

size_t AttentionWorkspaceBytes(const AttentionShape& shape, const BatchBounds& bounds) {
  return static_cast<size_t>(SlotCapacity(shape, bounds)) * (shape.head_dim + 2) * sizeof(float);
}

void Attention(const AttentionShape& shape, const SequenceBatch& batch, const BatchBounds& bounds,
               void* workspace, cudaStream_t stream) {
  if (batch.n <= 0 || batch.n > kMaxBatchSequences || shape.head_dim <= 0 ||
      shape.head_dim > kMaxHeadDim) {
    return;  // outside the contract: nothing to launch
  }
  const BatchSummary summary = Summarize(batch);
  if (summary.max_prefill_queries > 0) {
    if (shape.head_dim <= 64) {
      LaunchPrefill<4>(shape, batch, summary.max_prefill_queries, stream);
    } else if (shape.head_dim <= 128) {
      LaunchPrefill<8>(shape, batch, summary.max_prefill_queries, stream);
    } else {
      LaunchPrefill<16>(shape, batch, summary.max_prefill_queries, stream);
    }
  }
  if (summary.n_decode == 0) return;
  const int64_t capacity = SlotCapacity(shape, bounds);
  DecodeLaunch launch;
  launch.head_chunks = (shape.group() + kDecodeHeads - 1) / kDecodeHeads;
  launch.base_split_keys = ChooseBaseSplitKeys(shape, batch, summary, launch.head_chunks, capacity);
  launch.max_splits = static_cast<int>(CeilDiv(summary.max_decode_context, launch.base_split_keys));
  launch.stats = static_cast<float2*>(workspace);
  launch.acc = static_cast<float*>(workspace) + 2 * capacity;
  if (shape.head_dim <= 128) {
    LaunchDecode<1>(shape, batch, launch, summary.max_decode_context, stream);
  } else {
    LaunchDecode<2>(shape, batch, launch, summary.max_decode_context, stream);
  }
}

}  // namespace pdserve::kernels::cuda
