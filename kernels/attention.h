// Causal multi-head attention with grouped KV heads over a paged KV cache, for prefill (many
// queries per sequence) and decode (one query per sequence) alike.
//
// The cache is read through a PagedKvView (kernels/kv_view.h): f32 or FP8 rows, and per KV head
// widths that may differ from the model's head dim (ZACK ranks; K and V widths independent). Query
// i of a sequence sits at position start_pos + i and attends to tokens [0, start_pos + i] (their
// K/V must already be in the cache); query head h reads KV head g = h / (n_heads / n_kv_heads),
// its query row is k.dim(g) floats and its output row v.dim(g) floats. The softmax scale is
// 1/√head_dim of the model, whatever the stored widths; fp32 arithmetic throughout.
#ifndef PDSERVE_KERNELS_ATTENTION_H_
#define PDSERVE_KERNELS_ATTENTION_H_

#include <cstdint>
#include <span>

#include "core/base/thread_pool.h"
#include "kernels/attention_shape.h"

namespace pdserve::kernels {

// Sequences with at most this many queries take the decode path below (the others prefill's).
inline constexpr int kAttentionDecodeMaxQueries = 15;

// Floats of workspace Attention needs for `num_threads` threads, contexts up to `max_context`,
// pages of `page_size` tokens and at most `max_decode_queries` queries in all, in one call, of
// sequences on the decode path.
size_t AttentionWorkspaceFloats(const AttentionShape& shape, int num_threads, int max_context,
                                int page_size, int max_decode_queries);
// The same for exactly these sequences.
size_t AttentionWorkspaceFloats(const AttentionShape& shape, int num_threads,
                                std::span<const AttentionSequence> sequences);

// Splits the work across the pool: sequences with more than kAttentionDecodeMaxQueries queries
// (prefill) by (head, block of 64 queries), each block two SGEMMs (scores over the keys it sees,
// then values); others (decode) by (query, chunk of about a thousand tokens, contiguous range of KV
// heads: one range when there are enough chunks for the threads), sweeping each page's rows of the
// range once through the fused f32/f16/FP8 row kernels (kernels/cpu/decode_rows.h), every query
// head of a group sharing each row; a query's chunks are merged as in flash-decoding
// (kernels/cpu/decode_chunks.h). A query's result depends on its sequence alone, not on the threads
// or the other sequences. Requires a workspace of AttentionWorkspaceFloats(shape, pool.size(), C,
// P, Q) floats where C bounds every start_pos + n_queries, P every page size and Q the sum of the
// n_queries that are at most kAttentionDecodeMaxQueries. Does not allocate.
void Attention(ThreadPool& pool, const AttentionShape& shape,
               std::span<const AttentionSequence> sequences, std::span<float> workspace);

// The specification: one sequence, scalar loops.
void AttentionReference(const AttentionShape& shape, const AttentionSequence& sequence);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_ATTENTION_H_
