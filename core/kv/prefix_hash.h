// Content addresses of prompt KV pages, for the prefix cache (DESIGN §4 "KV pages"): page i of a
// prompt (tokens [i·P, (i+1)·P), P the page size) is named by
//
//   hash_i = SHA-256(hash_{i-1} ‖ its P token ids, each i32 little endian)[0:16],
//   hash_{-1} = SHA-256("pdserve prefix cache" ‖ the identity)[0:16],
//
// so a page's name covers every token before it and everything besides tokens that decides its
// bytes: the model, the KV plan (SwiftKV, AcrossKV, ZACK ranks, FP8 — every cache layer's layout),
// the calibration, the page size and the page format version. Pages of another model or profile
// can never share a name; a partial last page has none (it is never shared). SHA-256, not a fast
// hash: names come from users' prompts, and a collision would hand one user's KV to another.
#ifndef PDSERVE_CORE_KV_PREFIX_HASH_H_
#define PDSERVE_CORE_KV_PREFIX_HASH_H_

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace pdserve {

using PrefixPageHash = std::array<uint8_t, 16>;

// Everything besides the tokens that decides a page's bytes. Each string is hashed with its length,
// so no two different identities serialize alike.
struct PrefixCacheIdentity {
  std::string model;      // the model's weights as loaded (WeightsFingerprint) and their dtype
  std::string kv_layout;  // what the KV plan stores per cache layer (DescribeKvPlanStorage)
  uint64_t calibration_hash = 0;
  int32_t page_size = 0;
  uint32_t page_format_version = 0;
};

// The leading tokens of a prompt of `prompt_tokens` tokens that get names: its whole pages before
// its last token (at least that token is computed, for its logits). Requires page_size ≥ 1.
inline int64_t NamedPrefixTokens(int64_t prompt_tokens, int page_size) {
  return prompt_tokens < 1 ? 0 : (prompt_tokens - 1) / page_size * page_size;
}

// hash_{-1} for `identity`.
PrefixPageHash PrefixRootHash(const PrefixCacheIdentity& identity);

// The names of the full pages of `tokens` (⌊tokens / page_size⌋ of them), chained from `root`.
// Requires page_size ≥ 1.
std::vector<PrefixPageHash> PrefixPageHashes(const PrefixPageHash& root,
                                             std::span<const int32_t> tokens, int page_size);

// Lowercase hex, for logs and errors.
std::string PrefixHashHex(const PrefixPageHash& hash);

}  // namespace pdserve

#endif  // PDSERVE_CORE_KV_PREFIX_HASH_H_
