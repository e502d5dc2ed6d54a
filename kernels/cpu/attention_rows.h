// Row primitives shared by the attention kernels (attention.cc, kcache_attention.cc): scores of
// one query against a block of keys, weighted sums of value rows, and access to one KV head's rows
// of a page, dequantized when the cache stores FP8. Internal to kernels/cpu.
#ifndef PDSERVE_KERNELS_CPU_ATTENTION_ROWS_H_
#define PDSERVE_KERNELS_CPU_ATTENTION_ROWS_H_

#include <immintrin.h>

#include <algorithm>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/fp8.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels {

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
inline void ScoreKeys(const float* q, const float* keys, int n, int d, float scale, float* scores) {
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
inline void AccumulateChunk(const float* w, const float* values, int n, int d, float* out) {
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
inline void AccumulateValues(const float* w, const float* values, int n, int d, float* out) {
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

// Rows [slot, slot + count) of KV head g in page `page_id` of section `s`, as f32 rows of
// s.dim(g) floats: a pointer into the cache for f32 sections, else dequantized into `scratch`
// (count · dim floats).
inline const float* HeadRows(const KvSectionView& s, int page_size, int32_t page_id, int g,
                             int slot, int count, float* scratch) {
  const uint8_t* page = s.page(page_id);
  const int dim = s.dim(g);
  const uint8_t* rows =
      page + s.head_offset(g, page_size) + int64_t{slot} * dim * s.element_bytes();
  if (!s.e4m3) return reinterpret_cast<const float*>(rows);
  const float* scales = reinterpret_cast<const float*>(page) + int64_t{g} * s.scales_per_head;
  for (int r = 0; r < count; ++r) {
    const float scale = scales[s.scales_per_head == 1 ? 0 : slot + r];
    DequantizeE4M3(rows + int64_t{r} * dim, dim, scale, scratch + int64_t{r} * dim);
  }
  return scratch;
}

// Scores of query row `q` (k.dim(g) floats) against tokens [0, n_tokens) of KV head g, page by
// page, into scores[0, n_tokens). `scratch` holds page_size · head_dim floats.
inline void ScoreAll(const AttentionShape& s, const PagedKvView& kv, int g, const float* q,
                     int n_tokens, float* scores, float* scratch) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  for (int t = 0, p = 0; t < n_tokens; t += kv.page_size, ++p) {
    const int count = std::min(kv.page_size, n_tokens - t);
    const float* keys = HeadRows(kv.k, kv.page_size, kv.pages[p], g, 0, count, scratch);
    ScoreKeys(q, keys, count, kv.k.dim(g), scale, scores + t);
  }
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_ATTENTION_ROWS_H_
