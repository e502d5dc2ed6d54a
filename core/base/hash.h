// Fnv1a64: the 64-bit FNV-1a hash, used for content hashes of calibration files and checksums of
// KV pages. Not cryptographic: it detects corruption and mismatched artifacts, not tampering.
#ifndef PDSERVE_CORE_BASE_HASH_H_
#define PDSERVE_CORE_BASE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <span>

namespace pdserve {

inline constexpr uint64_t kFnv1a64Seed = 0xcbf29ce484222325ULL;

// Continues a hash over `bytes`; start from kFnv1a64Seed. Fnv1a64(b, Fnv1a64(a)) == hash of a‖b.
inline uint64_t Fnv1a64(std::span<const uint8_t> bytes, uint64_t hash = kFnv1a64Seed) {
  for (uint8_t byte : bytes) {
    hash ^= byte;
    hash *= 0x100000001b3ULL;
  }
  return hash;
}

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_HASH_H_
