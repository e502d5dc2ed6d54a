#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace pdserve::kernels {
namespace {

inline float Dot(const float* a, const float* b, int n) {
  int i = 0;
  float sum = 0.0f;
  if (n >= 8) {
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) {
      acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    }
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    sum = _mm_cvtss_f32(s);
  }
  for (; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Address of token t's vector for KV head g in a paged buffer.
inline const float* TokenRow(const float* base, const PagedKvView& kv, int g, int t, int head_dim) {
  const int64_t page = kv.pages[t / kv.page_size];
  const int64_t slot = static_cast<int64_t>(g) * kv.page_size + t % kv.page_size;
  return base + page * kv.page_stride + slot * head_dim;
}

// One query head over tokens [0, n_tokens): out = softmax(q·Kᵀ·scale)·V. `scores` holds n_tokens.
void AttendOne(const AttentionShape& s, const PagedKvView& kv, int g, const float* q, int n_tokens,
               float* scores, float* out) {
  const int d = s.head_dim;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  float max_score = -INFINITY;
  for (int t = 0; t < n_tokens; ++t) {
    scores[t] = Dot(q, TokenRow(kv.k, kv, g, t, d), d) * scale;
    max_score = std::max(max_score, scores[t]);
  }
  float sum = 0.0f;
  for (int t = 0; t < n_tokens; ++t) {
    scores[t] = expf(scores[t] - max_score);
    sum += scores[t];
  }
  const float inv = 1.0f / sum;
  std::fill(out, out + d, 0.0f);
  for (int t = 0; t < n_tokens; ++t) {
    const float w = scores[t] * inv;
    const float* v = TokenRow(kv.v, kv, g, t, d);
    for (int i = 0; i < d; ++i) out[i] += w * v[i];
  }
}

}  // namespace

size_t AttentionWorkspaceFloats(int num_threads, int max_context) {
  return static_cast<size_t>(num_threads) * max_context;
}

void Attention(ThreadPool& pool, const AttentionShape& shape,
               std::span<const AttentionSequence> sequences, std::span<float> workspace) {
  int64_t total = 0;
  for (const AttentionSequence& seq : sequences) total += int64_t{seq.n_queries} * shape.n_heads;
  const size_t per_thread = workspace.size() / pool.size();
  const int group = shape.n_heads / shape.n_kv_heads;
  const int64_t row = int64_t{shape.n_heads} * shape.head_dim;
  pool.ParallelFor(total, 1, [&](int64_t begin, int64_t end, int thread) {
    float* scores = workspace.data() + thread * per_thread;
    size_t s = 0;
    int64_t first = 0;  // flat index of sequences[s]'s first task
    for (int64_t task = begin; task < end; ++task) {
      while (task >= first + int64_t{sequences[s].n_queries} * shape.n_heads) {
        first += int64_t{sequences[s].n_queries} * shape.n_heads;
        ++s;
      }
      const AttentionSequence& seq = sequences[s];
      const int query = static_cast<int>((task - first) / shape.n_heads);
      const int head = static_cast<int>((task - first) % shape.n_heads);
      const int64_t offset = query * row + int64_t{head} * shape.head_dim;
      AttendOne(shape, seq.kv, head / group, seq.q + offset, seq.start_pos + query + 1, scores,
                seq.out + offset);
    }
  });
}

void AttentionReference(const AttentionShape& shape, const AttentionSequence& seq) {
  const int d = shape.head_dim;
  const int group = shape.n_heads / shape.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int i = 0; i < seq.n_queries; ++i) {
    const int n_tokens = seq.start_pos + i + 1;
    for (int h = 0; h < shape.n_heads; ++h) {
      const float* q = seq.q + (int64_t{i} * shape.n_heads + h) * d;
      float* out = seq.out + (int64_t{i} * shape.n_heads + h) * d;
      std::vector<float> scores(n_tokens);
      float max_score = -INFINITY;
      for (int t = 0; t < n_tokens; ++t) {
        const float* k = TokenRow(seq.kv.k, seq.kv, h / group, t, d);
        float dot = 0.0f;
        for (int c = 0; c < d; ++c) dot += q[c] * k[c];
        scores[t] = dot * scale;
        max_score = std::max(max_score, scores[t]);
      }
      float sum = 0.0f;
      for (float& sc : scores) {
        sc = expf(sc - max_score);
        sum += sc;
      }
      for (int c = 0; c < d; ++c) out[c] = 0.0f;
      for (int t = 0; t < n_tokens; ++t) {
        const float* v = TokenRow(seq.kv.v, seq.kv, h / group, t, d);
        for (int c = 0; c < d; ++c) out[c] += scores[t] / sum * v[c];
      }
    }
  }
}

}  // namespace pdserve::kernels
