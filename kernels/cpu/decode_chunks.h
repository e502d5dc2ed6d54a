// Decode attention split by tokens (flash-decoding), shared by attention.cc and
// kcache_attention.cc. A decode row's tokens fall into chunks of whole pages, each but the last
// DecodeChunkTokens long. Per chunk c and query head, an unnormalized softmax over the chunk's
// scores gives its max m_c and sum l_c (ExpInPlace, softmax.h) and o_c = Σ_t e^(s_t − m_c)·v_t;
// the chunks then merge into out = Σ_c e^(m_c − M)·o_c / Σ_c e^(m_c − M)·l_c, M = max_c m_c. The
// chunks depend on a row's token count and page size only, never on the threads or on the other
// rows of a batch, so neither changes a row's result. Internal to kernels/cpu.
#ifndef PDSERVE_KERNELS_CPU_DECODE_CHUNKS_H_
#define PDSERVE_KERNELS_CPU_DECODE_CHUNKS_H_

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "kernels/cpu/softmax.h"

namespace pdserve::kernels {

// Tokens a chunk holds at least (the last chunk of a row excepted).
inline constexpr int kDecodeChunkTokens = 1024;

// Tokens of a chunk: the fewest whole pages that hold kDecodeChunkTokens.
inline int DecodeChunkTokens(int page_size) {
  return (kDecodeChunkTokens + page_size - 1) / page_size * page_size;
}

// Chunks of a row that attends to n_tokens ≥ 1 tokens.
inline int DecodeChunks(int n_tokens, int page_size) {
  const int chunk = DecodeChunkTokens(page_size);
  return (n_tokens + chunk - 1) / chunk;
}

// Chunks of rows of up to max_context tokens, whatever their page size.
inline int MaxDecodeChunks(int max_context) {
  return (max_context + kDecodeChunkTokens - 1) / kDecodeChunkTokens;
}

// One chunk's partial result for one query head, kept between the task that computes it and the
// merge: [m_c, l_c, o_c[0, dv)], dv ≤ head_dim.
inline constexpr int kPartialHeader = 2;
inline int64_t PartialFloats(int head_dim) { return kPartialHeader + int64_t{head_dim}; }

// The merged max M = max_c m_c and sum L = Σ_c e^(m_c − M)·l_c of `chunks` ≥ 1 partials, chunk
// c's at partials + c·stride: chunk c's softmax weights scale by e^(m_c − M)/L.
inline ExpStats MergedStats(const float* partials, int64_t stride, int chunks) {
  ExpStats merged{partials[0], 0.0f};
  for (int c = 1; c < chunks; ++c) merged.max = std::max(merged.max, partials[c * stride]);
  for (int c = 0; c < chunks; ++c) {
    merged.sum += std::exp(partials[c * stride] - merged.max) * partials[c * stride + 1];
  }
  return merged;
}

// out[0, dv) = Σ_c e^(m_c − M)·o_c / L (MergedStats) over `chunks` ≥ 1 partials, chunk c's at
// partials + c·stride. With one chunk this is o_0 times 1/l_0, bit for bit.
inline void MergeChunks(const float* partials, int64_t stride, int chunks, int dv, float* out) {
  const ExpStats merged = MergedStats(partials, stride, chunks);
  const float inv = 1.0f / merged.sum;
  for (int c = 0; c < chunks; ++c) {
    const float* p = partials + c * stride;
    const float w = std::exp(p[0] - merged.max) * inv;
    const float* o = p + kPartialHeader;
    if (c == 0) {
      for (int d = 0; d < dv; ++d) out[d] = w * o[d];
    } else {
      for (int d = 0; d < dv; ++d) out[d] += w * o[d];
    }
  }
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_DECODE_CHUNKS_H_
