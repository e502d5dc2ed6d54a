// calibration: round trips (bytes and files, with and without each block), the content hash, and
// strict parsing of corrupt bytes: every byte flip, every truncation, foreign versions, trailing
// bytes, hostile counts behind a valid hash; ValidateCalibration catches each inconsistency.
#include "core/calib/calibration.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "core/base/hash.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

constexpr size_t kHeaderBytes = 32;

// L = 4 layers, 2 KV heads of head_dim 4 (kv_dim 8), dim 8.
CalibrationModel SmallModel() {
  return {.dim = 8, .n_layers = 4, .n_heads = 4, .n_kv_heads = 2, .head_dim = 4};
}

template <typename T>
std::vector<T> Values(size_t n, std::mt19937& rng) {
  std::uniform_real_distribution<double> uniform(-1.0, 1.0);
  std::vector<T> out(n);
  for (T& x : out) x = static_cast<T>(uniform(rng));
  return out;
}

// SwiftKV from layer 2 with groups of 2: one leader, 3 cache layers.
SwiftKvRecovery SmallSwiftKv(const CalibrationModel& m, std::mt19937& rng) {
  SwiftKvRecovery s;
  s.layer = 2;
  s.group = 2;
  s.ridge_lambda = 0.125;
  s.norm = Values<float>(m.dim, rng);
  const size_t weights = size_t{1} * m.n_kv_heads * m.head_dim * m.dim;
  s.wk = {Values<float>(weights, rng)};
  s.wv = {Values<float>(weights, rng)};
  s.mse_init = {0.5};
  s.mse_fit = {0.25};
  return s;
}

ZackBases SmallZack(const CalibrationModel& m, int cache_layers, std::mt19937& rng) {
  ZackBases z;
  z.removal_rate = 0.1;
  z.heads.resize(cache_layers);
  for (std::vector<ZackHeadBasis>& layer : z.heads) {
    for (int g = 0; g < m.n_kv_heads; ++g) {
      ZackHeadBasis h;
      h.qk_rank = 1 + g;
      h.vo_rank = m.head_dim - g;
      h.qk_basis = Values<float>(m.head_dim * m.head_dim, rng);
      h.vo_basis = Values<float>(m.head_dim * m.head_dim, rng);
      for (int i = 0; i < m.head_dim; ++i) {
        h.qk_eigenvalues.push_back(8.0 / (i + 1));
        h.vo_eigenvalues.push_back(4.0 - i);
      }
      layer.push_back(std::move(h));
    }
  }
  return z;
}

Calibration Small(bool swiftkv, bool zack) {
  std::mt19937 rng(42);
  Calibration c;
  c.model = SmallModel();
  c.corpus = "tinystories-valid.txt";
  c.tokens = 123456;
  if (swiftkv) c.swiftkv = SmallSwiftKv(c.model, rng);
  if (zack) c.zack = SmallZack(c.model, swiftkv ? 3 : 4, rng);
  return c;
}

// The header of `body` with a correct size and hash, then `body`.
std::string Seal(const std::string& body, uint32_t version = kCalibrationVersion) {
  std::string out = "PDSCALIB";
  const uint32_t reserved = 0;
  const uint64_t size = body.size();
  const uint64_t hash = Fnv1a64({reinterpret_cast<const uint8_t*>(body.data()), body.size()});
  out.append(reinterpret_cast<const char*>(&version), 4);
  out.append(reinterpret_cast<const char*>(&reserved), 4);
  out.append(reinterpret_cast<const char*>(&size), 8);
  out.append(reinterpret_cast<const char*>(&hash), 8);
  return out + body;
}

std::string BodyOf(const std::string& bytes) { return bytes.substr(kHeaderBytes); }

TEST(CalibrationTest, RoundTripsWithAndWithoutEachBlock) {
  for (bool swiftkv : {false, true}) {
    for (bool zack : {false, true}) {
      SCOPED_TRACE(testing::Message() << "swiftkv " << swiftkv << " zack " << zack);
      const Calibration c = Small(swiftkv, zack);
      ASSERT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c);
      const std::string bytes = SerializeCalibration(c);
      absl::StatusOr<Calibration> parsed = ParseCalibration(bytes);
      ASSERT_TRUE(parsed.ok()) << parsed.status();
      EXPECT_EQ(parsed->model, c.model);
      EXPECT_EQ(parsed->corpus, c.corpus);
      EXPECT_EQ(parsed->tokens, c.tokens);
      EXPECT_EQ(parsed->swiftkv, c.swiftkv);
      EXPECT_EQ(parsed->zack, c.zack);
      EXPECT_EQ(*parsed, c);
      EXPECT_EQ(SerializeCalibration(*parsed), bytes);
    }
  }
}

TEST(CalibrationTest, ZackBasesOfASwiftKvCheckpointRoundTrip) {
  // Calibrated on a checkpoint with l = 2, G = 2 (L = 4): 3 cache layers and no recovery.
  Calibration c = Small(false, true);
  c.zack->heads.resize(3);
  ASSERT_TRUE(ValidateCalibration(c).ok()) << ValidateCalibration(c);
  absl::StatusOr<Calibration> parsed = ParseCalibration(SerializeCalibration(c));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(*parsed, c);
}

TEST(CalibrationTest, HeaderLayout) {
  const Calibration c = Small(true, true);
  const std::string bytes = SerializeCalibration(c);
  ASSERT_GT(bytes.size(), kHeaderBytes);
  EXPECT_EQ(bytes.substr(0, 8), "PDSCALIB");
  uint32_t version, reserved;
  uint64_t size, hash;
  std::memcpy(&version, bytes.data() + 8, 4);
  std::memcpy(&reserved, bytes.data() + 12, 4);
  std::memcpy(&size, bytes.data() + 16, 8);
  std::memcpy(&hash, bytes.data() + 24, 8);
  EXPECT_EQ(version, kCalibrationVersion);
  EXPECT_EQ(reserved, 0u);
  EXPECT_EQ(size, bytes.size() - kHeaderBytes);
  EXPECT_EQ(hash, CalibrationHash(c));
  EXPECT_EQ(Seal(BodyOf(bytes)), bytes);
}

TEST(CalibrationTest, HashIsStableAndChangesWithEveryField) {
  const Calibration base = Small(true, true);
  EXPECT_EQ(CalibrationHash(base), CalibrationHash(Small(true, true)));
  // A golden value (computed independently from the documented layout): the body layout of
  // version 1 must not drift.
  EXPECT_EQ(CalibrationHash(Small(false, false)), 0xbf7e58c4933fac77ull);
  const std::vector<std::function<void(Calibration&)>> edits = {
      [](Calibration& c) { c.model.dim += 1; },
      [](Calibration& c) { c.model.n_layers += 1; },
      [](Calibration& c) { c.model.n_heads += 1; },
      [](Calibration& c) { c.model.n_kv_heads += 1; },
      [](Calibration& c) { c.model.head_dim += 1; },
      [](Calibration& c) { c.corpus += "x"; },
      [](Calibration& c) { c.tokens += 1; },
      [](Calibration& c) { c.swiftkv.reset(); },
      [](Calibration& c) { c.swiftkv->layer += 1; },
      [](Calibration& c) { c.swiftkv->group += 1; },
      [](Calibration& c) { c.swiftkv->ridge_lambda *= 2; },
      [](Calibration& c) { c.swiftkv->norm[3] += 1; },
      [](Calibration& c) { c.swiftkv->wk[0][63] += 1; },
      [](Calibration& c) { c.swiftkv->wv[0][0] += 1; },
      [](Calibration& c) { c.swiftkv->mse_init[0] += 1; },
      [](Calibration& c) { c.swiftkv->mse_fit[0] += 1; },
      [](Calibration& c) { c.zack.reset(); },
      [](Calibration& c) { c.zack->removal_rate += 0.1; },
      [](Calibration& c) { c.zack->heads[2][1].qk_rank += 1; },
      [](Calibration& c) { c.zack->heads[2][1].vo_rank -= 1; },
      [](Calibration& c) { c.zack->heads[1][0].qk_basis[5] += 1; },
      [](Calibration& c) { c.zack->heads[0][1].qk_eigenvalues[3] += 1; },
      [](Calibration& c) { c.zack->heads[0][0].vo_basis[15] += 1; },
      [](Calibration& c) { c.zack->heads[2][0].vo_eigenvalues[0] += 1; },
  };
  std::set<uint64_t> hashes = {CalibrationHash(base)};
  for (size_t i = 0; i < edits.size(); ++i) {
    Calibration c = base;
    edits[i](c);
    EXPECT_TRUE(hashes.insert(CalibrationHash(c)).second) << "edit " << i;
  }
}

TEST(CalibrationTest, EverySingleByteFlipIsRejected) {
  const std::string bytes = SerializeCalibration(Small(true, true));
  for (size_t i = 0; i < bytes.size(); ++i) {
    for (uint8_t mask : {0x01, 0x80, 0xff}) {
      std::string corrupt = bytes;
      corrupt[i] = static_cast<char>(corrupt[i] ^ mask);
      absl::StatusOr<Calibration> parsed = ParseCalibration(corrupt);
      ASSERT_FALSE(parsed.ok()) << "byte " << i << " mask " << int{mask};
      if (i >= kHeaderBytes) {
        EXPECT_EQ(parsed.status().code(), absl::StatusCode::kDataLoss) << i;
        EXPECT_THAT(parsed.status().message(), HasSubstr("content hash mismatch"));
      }
    }
  }
}

TEST(CalibrationTest, EveryTruncationIsRejected) {
  const std::string bytes = SerializeCalibration(Small(true, true));
  const std::string body = BodyOf(bytes);
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_EQ(ParseCalibration(bytes.substr(0, n)).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n;
  }
  // Truncated bodies behind a valid header and hash: the body parser itself must notice.
  for (size_t n = 0; n < body.size(); ++n) {
    EXPECT_EQ(ParseCalibration(Seal(body.substr(0, n))).status().code(),
              absl::StatusCode::kInvalidArgument)
        << n;
  }
}

TEST(CalibrationTest, ResealedBodyFlipsNeverCrashAndParseCanonically) {
  // A body byte flip with a recomputed hash reaches the field checks; whatever parses must
  // serialize back to the same bytes.
  const std::string body = BodyOf(SerializeCalibration(Small(true, true)));
  int accepted = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    for (uint8_t mask : {0x01, 0x40, 0xff}) {
      std::string corrupt = body;
      corrupt[i] = static_cast<char>(corrupt[i] ^ mask);
      const std::string sealed = Seal(corrupt);
      absl::StatusOr<Calibration> parsed = ParseCalibration(sealed);
      if (parsed.ok()) {
        ++accepted;
        EXPECT_EQ(SerializeCalibration(*parsed), sealed) << i;
      } else {
        EXPECT_EQ(parsed.status().code(), absl::StatusCode::kInvalidArgument) << i;
      }
    }
  }
  EXPECT_GT(accepted, 0);  // flips inside float payloads are still valid files
}

TEST(CalibrationTest, RejectsOtherVersionsAndHeaderFields) {
  const std::string bytes = SerializeCalibration(Small(false, true));
  absl::Status v2 = ParseCalibration(Seal(BodyOf(bytes), 2)).status();
  EXPECT_EQ(v2.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(v2.message(), HasSubstr("version 2"));
  std::string reserved = bytes;
  reserved[12] = 1;
  EXPECT_THAT(ParseCalibration(reserved).status().message(), HasSubstr("reserved"));
  std::string magic = bytes;
  magic[0] = 'X';
  EXPECT_THAT(ParseCalibration(magic).status().message(), HasSubstr("magic"));
}

TEST(CalibrationTest, RejectsTrailingBytes) {
  const std::string bytes = SerializeCalibration(Small(true, false));
  absl::Status after_file = ParseCalibration(bytes + '\0').status();
  EXPECT_EQ(after_file.code(), absl::StatusCode::kInvalidArgument);
  // Inside a resealed body: past the last field.
  absl::Status after_body = ParseCalibration(Seal(BodyOf(bytes) + '\0')).status();
  EXPECT_EQ(after_body.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(after_body.message(), HasSubstr("trailing"));
}

TEST(CalibrationTest, HostileCountsFailBeforeAllocating) {
  const std::string body = BodyOf(SerializeCalibration(Small(false, false)));
  // Corpus length (offset 20 in the body, after five i32s) claiming 4 GiB.
  std::string corpus = body;
  std::memset(corpus.data() + 20, 0xff, 4);
  EXPECT_THAT(ParseCalibration(Seal(corpus)).status().message(), HasSubstr("corpus length"));
  // A model at the limits with a SwiftKV block whose norm claims 2^60 elements.
  std::string shape = body.substr(0, 20);
  const int32_t big[5] = {kMaxCalibrationDim, 16, 16, 16, kMaxCalibrationHeadDim};
  std::memcpy(shape.data(), big, 20);
  std::string hostile = shape + std::string(4, '\0') + std::string(8, '\0');  // corpus, tokens
  hostile += '\x01';                                                          // swiftkv present
  const int32_t layer_group[2] = {0, 16};
  hostile.append(reinterpret_cast<const char*>(layer_group), 8);
  hostile.append(8, '\0');  // λ
  const uint64_t count = uint64_t{1} << 60;
  hostile.append(reinterpret_cast<const char*>(&count), 8);
  absl::Status status = ParseCalibration(Seal(hostile)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("swiftkv.norm has 1152921504606846976 elements"));
  // The right count, but the bytes are not there.
  const uint64_t dim = kMaxCalibrationDim;
  std::memcpy(hostile.data() + hostile.size() - 8, &dim, 8);
  EXPECT_THAT(ParseCalibration(Seal(hostile)).status().message(), HasSubstr("truncated"));
  // A presence flag that is neither 0 nor 1.
  std::string flag = body;
  flag[flag.size() - 2] = 2;
  EXPECT_THAT(ParseCalibration(Seal(flag)).status().message(), HasSubstr("expected 0 or 1"));
}

TEST(CalibrationTest, ParseValidatesValues) {
  Calibration c = Small(true, true);
  c.zack->heads[1][1].vo_rank = 0;
  absl::Status status = ParseCalibration(SerializeCalibration(c)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("zack.heads[1][1].vo_rank = 0"));
  c = Small(true, true);
  c.swiftkv->wk[0][7] = NAN;
  EXPECT_THAT(ParseCalibration(SerializeCalibration(c)).status().message(),
              HasSubstr("swiftkv.wk[0][7]"));
}

struct Inconsistency {
  const char* expected;  // substring of the message
  std::function<void(Calibration&)> edit;
};

TEST(CalibrationTest, ValidateCatchesEachInconsistency) {
  const std::vector<Inconsistency> cases = {
      {"model.dim = 0", [](Calibration& c) { c.model.dim = 0; }},
      {"model.n_layers = 0", [](Calibration& c) { c.model.n_layers = 0; }},
      {"model.n_heads = 5000", [](Calibration& c) { c.model.n_heads = 5000; }},
      {"model.n_kv_heads = 8", [](Calibration& c) { c.model.n_kv_heads = 8; }},
      {"does not divide model.n_heads", [](Calibration& c) { c.model.n_kv_heads = 3; }},
      {"model.head_dim = 0", [](Calibration& c) { c.model.head_dim = 0; }},
      {"corpus has 4097 bytes", [](Calibration& c) { c.corpus.assign(4097, 'a'); }},
      {"tokens = -1", [](Calibration& c) { c.tokens = -1; }},
      {"swiftkv.layer = 4", [](Calibration& c) { c.swiftkv->layer = 4; }},
      {"swiftkv.layer = -1", [](Calibration& c) { c.swiftkv->layer = -1; }},
      {"swiftkv.group = 0", [](Calibration& c) { c.swiftkv->group = 0; }},
      {"swiftkv.group = 2 does not divide", [](Calibration& c) { c.swiftkv->layer = 1; }},
      {"swiftkv.ridge_lambda", [](Calibration& c) { c.swiftkv->ridge_lambda = -1; }},
      {"swiftkv.norm has 7", [](Calibration& c) { c.swiftkv->norm.pop_back(); }},
      {"swiftkv.wk has 2", [](Calibration& c) { c.swiftkv->wk.push_back(c.swiftkv->wk[0]); }},
      {"swiftkv.wv has 0", [](Calibration& c) { c.swiftkv->wv.clear(); }},
      {"swiftkv.wv[0] has 65", [](Calibration& c) { c.swiftkv->wv[0].push_back(0); }},
      {"swiftkv.wk[0][1] = inf", [](Calibration& c) { c.swiftkv->wk[0][1] = INFINITY; }},
      {"swiftkv.mse_init has 0", [](Calibration& c) { c.swiftkv->mse_init.clear(); }},
      {"swiftkv.mse_fit[0] = -1", [](Calibration& c) { c.swiftkv->mse_fit[0] = -1; }},
      {"swiftkv.mse_fit[0] = nan", [](Calibration& c) { c.swiftkv->mse_fit[0] = NAN; }},
      {"zack.removal_rate = 1.5", [](Calibration& c) { c.zack->removal_rate = 1.5; }},
      {"zack.removal_rate = nan", [](Calibration& c) { c.zack->removal_rate = NAN; }},
      // With SwiftKV (l = 2, G = 2) the cache has 3 layers, without it 4.
      {"zack.heads (cache layers) has 4",
       [](Calibration& c) { c.zack->heads.push_back(c.zack->heads[0]); }},
      // Without a recovery: L, or a SwiftKV checkpoint's l + (L − l)/G (2 or 3 for L = 4).
      {"zack.heads (cache layers) has 1 elements, expected 4 or a SwiftKV checkpoint's",
       [](Calibration& c) {
         c.swiftkv.reset();
         c.zack->heads.resize(1);
       }},
      {"zack.heads[1] has 1", [](Calibration& c) { c.zack->heads[1].pop_back(); }},
      {"zack.heads[2][1].qk_rank = 0", [](Calibration& c) { c.zack->heads[2][1].qk_rank = 0; }},
      {"zack.heads[0][0].vo_rank = 5", [](Calibration& c) { c.zack->heads[0][0].vo_rank = 5; }},
      {"zack.heads[0][1].qk_basis has 15",
       [](Calibration& c) { c.zack->heads[0][1].qk_basis.pop_back(); }},
      {"zack.heads[1][0].vo_basis[2] = nan",
       [](Calibration& c) { c.zack->heads[1][0].vo_basis[2] = NAN; }},
      {"zack.heads[2][0].vo_eigenvalues has 3",
       [](Calibration& c) { c.zack->heads[2][0].vo_eigenvalues.pop_back(); }},
      {"zack.heads[0][0].qk_eigenvalues are not descending at 2",
       [](Calibration& c) { c.zack->heads[0][0].qk_eigenvalues[2] = 100; }},
  };
  ASSERT_TRUE(ValidateCalibration(Small(true, true)).ok());
  for (const Inconsistency& inconsistency : cases) {
    Calibration c = Small(true, true);
    inconsistency.edit(c);
    absl::Status status = ValidateCalibration(c);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << inconsistency.expected;
    EXPECT_THAT(status.message(), HasSubstr(inconsistency.expected));
    // Serialization is total; the reader rejects the same calibration.
    EXPECT_FALSE(ParseCalibration(SerializeCalibration(c)).ok()) << inconsistency.expected;
  }
}

class CalibrationFileTest : public ::testing::Test {
 protected:
  const ScratchDir scratch_{"calibration_test"};
  const std::filesystem::path& dir_ = scratch_.path();
};

TEST_F(CalibrationFileTest, WritesAtomicallyAndReadsBack) {
  const std::string path = (dir_ / "calib.bin").string();
  const Calibration c = Small(true, true);
  ASSERT_TRUE(WriteCalibrationFile(path, c).ok());
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  absl::StatusOr<Calibration> read = ReadCalibrationFile(path);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(*read, c);
  // Overwrite with another calibration.
  const Calibration other = Small(false, true);
  ASSERT_TRUE(WriteCalibrationFile(path, other).ok());
  EXPECT_EQ(*ReadCalibrationFile(path), other);
}

TEST_F(CalibrationFileTest, ErrorsNameThePath) {
  const std::string missing = (dir_ / "missing.bin").string();
  EXPECT_EQ(ReadCalibrationFile(missing).status().code(), absl::StatusCode::kNotFound);
  EXPECT_EQ(
      WriteCalibrationFile((dir_ / "no/such/dir/calib.bin").string(), Small(true, true)).code(),
      absl::StatusCode::kNotFound);
  Calibration invalid = Small(true, true);
  invalid.tokens = -5;
  const std::string path = (dir_ / "invalid.bin").string();
  EXPECT_EQ(WriteCalibrationFile(path, invalid).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_FALSE(std::filesystem::exists(path));
  // A corrupt file on disk: the message starts with its path.
  std::string bytes = SerializeCalibration(Small(true, false));
  bytes[bytes.size() - 1] ^= 1;
  std::ofstream(path, std::ios::binary) << bytes;
  absl::Status status = ReadCalibrationFile(path).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(status.message(), HasSubstr(path + ": content hash mismatch"));
}

}  // namespace
}  // namespace pdserve
