// KCache decode attention in four kernels, every (sequence, KV head) independent:
//   1. ScoreKernel   (key chunk, KV head × query-head tile, sequence): scores of kChunk keys for
//                    up to kHeadTile query heads of the group, written to the workspace, and the
//                    chunk's softmax partials (max, Σ exp(s − max)) per query head.
//   2. SoftmaxKernel (key chunk, KV head, sequence): merges the partials into each query head's
//                    (max, 1/sum), turns the chunk's scores into probabilities in place and sums
//                    them over the group in query-head order, as the CPU does.
//   3. SelectKernel  (KV head, sequence): SelectTokens on the summed probabilities — a four-pass
//                    radix select (8 bits a pass) finds the top_n-th largest order key among the
//                    candidates, then a block scan in position order keeps every larger key and
//                    the lowest-positioned ties — and writes the kept positions in ascending order.
//   4. OutputKernel  (query-head tile, KV head, sequence): out = Σ_kept p·v per query head (÷
//   Σ_kept
//                    p when renormalizing), reading the V rows of kept tokens only.
// Rows are read one channel per lane (lane + 32·j), so any width ≤ kMaxHeadDim and any alignment
// work. Nothing is allocated; the workspace is carved by Carve below.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cub/block/block_scan.cuh>

#include "kernels/cuda/kcache_attention.h"
#include "kernels/cuda/kv_device.cuh"

namespace pdserve::kernels::cuda {
namespace {

using internal::kLanes;
using internal::Row;
using internal::RowOf;
using internal::RowValue;
using internal::WarpMax;
using internal::WarpSum;

constexpr int kChunk = 256;    // keys per score / softmax block
constexpr int kThreads = 256;  // score and output blocks
constexpr int kWarps = kThreads / kLanes;
constexpr int kHeadTile = 8;  // query heads per score / output block
constexpr int kSelectThreads = 512;
constexpr int kChannelsPerLane = kMaxHeadDim / kLanes;
static_assert(kThreads >= kMaxHeadDim, "the output reduction gives each channel a thread");
static_assert(kWarps >= kHeadTile, "the score kernel gives each tile head a warp");

// Device workspace, for kMaxBatchSequences sequences (index s) of up to max_context tokens.
struct Workspace {
  float* probs;      // [s, n_heads, max_context]: scores, then probabilities
  float2* partials;  // [s, n_heads, n_chunks]: per chunk (max, Σ exp(score − max))
  float* total;      // [s, n_kv_heads, max_context]: probability summed over the group
  int* kept;         // [s, n_kv_heads, max_context]: kept positions, ascending
  int* counts;       // [s, n_kv_heads]
};

struct Plan {
  Workspace ws;
  TopNOptions options;
  int max_context;
  int n_chunks;    // ⌈max_context / kChunk⌉
  int head_tiles;  // ⌈group / kHeadTile⌉
};

size_t AlignUp(size_t bytes) { return (bytes + 255) / 256 * 256; }

// Lays the workspace out from `base` (null: only sizes it); returns its bytes.
size_t Carve(const AttentionShape& shape, int max_context, uint8_t* base, Plan* plan) {
  const size_t c = static_cast<size_t>(std::max(max_context, 1));
  const size_t n_chunks = (c + kChunk - 1) / kChunk;
  const size_t heads = size_t{kMaxBatchSequences} * shape.n_heads;
  const size_t kv_heads = size_t{kMaxBatchSequences} * shape.n_kv_heads;
  size_t at = 0;
  auto take = [&](size_t bytes) {
    uint8_t* p = base == nullptr ? nullptr : base + at;
    at += AlignUp(bytes);
    return p;
  };
  plan->ws.probs = reinterpret_cast<float*>(take(heads * c * sizeof(float)));
  plan->ws.partials = reinterpret_cast<float2*>(take(heads * n_chunks * sizeof(float2)));
  plan->ws.total = reinterpret_cast<float*>(take(kv_heads * c * sizeof(float)));
  plan->ws.kept = reinterpret_cast<int*>(take(kv_heads * c * sizeof(int)));
  plan->ws.counts = reinterpret_cast<int*>(take(kv_heads * sizeof(int)));
  plan->max_context = static_cast<int>(c);
  plan->n_chunks = static_cast<int>(n_chunks);
  plan->head_tiles = (shape.group() + kHeadTile - 1) / kHeadTile;
  return at;
}

__device__ int64_t ProbsRow(const AttentionShape& shape, const Plan& plan, int s, int h) {
  return (int64_t{s} * shape.n_heads + h) * plan.max_context;
}
__device__ int64_t KvHeadIndex(const AttentionShape& shape, int s, int g) {
  return int64_t{s} * shape.n_kv_heads + g;
}

// This lane's channels (lane + 32·j) of token t's row of KV head g; zeros past the row's width.
__device__ void LoadRow(const KvSectionView& section, const PagedKvView& kv, int g, int t,
                        float (&out)[kChannelsPerLane]) {
  const int lane = threadIdx.x % kLanes;
  const Row row = RowOf(section, kv.pages[t / kv.page_size], g, t % kv.page_size, kv.page_size);
  const float scale = row.e4m3 ? *row.scale : 1.0f;
#pragma unroll
  for (int j = 0; j < kChannelsPerLane; ++j) {
    const int c = lane + kLanes * j;
    out[j] = c < row.dim ? RowValue(row, scale, c) : 0.0f;
  }
}

// grid (n_chunks, n_kv_heads · head_tiles, batch.n), kThreads.
__global__ void __launch_bounds__(kThreads)
    ScoreKernel(const AttentionShape shape, const __grid_constant__ SequenceBatch batch,
                const Plan plan) {
  __shared__ float q_tile[kHeadTile][kMaxHeadDim];
  __shared__ float score_tile[kHeadTile][kChunk];
  const int s = blockIdx.z;
  const AttentionSequence& seq = batch.sequences[s];
  const int n_tokens = seq.start_pos + 1, t0 = blockIdx.x * kChunk;
  if (t0 >= n_tokens) return;  // the whole block
  const int group = shape.group(), g = blockIdx.y / plan.head_tiles;
  const int h0 = g * group + (blockIdx.y % plan.head_tiles) * kHeadTile;
  const int heads = min(kHeadTile, (g + 1) * group - h0);
  const int count = min(kChunk, n_tokens - t0), dim = seq.kv.k.dim(g);
  for (int i = threadIdx.x; i < heads * dim; i += kThreads) {
    q_tile[i / dim][i % dim] = seq.q[shape.q_offset(h0 + i / dim) + i % dim];
  }
  __syncthreads();

  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const float scale = 1.0f / sqrtf(static_cast<float>(shape.head_dim));  // as the CPU's
  for (int k = warp; k < count; k += kWarps) {
    float key[kChannelsPerLane];
    LoadRow(seq.kv.k, seq.kv, g, t0 + k, key);
    for (int j = 0; j < heads; ++j) {
      float sum = 0.0f;
#pragma unroll
      for (int i = 0; i < kChannelsPerLane; ++i) {
        const int c = lane + kLanes * i;
        if (c < dim) sum = fmaf(q_tile[j][c], key[i], sum);
      }
      sum = WarpSum(sum);
      if (lane == 0) score_tile[j][k] = __fmul_rn(sum, scale);
    }
  }
  __syncthreads();

  if (warp >= heads) return;
  const float* scores = score_tile[warp];
  float max_score = -INFINITY;
  for (int k = lane; k < count; k += kLanes) max_score = fmaxf(max_score, scores[k]);
  max_score = WarpMax(max_score);
  float sum = 0.0f;
  float* probs = plan.ws.probs + ProbsRow(shape, plan, s, h0 + warp) + t0;
  for (int k = lane; k < count; k += kLanes) {
    sum += expf(scores[k] - max_score);
    probs[k] = scores[k];
  }
  sum = WarpSum(sum);
  if (lane == 0) {
    plan.ws.partials[(int64_t{s} * shape.n_heads + h0 + warp) * plan.n_chunks + blockIdx.x] =
        make_float2(max_score, sum);
  }
}

// grid (n_chunks, n_kv_heads, batch.n), kChunk threads: thread i owns token blockIdx.x·kChunk + i.
__global__ void __launch_bounds__(kChunk)
    SoftmaxKernel(const AttentionShape shape, const __grid_constant__ SequenceBatch batch,
                  const Plan plan) {
  __shared__ float max_score, inverse_sum;
  const int s = blockIdx.z, g = blockIdx.y, group = shape.group();
  const int n_tokens = batch.sequences[s].start_pos + 1, t0 = blockIdx.x * kChunk;
  if (t0 >= n_tokens) return;  // the whole block
  const int t = t0 + threadIdx.x, n_chunks = (n_tokens + kChunk - 1) / kChunk;
  float total = 0.0f;
  for (int j = 0; j < group; ++j) {
    const int h = g * group + j;
    if (threadIdx.x < kLanes) {
      const float2* partials = plan.ws.partials + (int64_t{s} * shape.n_heads + h) * plan.n_chunks;
      float m = -INFINITY;
      for (int c = threadIdx.x; c < n_chunks; c += kLanes) m = fmaxf(m, partials[c].x);
      m = WarpMax(m);
      float l = 0.0f;
      for (int c = threadIdx.x; c < n_chunks; c += kLanes) {
        l += partials[c].y * expf(partials[c].x - m);
      }
      l = WarpSum(l);
      if (threadIdx.x == 0) {
        max_score = m;
        inverse_sum = 1.0f / l;
      }
    }
    __syncthreads();
    if (t < n_tokens) {
      float* p = plan.ws.probs + ProbsRow(shape, plan, s, h) + t;
      const float prob = __fmul_rn(expf(*p - max_score), inverse_sum);
      *p = prob;
      total += prob;
    }
    __syncthreads();  // before max_score and inverse_sum are overwritten
  }
  if (t < n_tokens) plan.ws.total[KvHeadIndex(shape, s, g) * plan.max_context + t] = total;
}

// A float's rank in SelectTokens' order as an unsigned key: larger floats get larger keys, −0 and
// +0 the same key, NaN the smallest key of all (0, below −∞'s).
__device__ uint32_t OrderKey(float x) {
  if (isnan(x)) return 0;
  const uint32_t bits = x == 0.0f ? 0u : __float_as_uint(x);
  return (bits & 0x80000000u) ? ~bits : bits | 0x80000000u;
}

// Keep every candidate whose key is above `key`, and the `ties` lowest-positioned ones equal to it.
struct Threshold {
  uint32_t key;
  int ties;
};

// The take-th largest key (1 ≤ take ≤ end − begin) of positions [begin, end), most significant
// byte first: each pass narrows the prefix to the byte whose bin holds the take-th key. Called by
// the whole block.
__device__ Threshold RadixSelect(const float* total, int begin, int end, int take) {
  __shared__ int histogram[256];
  __shared__ Threshold found;
  uint32_t prefix = 0, mask = 0;
  int remaining = take;  // how many keys matching `prefix` are still to be taken
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += blockDim.x) histogram[b] = 0;
    __syncthreads();
    for (int t = begin + threadIdx.x; t < end; t += blockDim.x) {
      const uint32_t key = OrderKey(total[t]);
      if ((key & mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xFF], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0, b = 255;
      for (; b > 0 && above + histogram[b] < remaining; --b) above += histogram[b];
      found = {prefix | (static_cast<uint32_t>(b) << shift), remaining - above};
    }
    __syncthreads();
    prefix = found.key;
    remaining = found.ties;
    mask |= 0xFFu << shift;
  }
  return {prefix, remaining};
}

// grid (n_kv_heads, batch.n), kSelectThreads: kernels::SelectTokens on the summed probabilities.
__global__ void __launch_bounds__(kSelectThreads)
    SelectKernel(const AttentionShape shape, const __grid_constant__ SequenceBatch batch,
                 const Plan plan, int* selected) {
  using BlockScan = cub::BlockScan<int, kSelectThreads>;
  __shared__ typename BlockScan::TempStorage scan;
  const int s = blockIdx.y, g = blockIdx.x;
  const int64_t index = KvHeadIndex(shape, s, g);
  const float* total = plan.ws.total + index * plan.max_context;
  int* kept = plan.ws.kept + index * plan.max_context;
  const int n_tokens = batch.sequences[s].start_pos + 1;
  const TopNOptions& o = plan.options;
  const int sink = min(max(o.sink, 0), n_tokens);
  const int recent_begin = max(sink, n_tokens - max(o.recent, 0));
  const int take = min(max(o.top_n, 0), recent_begin - sink);
  // take == 0: no key is above 0xFFFFFFFF (that pattern is a NaN, whose key is 0).
  const Threshold threshold =
      take > 0 ? RadixSelect(total, sink, recent_begin, take) : Threshold{0xFFFFFFFFu, 0};

  int n_kept = 0, ties_seen = 0;
  for (int base = 0; base < n_tokens; base += kSelectThreads) {
    const int t = base + threadIdx.x;
    const bool candidate = t >= sink && t < recent_begin;
    const uint32_t key = candidate ? OrderKey(total[t]) : 0;
    const int tie = candidate && key == threshold.key ? 1 : 0;
    int tie_rank, ties_here;
    BlockScan(scan).ExclusiveSum(tie, tie_rank, ties_here);
    const bool keep = t < n_tokens && (!candidate || key > threshold.key ||
                                       (tie && ties_seen + tie_rank < threshold.ties));
    __syncthreads();  // the scan's storage is reused
    int position, kept_here;
    BlockScan(scan).ExclusiveSum(keep ? 1 : 0, position, kept_here);
    if (keep) kept[n_kept + position] = t;
    n_kept += kept_here;
    ties_seen += ties_here;
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    plan.ws.counts[index] = n_kept;
    if (selected != nullptr) selected[index] = n_kept;
  }
}

// grid (head_tiles, n_kv_heads, batch.n), kThreads: warps take the kept tokens in turn, each
// accumulating every tile head's weighted values in registers; the warps' sums meet in shared
// memory, one thread per channel.
__global__ void __launch_bounds__(kThreads)
    OutputKernel(const AttentionShape shape, const __grid_constant__ SequenceBatch batch,
                 const Plan plan) {
  __shared__ float warp_out[kWarps][kMaxHeadDim];
  __shared__ float warp_mass[kWarps];
  const int s = blockIdx.z, g = blockIdx.y, group = shape.group();
  const int h0 = g * group + blockIdx.x * kHeadTile;
  const int heads = min(kHeadTile, (g + 1) * group - h0);
  const AttentionSequence& seq = batch.sequences[s];
  const int64_t index = KvHeadIndex(shape, s, g);
  const int* kept = plan.ws.kept + index * plan.max_context;
  const int count = plan.ws.counts[index], dim = seq.kv.v.dim(g);
  const float* probs = plan.ws.probs + ProbsRow(shape, plan, s, h0);
  const int warp = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;

  float acc[kHeadTile][kChannelsPerLane] = {};
  float mass[kHeadTile] = {};
  for (int i = warp; i < count; i += kWarps) {
    const int t = kept[i];
    float value[kChannelsPerLane];
    LoadRow(seq.kv.v, seq.kv, g, t, value);
#pragma unroll
    for (int j = 0; j < kHeadTile; ++j) {
      if (j >= heads) break;
      const float p = probs[int64_t{j} * plan.max_context + t];
      mass[j] += p;
#pragma unroll
      for (int c = 0; c < kChannelsPerLane; ++c) acc[j][c] = fmaf(p, value[c], acc[j][c]);
    }
  }

#pragma unroll
  for (int j = 0; j < kHeadTile; ++j) {
    if (j >= heads) break;  // the same for the whole block
#pragma unroll
    for (int c = 0; c < kChannelsPerLane; ++c) warp_out[warp][lane + kLanes * c] = acc[j][c];
    if (lane == 0) warp_mass[warp] = mass[j];
    __syncthreads();
    if (threadIdx.x < dim) {
      float sum = 0.0f, total_mass = 0.0f;
      for (int w = 0; w < kWarps; ++w) {
        sum += warp_out[w][threadIdx.x];
        total_mass += warp_mass[w];
      }
      if (plan.options.renormalize && total_mass > 0.0f) sum = __fdiv_rn(sum, total_mass);
      seq.out[shape.out_offset(h0 + j) + threadIdx.x] = sum;
    }
    __syncthreads();  // before the next head overwrites warp_out
  }
}

}  // namespace

size_t KCacheWorkspaceBytes(const AttentionShape& shape, int max_context) {
  Plan plan;
  return Carve(shape, max_context, nullptr, &plan);
}

// Requires 0 ≤ batch.n ≤ kMaxBatchSequences, shape.head_dim ≤ kMaxHeadDim (and so every stored
// width), every start_pos + 1 ≤ max_context, and a workspace of KCacheWorkspaceBytes(shape,
// max_context) bytes.
void KCacheAttention(const AttentionShape& shape, const SequenceBatch& batch,
                     const TopNOptions& options, int max_context, void* workspace, int* selected,
                     cudaStream_t stream) {
  if (batch.n <= 0) return;
  Plan plan;
  Carve(shape, max_context, static_cast<uint8_t*>(workspace), &plan);
  plan.options = options;
  const unsigned n = static_cast<unsigned>(batch.n), kv_heads = shape.n_kv_heads;
  const unsigned tiles = plan.head_tiles, chunks = plan.n_chunks;
  ScoreKernel<<<dim3(chunks, kv_heads * tiles, n), kThreads, 0, stream>>>(shape, batch, plan);
  SoftmaxKernel<<<dim3(chunks, kv_heads, n), kChunk, 0, stream>>>(shape, batch, plan);
  SelectKernel<<<dim3(kv_heads, n), kSelectThreads, 0, stream>>>(shape, batch, plan, selected);
  OutputKernel<<<dim3(tiles, kv_heads, n), kThreads, 0, stream>>>(shape, batch, plan);
}

}  // namespace pdserve::kernels::cuda
