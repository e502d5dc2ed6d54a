// Internal: the fused row kernels of decode attention (one query per sequence and head), one set
// per instruction-set level. They read one KV head's rows of one page in place — f32, f16 or FP8
// E4M3 codes — and widen them in registers, with no dequantized copy: f16 by F16C, and E4M3 too,
// since an E4M3 code's bits moved into an f16 are its value · 2^-8, subnormals included. The
// row's scale (and the 2^8) is applied once per row, to the score or to the weight. Every query
// head of a GQA group shares each row load. fp32 arithmetic throughout. NaN codes (0x7F/0xFF),
// which widen to finite values, are honoured without a second pass over the codes: every load
// notes what it read, and where a NaN code was among them the scores of its row and the outputs of
// its column are set to NaN, as the exact sums would be.
#ifndef PDSERVE_KERNELS_CPU_DECODE_ROWS_H_
#define PDSERVE_KERNELS_CPU_DECODE_ROWS_H_

#include <cstdint>

#include "kernels/kv_view.h"

namespace pdserve::kernels {

enum class RowFormat : uint8_t { kF32, kF16, kE4M3 };

// One KV head's rows in one page: `count` rows of `dim` elements, `dim` elements apart; f32, f16,
// or E4M3 codes whose value is E4M3ToFloat(code) · scales[r · scale_step].
struct PageRows {
  const uint8_t* data = nullptr;
  int count = 0;
  int dim = 0;
  RowFormat format = RowFormat::kF32;
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
  rows.format = s.e4m3 ? RowFormat::kE4M3 : s.f16 ? RowFormat::kF16 : RowFormat::kF32;
  if (s.e4m3) {
    rows.scales = reinterpret_cast<const float*>(page) + int64_t{g} * s.scales_per_head;
    rows.scale_step = s.scales_per_head == 1 ? 0 : 1;
  }
  return rows;
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
