// Internal: the fused row kernels of decode attention (one query per sequence and head), one set
// per instruction-set level. They read one KV head's rows of one page in place, f32 or FP8 E4M3
// codes: codes are widened in registers (E4M3 is an f16 with a narrower exponent: its bits moved
// into an f16 are the value · 2^-8, subnormals included, and F16C widens those exactly), and the
// row's scale (and the 2^8) is applied once per row, to the score or to the weight. Every query
// head of a GQA group shares each row load. fp32 arithmetic throughout; NaN codes (0x7F/0xFF) are
// honoured by a scalar path for the page that holds one.
#ifndef PDSERVE_KERNELS_CPU_DECODE_ROWS_H_
#define PDSERVE_KERNELS_CPU_DECODE_ROWS_H_

#include <immintrin.h>

#include <cstdint>

#include "kernels/kv_view.h"

namespace pdserve::kernels {

// One KV head's rows in one page: `count` rows of `dim` elements, `dim` elements apart; f32, or
// E4M3 codes whose value is E4M3ToFloat(code) · scales[r · scale_step].
struct PageRows {
  const uint8_t* data = nullptr;
  int count = 0;
  int dim = 0;
  bool e4m3 = false;
  const float* scales = nullptr;
  int scale_step = 0;  // 1: a scale per row; 0: one per page
};

// Rows [0, count) of KV head g in the page whose section starts at `page` (laid out as `s`).
inline PageRows PageRowsOf(const KvSectionView& s, const uint8_t* page, int page_size, int g,
                           int count) {
  PageRows rows;
  rows.data = page + s.head_offset(g, page_size);
  rows.count = count;
  rows.dim = s.dim(g);
  rows.e4m3 = s.e4m3;
  if (s.e4m3) {
    rows.scales = reinterpret_cast<const float*>(page) + int64_t{g} * s.scales_per_head;
    rows.scale_step = s.scales_per_head == 1 ? 0 : 1;
  }
  return rows;
}

// Asks for the rows (and their scales) to be brought into cache: a KV head's rows of one page are
// a short run the hardware prefetchers do not follow from page to page, so the decode loops ask
// for the next page's while they work on this one.
inline void PrefetchRows(const PageRows& rows) {
  const int64_t bytes = int64_t{rows.count} * rows.dim * (rows.e4m3 ? 1 : 4);
  for (int64_t b = 0; b < bytes; b += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(rows.data) + b, _MM_HINT_T1);
  }
  if (rows.scales != nullptr) _mm_prefetch(reinterpret_cast<const char*>(rows.scales), _MM_HINT_T0);
}

// Queries are `nq` rows of rows.dim floats (q[j]); weights and scores are nq rows `ld` floats
// apart. Any nq ≥ 1 and any dim ≥ 0 work.
struct DecodeRowKernels {
  // scores[j·ld + r] = (q[j] · row r) · scale, for j < nq and r < rows.count.
  void (*score)(const float* const* q, int nq, const PageRows& rows, float scale, float* scores,
                int64_t ld);
  // out[j][0, rows.dim) += Σ_r w[j·ld + r] · row r, for j < nq.
  void (*accumulate)(const float* w, int64_t ld, int nq, const PageRows& rows, float* const* out);
};

namespace avx2 {
extern const DecodeRowKernels kDecodeRows;
}  // namespace avx2
namespace avx512 {
extern const DecodeRowKernels kDecodeRows;
}  // namespace avx512

// The set for ActiveSimdLevel().
const DecodeRowKernels& ActiveDecodeRows();

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_DECODE_ROWS_H_
