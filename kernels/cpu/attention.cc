#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/attention_panels.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/decode_chunks.h"
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

// Per-thread floats of the decode path: a chunk's scores and stats for every query head.
int64_t DecodeFloats(const AttentionShape& s, int max_context, int page_size) {
  const int chunk = std::min(max_context, DecodeChunkTokens(page_size));
  return int64_t{s.n_heads} * (chunk + kPartialHeader);
}

// Chunk c (decode_chunks.h) of query row i of `seq`, for the query heads of KV heads [g0, g1):
// scores over the chunk's tokens, their unnormalized softmax, and the values it weights, page by
// page, each page's rows of the range read in one sweep. A row of one chunk gets its output here;
// otherwise the chunk's partial of head h goes to partials + (c·n_heads + h)·PartialFloats, for
// MergeChunks. `ws` holds DecodeFloats.
void AttendChunk(const DecodeRowKernels& rk, const AttentionShape& s, const AttentionSequence& seq,
                 int i, int c, int g0, int g1, float* partials, float* ws) {
  const PagedKvView& kv = seq.kv;
  const int n_tokens = seq.start_pos + i + 1;
  const int chunks = DecodeChunks(n_tokens, kv.page_size);
  const int t0 = c * DecodeChunkTokens(kv.page_size);
  const int len = std::min(DecodeChunkTokens(kv.page_size), n_tokens - t0);
  const int64_t first = int64_t{g0} * s.group();
  const int heads = (g1 - g0) * s.group();
  float* out_row = seq.out + i * OutStride(s, seq);
  // Head j's o_c: its output slice, or its partial's.
  auto o = [&](int j) {
    return chunks == 1
               ? out_row + s.out_offset(first + j)
               : partials + (c * int64_t{s.n_heads} + first + j) * PartialFloats(s.head_dim) +
                     kPartialHeader;
  };
  float* scores = ws;
  float* stats = ws + int64_t{heads} * len;  // head j's max and sum at 2j, 2j + 1
  ScoreHeads(rk, s, kv, g0, g1, seq.q + i * QStride(s, seq), t0, t0 + len, scores, len);
  AddTokenBias(seq.token_bias, t0, t0 + len, heads, scores, len);
  for (int j = 0; j < heads; ++j) {
    const ExpStats e = ExpInPlace(scores + int64_t{j} * len, len);
    stats[2 * j] = e.max;
    stats[2 * j + 1] = e.sum;
    std::fill_n(o(j), kv.v.dim(g0 + j / s.group()), 0.0f);
  }
  for (int t = t0, p = t0 / kv.page_size; t < t0 + len; t += kv.page_size, ++p) {
    const uint8_t* page = kv.v.page(kv.pages[p]);
    const int count = std::min(kv.page_size, t0 + len - t);
    ForEachPass(s, g0, g1, [&](int g, int h0, int nq) {
      if (h0 == g * s.group()) PrefetchNextPageRows(kv.v, kv, p, t0 + len, g);
      float* out[kGroupPass];
      for (int j = 0; j < nq; ++j) out[j] = o(static_cast<int>(h0 - first) + j);
      rk.accumulate(scores + (h0 - first) * len + (t - t0), len, nq,
                    PageRowsOf(kv.v, page, kv.page_size, g, count), out);
    });
  }
  for (int j = 0; j < heads; ++j) {
    float* oj = o(j);
    if (chunks == 1) {  // MergeChunks of the one chunk, in place
      const float inv = 1.0f / stats[2 * j + 1];
      for (int d = 0, dv = kv.v.dim(g0 + j / s.group()); d < dv; ++d) oj[d] *= inv;
    } else {
      oj[-kPartialHeader] = stats[2 * j];
      oj[1 - kPartialHeader] = stats[2 * j + 1];
    }
  }
}

// Row i of `seq`, once all its chunks' partials (laid out as AttendChunk writes them) are done.
void MergeRow(const AttentionShape& s, const AttentionSequence& seq, int i, const float* partials) {
  const int chunks = DecodeChunks(seq.start_pos + i + 1, seq.kv.page_size);
  if (chunks == 1) return;  // AttendChunk wrote the output
  const int64_t record = PartialFloats(s.head_dim);
  float* out_row = seq.out + i * OutStride(s, seq);
  for (int h = 0; h < s.n_heads; ++h) {
    MergeChunks(partials + h * record, s.n_heads * record, chunks, seq.kv.v.dim(h / s.group()),
                out_row + s.out_offset(h));
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
      AddTokenBias(seq.token_bias, 0, n_keys, m, scores, n_keys);
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

// Chunks every decode row of `seq` is given tasks for (those of its last, longest row).
int SequenceChunks(const AttentionSequence& seq) {
  return seq.n_queries == 0 ? 0 : DecodeChunks(seq.start_pos + seq.n_queries, seq.kv.page_size);
}

// Decode tasks split each chunk of a query row's KV heads into this many contiguous ranges: one
// when there are enough chunks to keep every thread busy (a task then sweeps whole pages), more
// for few (a short single sequence), about kTasksPerThread tasks per thread in all.
constexpr int kTasksPerThread = 4;
int DecodeRanges(const AttentionShape& s, std::span<const AttentionSequence> sequences,
                 int threads) {
  int64_t units = 0;
  for (const AttentionSequence& seq : sequences) {
    if (seq.n_queries < kGemmMinQueries) units += int64_t{seq.n_queries} * SequenceChunks(seq);
  }
  if (units == 0) return 1;
  const int64_t wanted = (int64_t{kTasksPerThread} * threads + units - 1) / units;
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
// chunk, range of KV heads).
int64_t TaskCount(const AttentionShape& s, const AttentionSequence& seq, int ranges, int threads) {
  if (seq.n_queries >= kGemmMinQueries) {
    return int64_t{s.n_kv_heads} * BlockRanges(s, seq, threads);
  }
  return int64_t{seq.n_queries} * SequenceChunks(seq) * ranges;
}

// Floats of partials each decode row of `seq` keeps for the merge when it has several chunks.
int64_t RowPartialFloats(const AttentionShape& s, const AttentionSequence& seq) {
  return int64_t{SequenceChunks(seq)} * s.n_heads * PartialFloats(s.head_dim);
}

// Floats of partials a sequence's rows keep: none on the GEMM path or when every row is one chunk.
int64_t PartialCount(const AttentionShape& s, const AttentionSequence& seq) {
  const bool merged = seq.n_queries < kGemmMinQueries && SequenceChunks(seq) > 1;
  return merged ? seq.n_queries * RowPartialFloats(s, seq) : 0;
}

// The GEMM path's blocks or the decode path's chunk, whichever is more.
int64_t PerThreadFloats(const AttentionShape& shape, int max_context, int page_size) {
  return std::max(BlockGemmFloats(shape, max_context, page_size),
                  DecodeFloats(shape, max_context, page_size));
}

// Runs fn(seq, first_partial) for each sequence and where its partials start (each sequence's
// PartialCount after the previous ones').
template <typename Fn>
void ForEachSequence(std::span<const AttentionSequence> sequences, const AttentionShape& s, Fn fn) {
  int64_t partial = 0;
  for (const AttentionSequence& seq : sequences) {
    fn(seq, partial);
    partial += PartialCount(s, seq);
  }
}

// What a call's sequences need of the workspace's bounds.
struct Bounds {
  int page_size = 0;       // the largest
  int max_context = 0;     // the largest start_pos + n_queries
  int decode_queries = 0;  // in all, of the sequences on the decode path
};
Bounds BoundsOf(std::span<const AttentionSequence> sequences) {
  Bounds b;
  for (const AttentionSequence& seq : sequences) {
    b.page_size = std::max(b.page_size, seq.kv.page_size);
    b.max_context = std::max(b.max_context, seq.start_pos + seq.n_queries);
    if (seq.n_queries < kGemmMinQueries) b.decode_queries += seq.n_queries;
  }
  return b;
}

}  // namespace

size_t AttentionWorkspaceFloats(const AttentionShape& shape, int num_threads, int max_context,
                                int page_size, int max_decode_queries) {
  const int chunks = MaxDecodeChunks(max_context);
  const int64_t partials = chunks > 1 ? int64_t{max_decode_queries} * chunks * shape.n_heads *
                                            PartialFloats(shape.head_dim)
                                      : 0;
  return static_cast<size_t>(num_threads * PerThreadFloats(shape, max_context, page_size) +
                             partials);
}

size_t AttentionWorkspaceFloats(const AttentionShape& shape, int num_threads,
                                std::span<const AttentionSequence> sequences) {
  const Bounds b = BoundsOf(sequences);
  return AttentionWorkspaceFloats(shape, num_threads, b.max_context, b.page_size, b.decode_queries);
}

void Attention(ThreadPool& pool, const AttentionShape& shape,
               std::span<const AttentionSequence> sequences, std::span<float> workspace) {
  // This call's bounds (within those the workspace was sized for) lay it out.
  const Bounds bounds = BoundsOf(sequences);
  const int max_context = bounds.max_context;
  const int64_t per_thread = PerThreadFloats(shape, max_context, bounds.page_size);
  float* const partials = workspace.data() + pool.size() * per_thread;
  const int ranges = DecodeRanges(shape, sequences, pool.size());
  auto tasks = [&](const AttentionSequence& seq) {
    return TaskCount(shape, seq, ranges, pool.size());
  };
  int64_t total = 0, merged_rows = 0;
  for (const AttentionSequence& seq : sequences) {
    total += tasks(seq);
    if (PartialCount(shape, seq) > 0) merged_rows += seq.n_queries;
  }
  const DecodeRowKernels& rk = ActiveDecodeRows();
  const GemmKernel kernel = ActiveGemmKernel();
  pool.ParallelForDynamic(total, 1, [&](int64_t begin, int64_t end, int thread) {
    float* ws = workspace.data() + thread * per_thread;
    size_t s = 0;
    int64_t first = 0;    // flat index of sequences[s]'s first task
    int64_t partial = 0;  // where sequences[s]'s partials start
    for (int64_t task = begin; task < end; ++task) {
      while (task >= first + tasks(sequences[s])) {
        first += tasks(sequences[s]);
        partial += PartialCount(shape, sequences[s++]);
      }
      const AttentionSequence& seq = sequences[s];
      const int64_t index = task - first;
      if (seq.n_queries >= kGemmMinQueries) {
        const int block_ranges = BlockRanges(shape, seq, pool.size());
        const auto [b0, b1] = BlockRange(seq, static_cast<int>(index % block_ranges), block_ranges);
        AttendBlocksGemm(kernel, shape, seq, static_cast<int>(index / block_ranges), b0, b1,
                         max_context, ws);
        continue;
      }
      const int chunks = SequenceChunks(seq);
      const int i = static_cast<int>(index / (int64_t{chunks} * ranges));
      const int c = static_cast<int>(index / ranges % chunks);
      if (c >= DecodeChunks(seq.start_pos + i + 1, seq.kv.page_size)) continue;  // a shorter row
      const auto [g0, g1] = HeadRange(shape, static_cast<int>(index % ranges), ranges);
      AttendChunk(rk, shape, seq, i, c, g0, g1,
                  partials + partial + i * RowPartialFloats(shape, seq), ws);
    }
  });
  if (merged_rows == 0) return;
  pool.ParallelFor(merged_rows, 1, [&](int64_t begin, int64_t end, int /*thread*/) {
    int64_t row = 0;  // flat index over the merged sequences' rows
    ForEachSequence(sequences, shape, [&](const AttentionSequence& seq, int64_t partial) {
      if (PartialCount(shape, seq) == 0) return;
      for (int i = 0; i < seq.n_queries; ++i, ++row) {
        if (row >= begin && row < end) {
          MergeRow(shape, seq, i, partials + partial + i * RowPartialFloats(shape, seq));
        }
      }
    });
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
        scores[t] = dot * scale + (seq.token_bias != nullptr ? seq.token_bias[t] : 0.0f);
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
