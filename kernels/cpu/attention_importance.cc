#include "kernels/attention_importance.h"

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {

size_t AttentionImportanceWorkspaceFloats(const AttentionShape& shape, int num_threads,
                                          int max_context) {
  return static_cast<size_t>(num_threads) * shape.group() * max_context;
}

void AttentionImportance(ThreadPool& pool, const AttentionShape& shape,
                         const AttentionSequence& sequence, std::span<float> importance, int64_t ld,
                         std::span<float> workspace) {
  const DecodeRowKernels& rk = ActiveDecodeRows();
  const int group = shape.group();
  const int64_t q_stride =
      sequence.q_row_stride != 0 ? sequence.q_row_stride : int64_t{shape.n_heads} * shape.head_dim;
  const int64_t per_thread = static_cast<int64_t>(workspace.size()) / pool.size();
  const float weight = 1.0f / static_cast<float>(group);
  pool.ParallelForDynamic(shape.n_kv_heads, 1, [&](int64_t begin, int64_t end, int thread) {
    float* probs = workspace.data() + thread * per_thread;  // [group, n]
    for (int g = static_cast<int>(begin); g < end; ++g) {
      float* row = importance.data() + g * ld;
      for (int i = 0; i < sequence.n_queries; ++i) {
        const int n = sequence.start_pos + i + 1;
        ScoreHeads(rk, shape, sequence.kv, g, g + 1, sequence.q + i * q_stride, n, probs, n);
        for (int j = 0; j < group; ++j) {
          float* p = probs + int64_t{j} * n;
          SoftmaxInPlace(p, n);
          for (int t = 0; t < n; ++t) row[t] += weight * p[t];
        }
      }
    }
  });
}

}  // namespace pdserve::kernels
