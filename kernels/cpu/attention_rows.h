// What the attention kernels (attention.cc, kcache_attention.cc, attention_importance.cc) share:
// one KV head's rows of a page as f32 (widened or dequantized from an f16 or FP8 cache), for
// prefill's gathers and the reference; a sequence's row strides; and the decode scores of a group
// of query heads through the fused row kernels (decode_rows.h). Internal to kernels/cpu.
#ifndef PDSERVE_KERNELS_CPU_ATTENTION_ROWS_H_
#define PDSERVE_KERNELS_CPU_ATTENTION_ROWS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cpu/decode_rows.h"
#include "kernels/float16_rows.h"
#include "kernels/fp8.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels {

// Rows [slot, slot + count) of KV head g in page `page_id` of section `s`, as f32 rows of
// s.dim(g) floats: a pointer into the cache for f32 sections, else widened or dequantized into
// `scratch` (count · dim floats).
inline const float* HeadRows(const KvSectionView& s, int page_size, int32_t page_id, int g,
                             int slot, int count, float* scratch) {
  const uint8_t* page = s.page(page_id);
  const int dim = s.dim(g);
  const uint8_t* rows =
      page + s.head_offset(g, page_size) + int64_t{slot} * dim * s.element_bytes();
  if (s.f16) {
    F16ToFloats(reinterpret_cast<const uint16_t*>(rows), int64_t{count} * dim, scratch);
    return scratch;
  }
  if (!s.e4m3) return reinterpret_cast<const float*>(rows);
  const float* scales = reinterpret_cast<const float*>(page) + int64_t{g} * s.scales_per_head;
  for (int r = 0; r < count; ++r) {
    const float scale = scales[s.scales_per_head == 1 ? 0 : slot + r];
    DequantizeE4M3(rows + int64_t{r} * dim, dim, scale, scratch + int64_t{r} * dim);
  }
  return scratch;
}

// Floats between a sequence's query rows, and between its output rows (0: n_heads · head_dim).
inline int64_t QStride(const AttentionShape& s, const AttentionSequence& seq) {
  return seq.q_row_stride > 0 ? seq.q_row_stride : int64_t{s.n_heads} * s.head_dim;
}
inline int64_t OutStride(const AttentionShape& s, const AttentionSequence& seq) {
  return seq.out_row_stride > 0 ? seq.out_row_stride : int64_t{s.n_heads} * s.head_dim;
}

// Query heads of one KV head that one decode pass handles together (a pass's score rows and
// pointers; larger groups take several passes).
inline constexpr int kGroupPass = 16;

// Calls fn(g, h0, nq) for the query heads of KV heads [g0, g1) in passes of at most kGroupPass
// heads [h0, h0 + nq), each within one KV head g.
template <typename Fn>
void ForEachPass(const AttentionShape& s, int g0, int g1, Fn fn) {
  const int group = s.group();
  for (int g = g0; g < g1; ++g) {
    for (int h0 = g * group; h0 < (g + 1) * group; h0 += kGroupPass) {
      fn(g, h0, std::min(kGroupPass, (g + 1) * group - h0));
    }
  }
}

// scores[r · ld + t − t0] += bias[t] for rows r < rows and tokens [t0, t1): a sequence's
// AttentionSequence::token_bias, where it has one (null: nothing to add).
inline void AddTokenBias(const float* bias, int t0, int t1, int rows, float* scores, int64_t ld) {
  if (bias == nullptr) return;
  for (int r = 0; r < rows; ++r) {
    float* row = scores + r * ld - t0;
    for (int t = t0; t < t1; ++t) row[t] += bias[t];
  }
}

// Decode reads a sequence's pages one after the other, each page's KV heads in turn; the hardware
// prefetchers do not run ahead into the next page (it need not be adjacent), so every page's first
// lines waited on memory. Before KV head g's rows of page p are read, the same head's rows of page
// p + 1 are prefetched when that page holds tokens below t_end: one page ahead
// (BM_CompressedDecode, Intel Xeon: FP8 1 × 8192 tokens 1.1 → 0.54 ms, f32 16 × 2048 11.6 → 9.5 ms;
// two or four pages ahead were no better, and worse for f32).
inline void PrefetchNextPageRows(const KvSectionView& s, const PagedKvView& kv, int p, int t_end,
                                 int g) {
  if (int64_t{p + 1} * kv.page_size >= t_end) return;
  const uint8_t* rows = s.page(kv.pages[p + 1]) + s.head_offset(g, kv.page_size);
  const int64_t bytes = int64_t{kv.page_size} * s.dim(g) * s.element_bytes();
  for (int64_t b = 0; b < bytes; b += 64) __builtin_prefetch(rows + b, 0, 3);
}

// Decode scores of the query heads of KV heads [g0, g1) — head h's query at q_row + q_offset(h),
// kv.k.dim(h / group) floats — against tokens [t0, t1), t0 on a page boundary:
// scores[(h − g0·group)·ld + t − t0] = q_h · k_t / √head_dim. Page by page, each page's rows of the
// whole range in one sweep (a contiguous run of the page, which the hardware prefetchers follow).
inline void ScoreHeads(const DecodeRowKernels& rk, const AttentionShape& s, const PagedKvView& kv,
                       int g0, int g1, const float* q_row, int t0, int t1, float* scores,
                       int64_t ld) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  const int64_t first = int64_t{g0} * s.group();
  for (int t = t0, p = t0 / kv.page_size; t < t1; t += kv.page_size, ++p) {
    const uint8_t* page = kv.k.page(kv.pages[p]);
    const int count = std::min(kv.page_size, t1 - t);
    ForEachPass(s, g0, g1, [&](int g, int h0, int nq) {
      if (h0 == g * s.group()) PrefetchNextPageRows(kv.k, kv, p, t1, g);
      const float* q[kGroupPass];
      for (int j = 0; j < nq; ++j) q[j] = q_row + s.q_offset(h0 + j);
      rk.score(q, nq, PageRowsOf(kv.k, page, kv.page_size, g, count), scale,
               scores + (h0 - first) * ld + (t - t0), ld);
    });
  }
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_ATTENTION_ROWS_H_
