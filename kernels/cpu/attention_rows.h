// What the attention kernels (attention.cc, kcache_attention.cc) share: one KV head's rows of a
// page as f32 (dequantized when the cache stores FP8), for prefill's gathers and the reference,
// and the decode scores of a group of query heads through the fused row kernels
// (decode_rows.h). Internal to kernels/cpu.
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

// Query heads of one KV head that one decode pass handles together (a pass's score rows and
// pointers; larger groups take several passes).
inline constexpr int kGroupPass = 16;

// Scores of queries q[0, nq) (nq ≤ kGroupPass; rows of kv.k.dim(g) floats) against tokens
// [0, n_tokens) of KV head g, page by page: scores[j·ld + t] = q[j] · k_t / √head_dim.
inline void ScoreGroup(const DecodeRowKernels& rk, const AttentionShape& s, const PagedKvView& kv,
                       int g, const float* const* q, int nq, int n_tokens, float* scores,
                       int64_t ld) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
  auto rows = [&](int t, int p) {
    return PageRowsOf(kv.k, kv.k.page(kv.pages[p]), kv.page_size, g,
                      std::min(kv.page_size, n_tokens - t));
  };
  for (int t = 0, p = 0; t < n_tokens; t += kv.page_size, ++p) {
    const int ahead = t + kPrefetchPages * kv.page_size;
    if (ahead < n_tokens) PrefetchRows(rows(ahead, p + kPrefetchPages));
    rk.score(q, nq, rows(t, p), scale, scores + t, ld);
  }
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_ATTENTION_ROWS_H_
