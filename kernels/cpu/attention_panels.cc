#include "kernels/cpu/attention_panels.h"

#include <immintrin.h>

#include <algorithm>

#include "kernels/cpu/attention_rows.h"
#include "kernels/cpu/transpose_avx2.h"

namespace pdserve::kernels {
namespace {

// Calls fn(first, count, rows) for tokens [0, n_tokens) of KV head g in `section`, a page at a
// time: rows holds `count` rows of section.dim(g) floats (dequantized into `scratch`, page_size ·
// dim floats, unless stored as f32).
template <typename Fn>
void ForEachPageRows(const KvSectionView& section, const PagedKvView& kv, int g, int n_tokens,
                     float* scratch, Fn fn) {
  for (int t = 0, p = 0; t < n_tokens; t += kv.page_size, ++p) {
    const int count = std::min(kv.page_size, n_tokens - t);
    fn(t, count, HeadRows(section, kv.page_size, kv.pages[p], g, 0, count, scratch));
  }
}

// dst[i · ld_dst + j] = alpha · src[j · ld_src + i] for i, j < 8.
void TransposeScaled8x8(const float* src, int64_t ld_src, float alpha, float* dst, int64_t ld_dst) {
  __m256 r[8];
  for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + j * ld_src);
  Transpose8x8(r);
  const __m256 a = _mm256_set1_ps(alpha);
  for (int d = 0; d < 8; ++d) _mm256_storeu_ps(dst + d * ld_dst, _mm256_mul_ps(a, r[d]));
}

}  // namespace

void GatherKeyPanels(const KvSectionView& section, const PagedKvView& kv, int g, int n, int nr,
                     float alpha, float* panels, float* scratch) {
  const int dk = section.dim(g);
  ForEachPageRows(section, kv, g, n, scratch, [&](int first, int count, const float* rows) {
    int r = 0;
    // Blocks of 8 keys within one panel and 8 dims transposed in registers, the rest one by one.
    for (; r + 8 <= count && (first + r) % 8 == 0 && (first + r) % nr + 8 <= nr; r += 8) {
      const int key = first + r;
      float* column = panels + int64_t{key / nr} * dk * nr + key % nr;
      int c = 0;
      for (; c + 8 <= dk; c += 8) {
        TransposeScaled8x8(rows + int64_t{r} * dk + c, dk, alpha, column + int64_t{c} * nr, nr);
      }
      for (; c < dk; ++c) {
        for (int j = 0; j < 8; ++j) {
          column[int64_t{c} * nr + j] = alpha * rows[int64_t{r + j} * dk + c];
        }
      }
    }
    for (; r < count; ++r) {
      const int key = first + r;
      float* column = panels + int64_t{key / nr} * dk * nr + key % nr;
      for (int c = 0; c < dk; ++c) column[int64_t{c} * nr] = alpha * rows[int64_t{r} * dk + c];
    }
  });
  float* last = panels + int64_t{n / nr} * dk * nr;
  for (int c = 0; n % nr != 0 && c < dk; ++c) {
    std::fill(last + int64_t{c} * nr + n % nr, last + int64_t{c + 1} * nr, 0.0f);
  }
}

void GatherValuePanels(const KvSectionView& section, const PagedKvView& kv, int g, int n, int nr,
                       float* panels, float* scratch) {
  const int dv = section.dim(g);
  ForEachPageRows(section, kv, g, n, scratch, [&](int first, int count, const float* rows) {
    for (int r = 0; r < count; ++r) {
      const float* row = rows + int64_t{r} * dv;
      for (int d0 = 0; d0 < dv; d0 += nr) {
        const int live = std::min(nr, dv - d0);
        float* to = panels + (int64_t{d0} * n + int64_t{first + r} * nr);
        std::copy_n(row + d0, live, to);
        std::fill(to + live, to + nr, 0.0f);
      }
    }
  });
}

void GemmOverPanels(const GemmKernel& kernel, const float* x, int64_t ldx, int m,
                    const float* panels, int64_t panel_stride, int kc, int n, float* y,
                    int64_t ldy) {
  for (int i0 = 0; i0 < m; i0 += kernel.mr) {
    for (int j0 = 0, p = 0; j0 < n; j0 += kernel.nr, ++p) {
      kernel.tile({.x = x + int64_t{i0} * ldx,
                   .ldx = ldx,
                   .mr = std::min(kernel.mr, m - i0),
                   .panel = panels + p * panel_stride,
                   .panel_dtype = DType::kF32,
                   .kc = kc,
                   .y = y + int64_t{i0} * ldy + j0,
                   .ldy = ldy,
                   .nr = std::min(kernel.nr, n - j0),
                   .accumulate = false});
    }
  }
}

void KeyPanelScores(const GemmKernel& kernel, const float* q, int64_t ldq, int m,
                    const float* key_panels, int dk, int n, float* scores) {
  if (dk == 0) {
    std::fill(scores, scores + int64_t{m} * n, 0.0f);
    return;
  }
  GemmOverPanels(kernel, q, ldq, m, key_panels, int64_t{dk} * kernel.nr, dk, n, scores, n);
}

}  // namespace pdserve::kernels
