#include "kernels/attention_importance.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {
namespace {

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

}  // namespace

size_t AttentionImportanceWorkspaceFloats(const AttentionShape& /*shape*/, int num_threads,
                                          int max_context) {
  return static_cast<size_t>(num_threads) * kGroupPass * max_context;
}

void AttentionImportance(ThreadPool& pool, const AttentionShape& shape,
                         const AttentionSequence& sequence, std::span<float> importance, int64_t ld,
                         std::span<float> workspace) {
  const DecodeRowKernels& rk = ActiveDecodeRows();
  const int group = shape.group(), rows = sequence.n_queries * group;
  const int64_t q_stride =
      sequence.q_row_stride != 0 ? sequence.q_row_stride : int64_t{shape.n_heads} * shape.head_dim;
  const int64_t per_thread = static_cast<int64_t>(workspace.size()) / pool.size();
  const float weight = 1.0f / static_cast<float>(group);
  pool.ParallelForDynamic(shape.n_kv_heads, 1, [&](int64_t begin, int64_t end, int thread) {
    float* scores = workspace.data() + thread * per_thread;  // [kGroupPass, n]
    for (int g = static_cast<int>(begin); g < end; ++g) {
      float* out = importance.data() + g * ld;
      // Rows r = i · group + j (query i, query head j of g), kGroupPass per sweep over the keys
      // the pass's last query sees; each row's softmax then covers only the keys it sees.
      for (int r0 = 0; r0 < rows; r0 += kGroupPass) {
        const int count = std::min(kGroupPass, rows - r0);
        const float* q[kGroupPass];
        for (int r = 0; r < count; ++r) {
          const int i = (r0 + r) / group, h = g * group + (r0 + r) % group;
          q[r] = sequence.q + i * q_stride + shape.q_offset(h);
        }
        const int n = sequence.start_pos + (r0 + count - 1) / group + 1;
        ScoreRows(rk, shape, sequence.kv, g, q, count, n, scores);
        for (int r = 0; r < count; ++r) {
          float* p = scores + int64_t{r} * n;
          const int seen = sequence.start_pos + (r0 + r) / group + 1;
          SoftmaxInPlace(p, seen);
          for (int t = 0; t < seen; ++t) out[t] += weight * p[t];
        }
      }
    }
  });
}

}  // namespace pdserve::kernels
