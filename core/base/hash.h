// Non-cryptographic 64-bit hashes: they detect corruption and mismatched artifacts, not tampering.
//   Fnv1a64 — content hashes of calibration files and model weights (byte at a time; simple).
//   Xxh64   — checksums of KV pages, which sit on the transfer path (xxHash64, ~8 bytes a cycle).
#ifndef PDSERVE_CORE_BASE_HASH_H_
#define PDSERVE_CORE_BASE_HASH_H_

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
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

namespace hash_internal {

inline constexpr uint64_t kXxPrime1 = 0x9E3779B185EBCA87ULL;
inline constexpr uint64_t kXxPrime2 = 0xC2B2AE3D27D4EB4FULL;
inline constexpr uint64_t kXxPrime3 = 0x165667B19E3779F9ULL;
inline constexpr uint64_t kXxPrime4 = 0x85EBCA77C2B2AE63ULL;
inline constexpr uint64_t kXxPrime5 = 0x27D4EB2F165667C5ULL;

template <typename T>
T LoadLittle(const uint8_t* p) {  // x86-64 only: the project requires it
  T value;
  std::memcpy(&value, p, sizeof(value));
  return value;
}

inline uint64_t XxRound(uint64_t acc, uint64_t input) {
  return std::rotl(acc + input * kXxPrime2, 31) * kXxPrime1;
}

inline uint64_t XxMerge(uint64_t acc, uint64_t lane) {
  return (acc ^ XxRound(0, lane)) * kXxPrime1 + kXxPrime4;
}

}  // namespace hash_internal

// xxHash64 (XXH64) of `bytes` with `seed`: equal to the reference implementation's
// XXH64(bytes, size, seed). Chain spans with the previous hash as the next seed.
inline uint64_t Xxh64(std::span<const uint8_t> bytes, uint64_t seed = 0) {
  using namespace hash_internal;
  const uint8_t* p = bytes.data();
  const uint8_t* const end = p + bytes.size();
  uint64_t h;
  if (bytes.size() >= 32) {
    uint64_t v[4] = {seed + kXxPrime1 + kXxPrime2, seed + kXxPrime2, seed, seed - kXxPrime1};
    for (; end - p >= 32; p += 32) {
      for (int lane = 0; lane < 4; ++lane) {
        v[lane] = XxRound(v[lane], LoadLittle<uint64_t>(p + 8 * lane));
      }
    }
    h = std::rotl(v[0], 1) + std::rotl(v[1], 7) + std::rotl(v[2], 12) + std::rotl(v[3], 18);
    for (uint64_t lane : v) h = XxMerge(h, lane);
  } else {
    h = seed + kXxPrime5;
  }
  h += bytes.size();
  for (; end - p >= 8; p += 8) {
    h = std::rotl(h ^ XxRound(0, LoadLittle<uint64_t>(p)), 27) * kXxPrime1 + kXxPrime4;
  }
  if (end - p >= 4) {
    h = std::rotl(h ^ (LoadLittle<uint32_t>(p) * kXxPrime1), 23) * kXxPrime2 + kXxPrime3;
    p += 4;
  }
  for (; p < end; ++p) h = std::rotl(h ^ (*p * kXxPrime5), 11) * kXxPrime1;
  h ^= h >> 33;
  h *= kXxPrime2;
  h ^= h >> 29;
  h *= kXxPrime3;
  return h ^ (h >> 32);
}

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_HASH_H_
