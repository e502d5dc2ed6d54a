#include "core/kv/prefix_hash.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

namespace pdserve {
namespace {

PrefixCacheIdentity Identity() {
  return {.model = "llama 0123",
          .kv_layout = "swiftkv 4; ...",
          .calibration_hash = 7,
          .page_size = 4,
          .page_format_version = 1};
}

std::vector<int32_t> Tokens(int n, int32_t first = 1) {
  std::vector<int32_t> tokens(n);
  std::iota(tokens.begin(), tokens.end(), first);
  return tokens;
}

TEST(PrefixHashTest, OneNamePerFullPageOnly) {
  const PrefixPageHash root = PrefixRootHash(Identity());
  EXPECT_EQ(PrefixPageHashes(root, Tokens(11), 4).size(), 2u);  // the partial last page has none
  EXPECT_EQ(PrefixPageHashes(root, Tokens(12), 4).size(), 3u);
  EXPECT_TRUE(PrefixPageHashes(root, Tokens(3), 4).empty());
}

TEST(PrefixHashTest, NamedTokensAreTheWholePagesBeforeTheLastToken) {
  EXPECT_EQ(NamedPrefixTokens(13, 4), 12);
  EXPECT_EQ(NamedPrefixTokens(12, 4), 8);  // the last token's page is computed
  EXPECT_EQ(NamedPrefixTokens(4, 4), 0);
  EXPECT_EQ(NamedPrefixTokens(0, 4), 0);
}

TEST(PrefixHashTest, SharedPrefixesShareNamesUntilTheFirstDifference) {
  const PrefixPageHash root = PrefixRootHash(Identity());
  std::vector<int32_t> a = Tokens(16), b = a;
  b[9] = 1000;  // page 2
  const std::vector<PrefixPageHash> ha = PrefixPageHashes(root, a, 4);
  const std::vector<PrefixPageHash> hb = PrefixPageHashes(root, b, 4);
  EXPECT_EQ(ha[0], hb[0]);
  EXPECT_EQ(ha[1], hb[1]);
  EXPECT_NE(ha[2], hb[2]);
  EXPECT_NE(ha[3], hb[3]);  // chained: a difference propagates to every later page
  // The same tokens at another place in the prompt are another page.
  EXPECT_NE(PrefixPageHashes(root, Tokens(8, 5), 4)[1], ha[1]);
  EXPECT_EQ(PrefixPageHashes(root, Tokens(8, 5), 4)[0], PrefixPageHashes(root, Tokens(4, 5), 4)[0]);
}

TEST(PrefixHashTest, EveryIdentityFieldChangesEveryName) {
  const std::vector<int32_t> tokens = Tokens(8);
  const std::vector<PrefixPageHash> base = PrefixPageHashes(PrefixRootHash(Identity()), tokens, 4);
  std::vector<PrefixCacheIdentity> others(5, Identity());
  others[0].model = "llama 0124";
  others[1].kv_layout = "swiftkv 5; ...";
  others[2].calibration_hash = 8;
  others[3].page_size = 8;
  others[4].page_format_version = 2;
  for (const PrefixCacheIdentity& other : others) {
    const std::vector<PrefixPageHash> hashes = PrefixPageHashes(PrefixRootHash(other), tokens, 4);
    EXPECT_NE(hashes[0], base[0]);
    EXPECT_NE(hashes[1], base[1]);
  }
  // Field boundaries are part of the serialization: moving a character between fields matters.
  PrefixCacheIdentity shifted = Identity();
  shifted.model = "llama 012";
  shifted.kv_layout = "3swiftkv 4; ...";
  EXPECT_NE(PrefixRootHash(shifted), PrefixRootHash(Identity()));
}

TEST(PrefixHashTest, MatchesAnIndependentSha256) {
  // Python's hashlib over the serialization the header documents:
  //   root = sha256(b"pdserve prefix cache" + u64(len) + b"llama 0123" + u64(len)
  //                 + b"swiftkv 4; ..." + u64(7) + u64(4) + u64(1))[:16]
  //   page0 = sha256(root + i32le(1, 2, 3, 4))[:16]
  const PrefixPageHash root = PrefixRootHash(Identity());
  EXPECT_EQ(PrefixHashHex(root), "3ebc3f3d8ea6ff85bfca4f07f1244b47");
  EXPECT_EQ(PrefixHashHex(PrefixPageHashes(root, Tokens(4), 4)[0]),
            "5dd61ec5078fdc1216ff8337ea0daab6");
}

}  // namespace
}  // namespace pdserve
