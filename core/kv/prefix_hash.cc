#include "core/kv/prefix_hash.h"

#include <openssl/evp.h>

#include <cstdlib>
#include <cstring>

#include "absl/strings/escaping.h"

namespace pdserve {
namespace {

constexpr char kDomain[] = "pdserve prefix cache";

void AppendU64(std::string& out, uint64_t value) {
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(value >> (8 * i)));
}

void AppendString(std::string& out, const std::string& value) {
  AppendU64(out, value.size());
  out += value;
}

PrefixPageHash Sha256Prefix(const std::string& bytes) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int length = 0;
  // SHA-256 is always available in OpenSSL; a failure here is a broken library, not bad input.
  if (EVP_Digest(bytes.data(), bytes.size(), digest, &length, EVP_sha256(), nullptr) != 1 ||
      length < sizeof(PrefixPageHash)) {
    std::abort();
  }
  PrefixPageHash hash;
  std::memcpy(hash.data(), digest, hash.size());
  return hash;
}

}  // namespace

PrefixPageHash PrefixRootHash(const PrefixCacheIdentity& identity) {
  std::string bytes(kDomain);
  AppendString(bytes, identity.model);
  AppendString(bytes, identity.kv_layout);
  AppendU64(bytes, identity.calibration_hash);
  AppendU64(bytes, static_cast<uint64_t>(static_cast<uint32_t>(identity.page_size)));
  AppendU64(bytes, identity.page_format_version);
  return Sha256Prefix(bytes);
}

std::vector<PrefixPageHash> PrefixPageHashes(const PrefixPageHash& root,
                                             std::span<const int32_t> tokens, int page_size) {
  std::vector<PrefixPageHash> hashes;
  PrefixPageHash parent = root;
  std::string bytes;
  for (size_t start = 0; start + page_size <= tokens.size(); start += page_size) {
    bytes.assign(reinterpret_cast<const char*>(parent.data()), parent.size());
    for (int i = 0; i < page_size; ++i) {
      const uint32_t token = static_cast<uint32_t>(tokens[start + i]);
      for (int b = 0; b < 4; ++b) bytes.push_back(static_cast<char>(token >> (8 * b)));
    }
    parent = Sha256Prefix(bytes);
    hashes.push_back(parent);
  }
  return hashes;
}

std::string PrefixHashHex(const PrefixPageHash& hash) {
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(hash.data()), hash.size()));
}

}  // namespace pdserve
