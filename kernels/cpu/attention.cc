#include "kernels/attention.h"

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cpu/blas.h"
#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {
namespace {

inline float Dot(const float* a, const float* b, int n) {
  float sum = 0.0f;
  for (int i = 0; i < n; ++i) sum += a[i] * b[i];
  return sum;
}

// Sums each of eight vectors: result[j] = Σ lanes of v[j].
inline __m256 HorizontalSums8(const __m256 v[8]) {
  __m256 r0123 = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
  __m256 r4567 = _mm256_hadd_ps(_mm256_hadd_ps(v[4], v[5]), _mm256_hadd_ps(v[6], v[7]));
  return _mm256_add_ps(_mm256_permute2f128_ps(r0123, r4567, 0x20),
                       _mm256_permute2f128_ps(r0123, r4567, 0x31));
}

// scores[j] = q · keys[j] · scale for j < n; keys are rows of `d` floats, contiguous.
void ScoreKeys(const float* q, const float* keys, int n, int d, float scale, float* scores) {
  int j = 0;
  if (d % 8 == 0) {
    const __m256 vscale = _mm256_set1_ps(scale);
    for (; j + 8 <= n; j += 8) {
      __m256 acc[8];
      for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
      for (int c = 0; c < d; c += 8) {
        const __m256 qc = _mm256_loadu_ps(q + c);
        for (int r = 0; r < 8; ++r) {
          acc[r] = _mm256_fmadd_ps(qc, _mm256_loadu_ps(keys + (j + r) * d + c), acc[r]);
        }
      }
      _mm256_storeu_ps(scores + j, _mm256_mul_ps(HorizontalSums8(acc), vscale));
    }
  }
  for (; j < n; ++j) scores[j] = Dot(q, keys + j * d, d) * scale;
}

// out[0, 8·N) += Σ_j w[j] · values[j][0, 8·N), the accumulators held in registers.
template <int N>
void AccumulateChunk(const float* w, const float* values, int n, int d, float* out) {
  __m256 acc[N];
  for (int r = 0; r < N; ++r) acc[r] = _mm256_loadu_ps(out + 8 * r);
  for (int j = 0; j < n; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const float* v = values + int64_t{j} * d;
    for (int r = 0; r < N; ++r) acc[r] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(v + 8 * r), acc[r]);
  }
  for (int r = 0; r < N; ++r) _mm256_storeu_ps(out + 8 * r, acc[r]);
}

// out += Σ_j w[j] · values[j] over n rows of `d` floats.
void AccumulateValues(const float* w, const float* values, int n, int d, float* out) {
  if (d % 8 != 0) {
    for (int j = 0; j < n; ++j) {
      for (int i = 0; i < d; ++i) out[i] += w[j] * values[int64_t{j} * d + i];
    }
    return;
  }
  using Chunk = void (*)(const float*, const float*, int, int, float*);
  static constexpr Chunk kChunks[] = {&AccumulateChunk<1>, &AccumulateChunk<2>, &AccumulateChunk<3>,
                                      &AccumulateChunk<4>, &AccumulateChunk<5>, &AccumulateChunk<6>,
                                      &AccumulateChunk<7>, &AccumulateChunk<8>};
  for (int c = 0; c < d; c += 64) {
    kChunks[std::min(8, (d - c) / 8) - 1](w, values + c, n, d, out + c);
  }
}

// One query head over tokens [0, n_tokens): out = softmax(q·Kᵀ·scale)·V, page by page.
// `scores` holds n_tokens.
void AttendOne(const AttentionShape& s, const PagedKvView& kv, int g, const float* q, int n_tokens,
               float* scores, float* out) {
  const int d = s.head_dim, page_size = kv.page_size;
  const int64_t head_offset = int64_t{g} * page_size * d;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  for (int t = 0, p = 0; t < n_tokens; t += page_size, ++p) {
    const float* keys = kv.k + kv.pages[p] * kv.page_stride + head_offset;
    ScoreKeys(q, keys, std::min(page_size, n_tokens - t), d, scale, scores + t);
  }
  SoftmaxInPlace(scores, n_tokens);
  std::fill(out, out + d, 0.0f);
  for (int t = 0, p = 0; t < n_tokens; t += page_size, ++p) {
    const float* values = kv.v + kv.pages[p] * kv.page_stride + head_offset;
    AccumulateValues(scores + t, values, std::min(page_size, n_tokens - t), d, out);
  }
}

// Sequences with at least this many queries (prefill) run attention as two SGEMMs per block of
// kQueryBlock queries and head: S = Q·Kᵀ over the keys the block sees, causal softmax, O = P·V.
constexpr int kGemmMinQueries = 16;
constexpr int kQueryBlock = 64;

// Copies KV head g's vectors of tokens [0, n_tokens) out of the pages: dst [n_tokens, head_dim].
void GatherHead(const float* base, const PagedKvView& kv, int g, int n_tokens, int d, float* dst) {
  const int64_t head_offset = int64_t{g} * kv.page_size * d;
  for (int t = 0, p = 0; t < n_tokens; t += kv.page_size, ++p) {
    const int count = std::min(kv.page_size, n_tokens - t);
    std::copy_n(base + kv.pages[p] * kv.page_stride + head_offset, int64_t{count} * d,
                dst + int64_t{t} * d);
  }
}

// Queries [q_begin, q_end) of one head. `ws` holds 2·max_context·head_dim + kQueryBlock·max_context
// floats.
void AttendBlockGemm(const AttentionShape& s, const AttentionSequence& seq, int head, int q_begin,
                     int q_end, int max_context, float* ws) {
  const int d = s.head_dim;
  const int g = head / (s.n_heads / s.n_kv_heads);
  const int n_keys = seq.start_pos + q_end;  // what the block's last query sees
  const int64_t row = int64_t{s.n_heads} * d;
  const int64_t q_stride = seq.q_row_stride > 0 ? seq.q_row_stride : row;
  float* keys = ws;
  float* values = keys + int64_t{max_context} * d;
  float* scores = values + int64_t{max_context} * d;  // [q_end − q_begin, n_keys]
  GatherHead(seq.kv.k, seq.kv, g, n_keys, d, keys);
  GatherHead(seq.kv.v, seq.kv, g, n_keys, d, values);
  const int m = q_end - q_begin;
  Sgemm({.m = m,
         .n = n_keys,
         .k = d,
         .alpha = 1.0f / std::sqrt(static_cast<float>(d)),
         .a = seq.q + q_begin * q_stride + int64_t{head} * d,
         .lda = q_stride,
         .b = keys,
         .ldb = d,
         .b_transposed = true,
         .c = scores,
         .ldc = n_keys});
  for (int i = 0; i < m; ++i) {
    float* sr = scores + int64_t{i} * n_keys;
    const int visible = seq.start_pos + q_begin + i + 1;
    SoftmaxInPlace(sr, visible);
    std::fill(sr + visible, sr + n_keys, 0.0f);
  }
  Sgemm({.m = m,
         .n = d,
         .k = n_keys,
         .a = scores,
         .lda = n_keys,
         .b = values,
         .ldb = d,
         .b_transposed = false,
         .c = seq.out + q_begin * row + int64_t{head} * d,
         .ldc = row});
}

// Tasks of one sequence: per (head, query block) on the GEMM path, else per (head, query).
int64_t TaskCount(const AttentionShape& s, const AttentionSequence& seq) {
  if (seq.n_queries >= kGemmMinQueries) {
    return int64_t{s.n_heads} * ((seq.n_queries + kQueryBlock - 1) / kQueryBlock);
  }
  return int64_t{s.n_heads} * seq.n_queries;
}

// Address of token t's vector for KV head g in a paged buffer (reference path).
inline const float* TokenRow(const float* base, const PagedKvView& kv, int g, int t, int head_dim) {
  const int64_t page = kv.pages[t / kv.page_size];
  const int64_t slot = static_cast<int64_t>(g) * kv.page_size + t % kv.page_size;
  return base + page * kv.page_stride + slot * head_dim;
}

}  // namespace

size_t AttentionWorkspaceFloats(const AttentionShape& shape, int num_threads, int max_context) {
  const size_t per_thread = static_cast<size_t>(max_context) * (2 * shape.head_dim + kQueryBlock);
  return static_cast<size_t>(num_threads) * per_thread;
}

void Attention(ThreadPool& pool, const AttentionShape& shape,
               std::span<const AttentionSequence> sequences, std::span<float> workspace) {
  int64_t total = 0;
  int max_context = 0;
  for (const AttentionSequence& seq : sequences) total += TaskCount(shape, seq);
  const size_t per_thread = workspace.size() / pool.size();
  max_context = static_cast<int>(per_thread / (2 * shape.head_dim + kQueryBlock));
  const int group = shape.n_heads / shape.n_kv_heads;
  const int64_t row = int64_t{shape.n_heads} * shape.head_dim;
  pool.ParallelForDynamic(total, 1, [&](int64_t begin, int64_t end, int thread) {
    float* ws = workspace.data() + thread * per_thread;
    size_t s = 0;
    int64_t first = 0;  // flat index of sequences[s]'s first task
    for (int64_t task = begin; task < end; ++task) {
      while (task >= first + TaskCount(shape, sequences[s]))
        first += TaskCount(shape, sequences[s++]);
      const AttentionSequence& seq = sequences[s];
      // Head-major within a sequence: consecutive tasks reuse one head's K/V from cache.
      const int64_t per_head = TaskCount(shape, seq) / shape.n_heads;
      const int head = static_cast<int>((task - first) / per_head);
      const int index = static_cast<int>((task - first) % per_head);
      if (seq.n_queries >= kGemmMinQueries) {
        const int q_begin = index * kQueryBlock;
        AttendBlockGemm(shape, seq, head, q_begin, std::min(seq.n_queries, q_begin + kQueryBlock),
                        max_context, ws);
        continue;
      }
      const int64_t q_stride = seq.q_row_stride > 0 ? seq.q_row_stride : row;
      const int64_t head_offset = int64_t{head} * shape.head_dim;
      AttendOne(shape, seq.kv, head / group, seq.q + index * q_stride + head_offset,
                seq.start_pos + index + 1, ws, seq.out + index * row + head_offset);
    }
  });
}

void AttentionReference(const AttentionShape& shape, const AttentionSequence& seq) {
  const int d = shape.head_dim;
  const int group = shape.n_heads / shape.n_kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  const int64_t row = int64_t{shape.n_heads} * d;
  const int64_t q_stride = seq.q_row_stride > 0 ? seq.q_row_stride : row;
  for (int i = 0; i < seq.n_queries; ++i) {
    const int n_tokens = seq.start_pos + i + 1;
    for (int h = 0; h < shape.n_heads; ++h) {
      const float* q = seq.q + i * q_stride + int64_t{h} * d;
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
