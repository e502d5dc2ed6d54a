// Causal multi-head attention with grouped KV heads over a paged KV cache, for prefill (many
// queries per sequence) and decode (one query per sequence) alike.
//
// Layout: page p of a sequence's keys holds [n_kv_heads, page_size, head_dim] floats starting at
// kv.k + kv.pages[p] · kv.page_stride; values likewise from kv.v. Token t lives in page t /
// page_size, slot t % page_size. Query i of a sequence sits at position start_pos + i and attends
// to tokens [0, start_pos + i] (their K/V must already be in the cache); query head h reads KV head
// h / (n_heads / n_kv_heads). Softmax scale 1/√head_dim, fp32 throughout.
#ifndef PDSERVE_KERNELS_ATTENTION_H_
#define PDSERVE_KERNELS_ATTENTION_H_

#include <cstdint>
#include <span>

#include "core/base/thread_pool.h"

namespace pdserve::kernels {

struct PagedKvView {
  const float* k = nullptr;
  const float* v = nullptr;
  const int32_t* pages = nullptr;
  int page_size = 0;
  int64_t page_stride = 0;  // floats between consecutive pages
};

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;
};

struct AttentionSequence {
  const float* q = nullptr;  // [n_queries, n_heads, head_dim], rows q_row_stride floats apart
  int64_t q_row_stride = 0;  // 0 = packed (n_heads · head_dim)
  float* out = nullptr;      // [n_queries, n_heads, head_dim]
  int n_queries = 0;
  int start_pos = 0;
  PagedKvView kv;
};

// Floats of workspace Attention needs for `num_threads` threads and contexts up to `max_context`.
size_t AttentionWorkspaceFloats(const AttentionShape& shape, int num_threads, int max_context);

// Splits the work across the pool: sequences with many queries (prefill) by (head, block of 64
// queries), each block two SGEMMs (scores over the keys it sees, then values); others by
// (head, query). Requires a workspace of AttentionWorkspaceFloats(shape, pool.size(), C) floats
// where C bounds every start_pos + n_queries. Does not allocate.
void Attention(ThreadPool& pool, const AttentionShape& shape,
               std::span<const AttentionSequence> sequences, std::span<float> workspace);

// The specification: one sequence, scalar loops.
void AttentionReference(const AttentionShape& shape, const AttentionSequence& sequence);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_ATTENTION_H_
