// Writing and reading one token's row of one KV head in a page section laid out by
// KvSectionLayout (core/kv/kv_layout.h).
//
// f32 sections copy; f16 sections round to nearest even, saturating at ±65504. FP8 per-token
// sections quantize the row with scale amax/448 (its own slot's scale). FP8 per-page sections share
// one scale per head across the page: writing slot 0 starts the page afresh, and so does any row
// while every earlier row is all zeros; a later row whose amax exceeds what the scale covers raises
// it by the smallest power of two that covers it, and the rows already written in slots [0, slot)
// are re-encoded with the new scale (exactly, but for values that fall into its subnormal range;
// the scale only grows and every stored row stays in range). Rows of one page must be written in
// slot order by one thread at a time; different pages are independent.
#ifndef PDSERVE_CORE_KV_KV_ROW_CODEC_H_
#define PDSERVE_CORE_KV_KV_ROW_CODEC_H_

#include <cstdint>
#include <span>

#include "absl/functional/function_ref.h"
#include "core/kv/kv_layout.h"

namespace pdserve {

// row: layout.dim(head) floats.
void WriteKvRow(const KvSectionLayout& layout, uint8_t* section, int head, int slot,
                const float* row);

// row: layout.dim(head) floats, dequantized.
void ReadKvRow(const KvSectionLayout& layout, const uint8_t* section, int head, int slot,
               float* row);

// Token retention's compaction of one section of a sequence: moves the row of token kept[i] of
// every head to row i, so that the sequence's first kept.size() rows hold the kept tokens in
// order (rows beyond hold what they held; under per-page FP8 they are undefined, the page's
// scale having changed). Token t lives in slot t % page_size of page
// pages[t / page_size], whose section page_bytes(page id) returns. Requires kept ascending.
// f32, f16 and per-token FP8 rows move as bytes (with their scales): exact. FP8 per-page rows
// cannot keep their codes under another page's scale: every kept row is read back (dequantized)
// and written again in slot order, so each is quantized once more, under its new page's scale.
void CompactKvRows(const KvSectionLayout& layout, std::span<const int32_t> pages,
                   std::span<const int> kept, absl::FunctionRef<uint8_t*(int32_t)> page_bytes);

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_KV_ROW_CODEC_H_
