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

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_QUANT_PREFETCH_H_
