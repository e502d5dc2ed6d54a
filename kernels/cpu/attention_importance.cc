#include "kernels/attention_importance.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_panels.h"
#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {
namespace {

// Queries per GEMM of the panel path (its scores are kQueryChunk rows of the keys they see).
constexpr int kQueryChunk = 32;

// out[t] += weight · softmax(p[0, seen))[t], p softmaxed in place.
void AddProbabilities(float* p, int seen, float weight, float* out) {
  SoftmaxInPlace(p, seen);
  for (int t = 0; t < seen; ++t) out[t] += weight * p[t];
}

// The scores of up to kGroupPass (query, query head) rows of KV head g in one sweep over its
// keys [0, n): scores[r · n + t] = q_r · k_t / √head_dim.
void ScoreRows(const DecodeRowKernels& rk, const AttentionShape& shape, const PagedKvView& kv,
               int g, const float* const* q, int rows, int n, float* scores) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(shape.head_dim));
  for (int t = 0, p = 0; t < n; t += kv.page_size, ++p) {
    const int count = std::min(kv.page_size, n - t);
    rk.score(q, rows, PageRowsOf(kv.k, kv.k.page(kv.pages[p]), kv.page_size, g, count), scale,
             scores + t, n);
  }
}

// KV head g for few queries (H2O's decode steps): rows r = i · group + j (query i, query head j
// of g), kGroupPass per sweep over the keys the pass's last query sees. `scores` holds
// kGroupPass · n_keys floats.
void ImportanceByRows(const DecodeRowKernels& rk, const AttentionShape& shape,
                      const AttentionSequence& sequence, int g, float* out, float* scores) {
  const int group = shape.group(), rows = sequence.n_queries * group;
  const int64_t q_stride = QStride(shape, sequence);
  for (int r0 = 0; r0 < rows; r0 += kGroupPass) {
    const int count = std::min(kGroupPass, rows - r0);
    const float* q[kGroupPass];
    for (int r = 0; r < count; ++r) {
      const int i = (r0 + r) / group, h = g * group + (r0 + r) % group;
      q[r] = sequence.q + i * q_stride + shape.q_offset(h);
    }
    const int n = sequence.start_pos + (r0 + count - 1) / group + 1;
    ScoreRows(rk, shape, sequence.kv, g, q, count, n, scores);
    AddTokenBias(sequence.token_bias, 0, n, count, scores, n);
    for (int r = 0; r < count; ++r) {
      AddProbabilities(scores + int64_t{r} * n, sequence.start_pos + (r0 + r) / group + 1,
                       1.0f / static_cast<float>(group), out);
    }
  }
}

// KV head g for a prompt's window of queries: its keys gathered into panels once, then per query
// head and chunk of kQueryChunk queries one GEMM S = Q·Kᵀ/√head_dim over the keys the chunk's
// last query sees. `ws` holds head_dim · RoundUpToPanels(n_keys) + kQueryChunk · n_keys +
// page_size · head_dim floats.
void ImportanceByPanels(const GemmKernel& kernel, const AttentionShape& shape,
                        const AttentionSequence& sequence, int g, float* out, float* ws) {
  const PagedKvView& kv = sequence.kv;
  const int dk = kv.k.dim(g), n_keys = sequence.start_pos + sequence.n_queries;
  const int64_t q_stride = QStride(shape, sequence);
  float* keys = ws;
  float* scores = keys + int64_t{shape.head_dim} * RoundUpToPanels(n_keys);
  float* scratch = scores + int64_t{kQueryChunk} * n_keys;
  if (dk > 0) {
    GatherKeyPanels(kv.k, kv, g, n_keys, kernel.nr,
                    1.0f / std::sqrt(static_cast<float>(shape.head_dim)), keys, scratch);
  }
  for (int h = g * shape.group(); h < (g + 1) * shape.group(); ++h) {
    for (int i0 = 0; i0 < sequence.n_queries; i0 += kQueryChunk) {
      const int m = std::min(kQueryChunk, sequence.n_queries - i0);
      const int n = sequence.start_pos + i0 + m;  // what the chunk's last query sees
      KeyPanelScores(kernel, sequence.q + i0 * q_stride + shape.q_offset(h), q_stride, m, keys, dk,
                     n, scores);
      AddTokenBias(sequence.token_bias, 0, n, m, scores, n);
      for (int i = 0; i < m; ++i) {
        AddProbabilities(scores + int64_t{i} * n, sequence.start_pos + i0 + i + 1,
                         1.0f / static_cast<float>(shape.group()), out);
      }
    }
  }
}

}  // namespace

size_t AttentionImportanceWorkspaceFloats(const AttentionShape& shape, int num_threads,
                                          int max_context, int page_size) {
  const int64_t rows = int64_t{kGroupPass} * max_context;
  const int64_t panels = int64_t{shape.head_dim} * RoundUpToPanels(max_context) +
                         int64_t{kQueryChunk} * max_context + int64_t{page_size} * shape.head_dim;
  return static_cast<size_t>(num_threads) * std::max(rows, panels);
}

void AttentionImportance(ThreadPool& pool, const AttentionShape& shape,
                         const AttentionSequence& sequence, std::span<float> importance, int64_t ld,
                         std::span<float> workspace) {
  const DecodeRowKernels& rk = ActiveDecodeRows();
  const GemmKernel kernel = ActiveGemmKernel();
  const int64_t per_thread = static_cast<int64_t>(workspace.size()) / pool.size();
  pool.ParallelForDynamic(shape.n_kv_heads, 1, [&](int64_t begin, int64_t end, int thread) {
    float* ws = workspace.data() + thread * per_thread;
    for (int g = static_cast<int>(begin); g < end; ++g) {
      float* out = importance.data() + g * ld;
      if (sequence.n_queries >= kGemmMinQueries) {
        ImportanceByPanels(kernel, shape, sequence, g, out, ws);
      } else {
        ImportanceByRows(rk, shape, sequence, g, out, ws);
      }
    }
  });
}

}  // namespace pdserve::kernels
