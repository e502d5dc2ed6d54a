#include "services/common/bearer_keys.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

std::string_view Trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  return text.substr(begin, text.find_last_not_of(" \t\r\n") + 1 - begin);
}

}  // namespace

BearerKeys::Digest BearerKeys::Sha256(std::string_view text) {
  Digest digest{};
  unsigned int size = 0;
  EVP_Digest(text.data(), text.size(), digest.data(), &size, EVP_sha256(), nullptr);
  return digest;
}

absl::StatusOr<BearerKeys> BearerKeys::Create(const std::vector<std::string>& keys) {
  BearerKeys result;
  for (size_t i = 0; i < keys.size(); ++i) {
    const std::string& key = keys[i];
    bool printable = true;
    for (char c : key) printable = printable && c > ' ' && c < 0x7f;
    if (key.size() < 8 || key.size() > 512 || !printable) {
      return absl::InvalidArgumentError(
          absl::StrCat("key ", i + 1, " of ", keys.size(),
                       " is not 8 to 512 printable ASCII characters without spaces"));
    }
    const Digest digest = Sha256(key);
    for (const Digest& other : result.digests_) {
      if (other == digest) {
        return absl::InvalidArgumentError(
            absl::StrCat("key ", i + 1, " of ", keys.size(), " repeats an earlier one"));
      }
    }
    result.digests_.push_back(digest);
  }
  return result;
}

absl::StatusOr<BearerKeys> BearerKeys::FromFlags(const std::vector<std::string>& keys,
                                                 const std::string& path) {
  std::vector<std::string> all;
  if (!path.empty()) {
    std::ifstream in(path);
    if (!in) return absl::NotFoundError(absl::StrCat("cannot read the key file '", path, "'"));
    for (std::string line; std::getline(in, line);) {
      const std::string_view key = Trim(line);
      if (!key.empty() && key[0] != '#') all.emplace_back(key);
    }
    if (all.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("the key file '", path, "' holds no key"));
    }
  }
  all.insert(all.end(), keys.begin(), keys.end());
  absl::StatusOr<BearerKeys> result = Create(all);
  if (!result.ok() && !path.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(result.status().message(), " (keys from '", path, "' first)"));
  }
  return result;
}

std::optional<int> BearerKeys::Match(std::string_view authorization) const {
  // The scheme is case-insensitive (RFC 9110); one or more spaces follow it.
  constexpr std::string_view kScheme = "bearer ";
  if (authorization.size() < kScheme.size()) return std::nullopt;
  for (size_t i = 0; i < kScheme.size(); ++i) {
    if (absl::ascii_tolower(static_cast<unsigned char>(authorization[i])) != kScheme[i]) {
      return std::nullopt;
    }
  }
  const Digest presented = Sha256(Trim(authorization.substr(kScheme.size())));
  int match = -1;
  for (size_t i = 0; i < digests_.size(); ++i) {
    // Every digest is compared: the time taken does not depend on which one matches.
    const bool equal = CRYPTO_memcmp(presented.data(), digests_[i].data(), presented.size()) == 0;
    match = equal ? static_cast<int>(i) : match;
  }
  if (match < 0) return std::nullopt;
  return match;
}

}  // namespace pdserve
