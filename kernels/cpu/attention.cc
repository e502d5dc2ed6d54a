#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_panels.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {
namespace {

// Sequences with at least kGemmMinQueries queries (prefill) run attention as two GEMMs per block
// of kQueryBlock queries and head on the fp32 micro-kernels (gemm_kernels.h): S = Q·Kᵀ over the
// keys the block sees, causal softmax, O = P·V.
constexpr int kQueryBlock = 64;

// The GEMM path's per-thread floats for contexts up to max_context: key panels, value panels, the
// block's scores and a page of dequantized rows.
int64_t BlockGemmFloats(const AttentionShape& s, int max_context, int page_size) {
  return int64_t{s.head_dim} * RoundUpToPanels(max_context) +
         int64_t{max_context} * RoundUpToPanels(s.head_dim) + int64_t{kQueryBlock} * max_context +
         int64_t{page_size} * s.head_dim;
}

// Query row i of `seq`, the query heads of KV heads [g0, g1): out = softmax(q·Kᵀ/√head_dim)·V
// over tokens [0, start_pos + i], page by page, each page's rows of the range read in one sweep.
// `ws` holds (g1 − g0) · group · (start_pos + i + 1) floats.
void AttendHeads(const DecodeRowKernels& rk, const AttentionShape& s, const AttentionSequence& seq,
                 int i, int g0, int g1, float* ws) {
  const int n_tokens = seq.start_pos + i + 1;
  const PagedKvView& kv = seq.kv;
  const int64_t first = int64_t{g0} * s.group();
  const int heads = (g1 - g0) * s.group();
  float* out_row = seq.out + i * OutStride(s, seq);
  for (int j = 0; j < heads; ++j) {
    float* out = out_row + s.out_offset(first + j);
    std::fill(out, out + kv.v.dim(g0 + j / s.group()), 0.0f);
  }
  ScoreHeads(rk, s, kv, g0, g1, seq.q + i * QStride(s, seq), n_tokens, ws, n_tokens);
  for (int j = 0; j < heads; ++j) SoftmaxInPlace(ws + int64_t{j} * n_tokens, n_tokens);
  for (int t = 0, p = 0; t < n_tokens; t += kv.page_size, ++p) {
    const uint8_t* page = kv.v.page(kv.pages[p]);
    const int count = std::min(kv.page_size, n_tokens - t);
    ForEachPass(s, g0, g1, [&](int g, int h0, int nq) {
      float* out[kGroupPass];
      for (int j = 0; j < nq; ++j) out[j] = out_row + s.out_offset(h0 + j);
      rk.accumulate(ws + (h0 - first) * n_tokens + t, n_tokens, nq,
                    PageRowsOf(kv.v, page, kv.page_size, g, count), out);
    });
  }
}

// Query blocks [block_begin, block_end) of every query head of KV head g: its keys and values
// gathered into panels once, up to what the last block sees, then per block and query head S =
// Q·Kᵀ/√head_dim, causal softmax, O = P·V. `ws` holds BlockGemmFloats(s, max_context, page_size).
void AttendBlocksGemm(const GemmKernel& kernel, const AttentionShape& s,
                      const AttentionSequence& seq, int g, int block_begin, int block_end,
                      int max_context, float* ws) {
  const int dk = seq.kv.k.dim(g), dv = seq.kv.v.dim(g);
  if (dv == 0) return;  // the heads have no output floats
  const int64_t q_stride = QStride(s, seq), out_stride = OutStride(s, seq);
  float* keys = ws;
  float* values = keys + int64_t{s.head_dim} * RoundUpToPanels(max_context);
  float* scores = values + int64_t{max_context} * RoundUpToPanels(s.head_dim);
  float* scratch = scores + int64_t{kQueryBlock} * max_context;
  const int all_keys = seq.start_pos + std::min(seq.n_queries, block_end * kQueryBlock);
  if (dk > 0) {
    GatherKeyPanels(seq.kv.k, seq.kv, g, all_keys, kernel.nr,
                    1.0f / std::sqrt(static_cast<float>(s.head_dim)), keys, scratch);
  }
  GatherValuePanels(seq.kv.v, seq.kv, g, all_keys, kernel.nr, values, scratch);
  for (int block = block_begin; block < block_end; ++block) {
    const int q_begin = block * kQueryBlock;
    const int m = std::min(seq.n_queries - q_begin, kQueryBlock);
    const int n_keys = seq.start_pos + q_begin + m;  // what the block's last query sees
    for (int head = g * s.group(); head < (g + 1) * s.group(); ++head) {
      KeyPanelScores(kernel, seq.q + q_begin * q_stride + s.q_offset(head), q_stride, m, keys, dk,
                     n_keys, scores);
      for (int i = 0; i < m; ++i) {
        float* sr = scores + int64_t{i} * n_keys;
        const int visible = seq.start_pos + q_begin + i + 1;
        SoftmaxInPlace(sr, visible);
        std::fill(sr + visible, sr + n_keys, 0.0f);
      }
      GemmOverPanels(kernel, scores, n_keys, m, values, int64_t{all_keys} * kernel.nr, n_keys, dv,
                     seq.out + q_begin * out_stride + s.out_offset(head), out_stride);
    }
  }
}

// Decode tasks split each query row's KV heads into this many contiguous ranges: one when there
// are enough rows to keep every thread busy (a task then sweeps whole pages), more for few rows
// (a long single sequence), about kTasksPerThread tasks per thread in all.
constexpr int kTasksPerThread = 4;
int DecodeRanges(const AttentionShape& s, std::span<const AttentionSequence> sequences,
                 int threads) {
  int64_t rows = 0;
  for (const AttentionSequence& seq : sequences) {
    if (seq.n_queries < kGemmMinQueries) rows += seq.n_queries;
  }
  if (rows == 0) return 1;
  const int64_t wanted = (int64_t{kTasksPerThread} * threads + rows - 1) / rows;
  return static_cast<int>(std::clamp<int64_t>(wanted, 1, s.n_kv_heads));
}

// KV heads [first, end) of range r of `ranges`.
std::pair<int, int> HeadRange(const AttentionShape& s, int r, int ranges) {
  return {r * s.n_kv_heads / ranges, (r + 1) * s.n_kv_heads / ranges};
}

// GEMM-path tasks of a KV head: contiguous ranges of its query blocks (each gathering the head's
// K/V once), about kTasksPerThread tasks per thread over the KV heads.
int BlockRanges(const AttentionShape& s, const AttentionSequence& seq, int threads) {
  const int blocks = (seq.n_queries + kQueryBlock - 1) / kQueryBlock;
  return std::clamp((kTasksPerThread * threads + s.n_kv_heads - 1) / s.n_kv_heads, 1, blocks);
}

// Query blocks [first, end) of range r of `ranges` over a sequence's blocks.
std::pair<int, int> BlockRange(const AttentionSequence& seq, int r, int ranges) {
  const int blocks = (seq.n_queries + kQueryBlock - 1) / kQueryBlock;
  return {r * blocks / ranges, (r + 1) * blocks / ranges};
}

// Tasks of one sequence: per (KV head, range of query blocks) on the GEMM path, else per (query,
// range of KV heads).
int64_t TaskCount(const AttentionShape& s, const AttentionSequence& seq, int ranges, int threads) {
  if (seq.n_queries >= kGemmMinQueries) {
    return int64_t{s.n_kv_heads} * BlockRanges(s, seq, threads);
  }
  return int64_t{seq.n_queries} * ranges;
}

// The GEMM path's blocks, or the decode path's n_heads · max_context scores and a page of rows,
// whichever is more.
int64_t PerThreadFloats(const AttentionShape& shape, int max_context, int page_size) {
  return std::max(BlockGemmFloats(shape, max_context, page_size),
                  int64_t{max_context} * shape.n_heads + int64_t{page_size} * shape.head_dim);
}

}  // namespace

size_t AttentionWorkspaceFloats(const AttentionShape& shape, int num_threads, int max_context,
                                int page_size) {
  return static_cast<size_t>(num_threads) * PerThreadFloats(shape, max_context, page_size);
}

void Attention(ThreadPool& pool, const AttentionShape& shape,
               std::span<const AttentionSequence> sequences, std::span<float> workspace) {
  const int ranges = DecodeRanges(shape, sequences, pool.size());
  auto tasks = [&](const AttentionSequence& seq) {
    return TaskCount(shape, seq, ranges, pool.size());
  };
  int64_t total = 0;
  for (const AttentionSequence& seq : sequences) total += tasks(seq);
  const size_t per_thread = workspace.size() / pool.size();
  // The longest context of this call (≤ the one the workspace was sized for) lays it out.
  int page_size = 0, max_context = 0;
  for (const AttentionSequence& seq : sequences) {
    page_size = std::max(page_size, seq.kv.page_size);
    max_context = std::max(max_context, seq.start_pos + seq.n_queries);
  }
  const DecodeRowKernels& rk = ActiveDecodeRows();
  const GemmKernel kernel = ActiveGemmKernel();
  pool.ParallelForDynamic(total, 1, [&](int64_t begin, int64_t end, int thread) {
    float* ws = workspace.data() + thread * per_thread;
    size_t s = 0;
    int64_t first = 0;  // flat index of sequences[s]'s first task
    for (int64_t task = begin; task < end; ++task) {
      while (task >= first + tasks(sequences[s])) first += tasks(sequences[s++]);
      const AttentionSequence& seq = sequences[s];
      const int64_t index = task - first;
      if (seq.n_queries >= kGemmMinQueries) {
        const int block_ranges = BlockRanges(shape, seq, pool.size());
        const auto [b0, b1] = BlockRange(seq, static_cast<int>(index % block_ranges), block_ranges);
        AttendBlocksGemm(kernel, shape, seq, static_cast<int>(index / block_ranges), b0, b1,
                         max_context, ws);
        continue;
      }
      const auto [g0, g1] = HeadRange(shape, static_cast<int>(index % ranges), ranges);
      AttendHeads(rk, shape, seq, static_cast<int>(index / ranges), g0, g1, ws);
    }
  });
}

void AttentionReference(const AttentionShape& shape, const AttentionSequence& seq) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  const PagedKvView& kv = seq.kv;
  std::vector<float> k_row(shape.head_dim), v_row(shape.head_dim);
  for (int i = 0; i < seq.n_queries; ++i) {
    const int n_tokens = seq.start_pos + i + 1;
    for (int h = 0; h < shape.n_heads; ++h) {
      const int g = h / shape.group();
      const int dk = kv.k.dim(g), dv = kv.v.dim(g);
      const float* q = seq.q + i * QStride(shape, seq) + shape.q_offset(h);
      float* out = seq.out + i * OutStride(shape, seq) + shape.out_offset(h);
      std::vector<float> scores(n_tokens);
      float max_score = -INFINITY;
      for (int t = 0; t < n_tokens; ++t) {
        const int32_t page = kv.pages[t / kv.page_size];
        const float* k = HeadRows(kv.k, kv.page_size, page, g, t % kv.page_size, 1, k_row.data());
        float dot = 0.0f;
        for (int c = 0; c < dk; ++c) dot += q[c] * k[c];
        scores[t] = dot * scale;
        max_score = std::max(max_score, scores[t]);
      }
      float sum = 0.0f;
      for (float& sc : scores) {
        sc = expf(sc - max_score);
        sum += sc;
      }
      for (int c = 0; c < dv; ++c) out[c] = 0.0f;
      for (int t = 0; t < n_tokens; ++t) {
        const int32_t page = kv.pages[t / kv.page_size];
        const float* v = HeadRows(kv.v, kv.page_size, page, g, t % kv.page_size, 1, v_row.data());
        for (int c = 0; c < dv; ++c) out[c] += scores[t] / sum * v[c];
      }
    }
  }
}

}  // namespace pdserve::kernels
