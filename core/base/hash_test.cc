#include "core/base/hash.h"

#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace pdserve {
namespace {

// The bytes the vectors below were made from: byte i is (131·i + 7) mod 256.
std::vector<uint8_t> Pattern(size_t n) {
  std::vector<uint8_t> bytes(n);
  for (size_t i = 0; i < n; ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  return bytes;
}

// Made with Debian's python3-xxhash 3.2.0 (the reference C library): for n in the lengths,
// xxhash.xxh64(pattern[:n], seed).intdigest(). The lengths cover every tail path: < 4, 4..7,
// 8-byte words, below and above one 32-byte stripe.
struct Vector {
  size_t length;
  uint64_t seed0;
  uint64_t seeded;
};
constexpr uint64_t kSeed = 0x123456789abcdef0ULL;
constexpr Vector kVectors[] = {
    {0, 0xef46db3751d8e999ULL, 0x7fef5b0c316777edULL},
    {1, 0xa96c7f0ce858bbb7ULL, 0x424f926440206cd7ULL},
    {3, 0xbed43740ee6332bbULL, 0xbdea7fa05a78da18ULL},
    {4, 0xfa212ae44b3bb23dULL, 0x8aaff762d58b0803ULL},
    {7, 0x2744460dd675d2c0ULL, 0xbeb2f5c5fa10c2d1ULL},
    {8, 0x994b676b71ce94ddULL, 0x233a20d293e65061ULL},
    {9, 0x572b84c18b983af8ULL, 0xf0b6b56654700a89ULL},
    {31, 0x6711d55e306b5d8fULL, 0x19bf00be8b0fa95eULL},
    {32, 0x07f7b8e3bc5d6e25ULL, 0x9153b491e34e7f66ULL},
    {33, 0x09f85eeb4e1cbe9fULL, 0xb0ea6bbfd06a372eULL},
    {63, 0xb7c9968c066cb6a5ULL, 0xfa28237ed9d167a2ULL},
    {64, 0x50d4159a0411632eULL, 0xa4445d644fa3c5adULL},
    {100, 0x9ddada11d3dc2d8fULL, 0xac81bda7d3fcf811ULL},
    {200, 0x3b8cc7eaa63f107eULL, 0xb24eaef1acb887e8ULL},
};

TEST(Xxh64Test, MatchesTheReferenceImplementation) {
  const std::vector<uint8_t> pattern = Pattern(200);
  for (const Vector& v : kVectors) {
    const std::span<const uint8_t> bytes(pattern.data(), v.length);
    EXPECT_EQ(Xxh64(bytes), v.seed0) << "length " << v.length;
    EXPECT_EQ(Xxh64(bytes, kSeed), v.seeded) << "length " << v.length;
  }
}

TEST(Xxh64Test, EveryFlippedBitChangesTheHash) {
  std::vector<uint8_t> bytes = Pattern(77);
  const uint64_t clean = Xxh64(bytes);
  for (size_t i = 0; i < bytes.size() * 8; ++i) {
    bytes[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
    EXPECT_NE(Xxh64(bytes), clean) << "bit " << i;
    bytes[i / 8] ^= static_cast<uint8_t>(1u << (i % 8));
  }
}

TEST(Fnv1a64Test, ChainsAcrossSpans) {
  const std::vector<uint8_t> bytes = Pattern(50);
  const std::span<const uint8_t> all(bytes);
  EXPECT_EQ(Fnv1a64(all.subspan(20), Fnv1a64(all.first(20))), Fnv1a64(all));
  EXPECT_EQ(Fnv1a64({}), kFnv1a64Seed);
}

}  // namespace
}  // namespace pdserve
