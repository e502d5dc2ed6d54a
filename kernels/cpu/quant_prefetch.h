// Internal: the software prefetch of quantized weights that stream from memory (quant_dot.h's
// kQuantPrefetchBytes), shared by the int8 tiles of every ISA. ISA-neutral (prefetcht0), and always
// inlined, so that no out-of-line copy is compiled for one ISA and called from another.
#ifndef PDSERVE_KERNELS_CPU_QUANT_PREFETCH_H_
#define PDSERVE_KERNELS_CPU_QUANT_PREFETCH_H_

#include <cstddef>
#include <cstdint>

#include "kernels/cpu/quant_dot.h"

namespace pdserve::kernels {

// Prefetches into L1 every cache line of the kBytes bytes from p, kQuantPrefetchBytes ahead.
template <size_t kBytes>
[[gnu::always_inline]] inline void PrefetchAhead(const uint8_t* p) {
  for (size_t i = 0; i < kBytes; i += 64) __builtin_prefetch(p + kQuantPrefetchBytes + i, 0, 3);
}

// PrefetchAhead of block k's share of a group of kGroupBlocks blocks taking kGroupBytes at
// `group`: a super-block's lines asked for a block at a time, not all at its start.
template <size_t kGroupBytes, int kGroupBlocks>
[[gnu::always_inline]] inline void PrefetchBlockShare(const uint8_t* group, int k) {
  constexpr size_t kShare = kGroupBytes / kGroupBlocks;
  PrefetchAhead<kShare>(group + k * kShare);
}

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_QUANT_PREFETCH_H_
