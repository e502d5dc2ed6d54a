// Body layout (little endian; every container carries its own count, so serialization mirrors the
// structs and the reader checks each count against the model shape before reading the elements):
//
//   model     i32 dim, n_layers, n_heads, n_kv_heads, head_dim
//   corpus    u32 bytes (≤ kMaxCalibrationCorpusBytes) | bytes
//   tokens    i64
//   swiftkv   u8 present (0/1) | i32 layer | i32 group | f64 ridge_lambda | f32 array norm
//             | u32 n | n × f32 array wk | u32 n | n × f32 array wv | f64 array mse_init, mse_fit
//   zack      u8 present (0/1) | f64 removal_rate | u32 cache layers | per layer: u32 kv heads |
//             per head: i32 qk_rank | i32 vo_rank | f32 array qk_basis | f64 array qk_eigenvalues
//             | f32 array vo_basis | f64 array vo_eigenvalues
//
// where an array is u64 element count | elements.
#include "core/calib/calibration.h"

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <system_error>
#include <utility>

#include "absl/strings/str_cat.h"
#include "core/base/byte_reader.h"
#include "core/base/hash.h"
#include "core/base/mapped_file.h"
#include "core/base/status_macros.h"

namespace pdserve {
namespace {

constexpr char kMagic[8] = {'P', 'D', 'S', 'C', 'A', 'L', 'I', 'B'};
constexpr size_t kHeaderBytes = 8 + 4 + 4 + 8 + 8;

absl::Status Invalid(std::string message) { return absl::InvalidArgumentError(std::move(message)); }

// Prefixes a non-OK status's message with `context`.
absl::Status WithContext(const absl::Status& status, const std::string& context) {
  if (status.ok()) return status;
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// ---------------------------------------------------------------------------------------------
// Consistency checks shared by ValidateCalibration and the parser. Messages name the field.

absl::Status CheckRange(int64_t value, int64_t lo, int64_t hi, const std::string& field) {
  if (value < lo || value > hi) {
    return Invalid(absl::StrCat(field, " = ", value, " not in [", lo, ", ", hi, "]"));
  }
  return absl::OkStatus();
}

absl::Status CheckModel(const CalibrationModel& m) {
  PDSERVE_RETURN_IF_ERROR(CheckRange(m.dim, 1, kMaxCalibrationDim, "model.dim"));
  PDSERVE_RETURN_IF_ERROR(CheckRange(m.n_layers, 1, kMaxCalibrationLayers, "model.n_layers"));
  PDSERVE_RETURN_IF_ERROR(CheckRange(m.n_heads, 1, kMaxCalibrationHeads, "model.n_heads"));
  PDSERVE_RETURN_IF_ERROR(CheckRange(m.n_kv_heads, 1, m.n_heads, "model.n_kv_heads"));
  PDSERVE_RETURN_IF_ERROR(CheckRange(m.head_dim, 1, kMaxCalibrationHeadDim, "model.head_dim"));
  if (m.n_heads % m.n_kv_heads != 0) {
    return Invalid(absl::StrCat("model.n_kv_heads = ", m.n_kv_heads,
                                " does not divide model.n_heads = ", m.n_heads));
  }
  return absl::OkStatus();
}

// The number of AcrossKV group leaders, (L − l)/G, after checking l and G against the model.
absl::StatusOr<int> SwiftKvLeaders(const CalibrationModel& m, int layer, int group) {
  PDSERVE_RETURN_IF_ERROR(CheckRange(layer, 0, m.n_layers - 1, "swiftkv.layer"));
  PDSERVE_RETURN_IF_ERROR(CheckRange(group, 1, m.n_layers - layer, "swiftkv.group"));
  if ((m.n_layers - layer) % group != 0) {
    return Invalid(absl::StrCat("swiftkv.group = ", group,
                                " does not divide n_layers − layer = ", m.n_layers - layer));
  }
  return (m.n_layers - layer) / group;
}

// Cache layers the ZACK bases must cover: l + (L − l)/G with SwiftKV, else L. Requires a valid
// SwiftKV shape.
int CacheLayers(const CalibrationModel& m, const std::optional<SwiftKvRecovery>& swiftkv) {
  if (!swiftkv) return m.n_layers;
  return swiftkv->layer + (m.n_layers - swiftkv->layer) / swiftkv->group;
}

// Whether a calibration without a SwiftKV recovery may hold ZACK bases for `count` cache layers:
// the plain model's L, or a SwiftKV checkpoint's l + (L − l)/G (0 < l < L, G dividing L − l) when
// the bases were calibrated on one. Which one the served model has is BuildKvPlan's check.
bool IsCacheLayerCount(const CalibrationModel& m, uint64_t count) {
  if (count == static_cast<uint64_t>(m.n_layers)) return true;
  for (int l = 1; l < m.n_layers; ++l) {
    for (int g = 1; g <= m.n_layers - l; ++g) {
      if ((m.n_layers - l) % g == 0 && static_cast<uint64_t>(l + (m.n_layers - l) / g) == count) {
        return true;
      }
    }
  }
  return false;
}

int64_t KvDim(const CalibrationModel& m) { return int64_t{m.n_kv_heads} * m.head_dim; }

absl::Status CheckCount(size_t actual, uint64_t expected, const std::string& field) {
  if (actual != expected) {
    return Invalid(absl::StrCat(field, " has ", actual, " elements, expected ", expected));
  }
  return absl::OkStatus();
}

// The cache layer count of ZACK bases: exactly CacheLayers with a recovery, else any count
// IsCacheLayerCount accepts.
absl::Status CheckCacheLayerCount(const CalibrationModel& m,
                                  const std::optional<SwiftKvRecovery>& swiftkv, uint64_t count) {
  const std::string field = "zack.heads (cache layers)";
  if (swiftkv) return CheckCount(count, CacheLayers(m, swiftkv), field);
  if (IsCacheLayerCount(m, count)) return absl::OkStatus();
  return Invalid(absl::StrCat(field, " has ", count, " elements, expected ", m.n_layers,
                              " or a SwiftKV checkpoint's l + (L - l)/G"));
}

template <typename T>
absl::Status CheckFinite(const std::vector<T>& values, const std::string& field) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (!std::isfinite(values[i])) {
      return Invalid(absl::StrCat(field, "[", i, "] = ", values[i], " is not finite"));
    }
  }
  return absl::OkStatus();
}

template <typename T>
absl::Status CheckArray(const std::vector<T>& values, uint64_t expected, const std::string& field) {
  PDSERVE_RETURN_IF_ERROR(CheckCount(values.size(), expected, field));
  return CheckFinite(values, field);
}

absl::Status CheckNonNegative(const std::vector<double>& values, const std::string& field) {
  for (size_t i = 0; i < values.size(); ++i) {
    if (values[i] < 0.0) return Invalid(absl::StrCat(field, "[", i, "] = ", values[i], " < 0"));
  }
  return absl::OkStatus();
}

absl::Status CheckSwiftKv(const CalibrationModel& m, const SwiftKvRecovery& s) {
  PDSERVE_ASSIGN_OR_RETURN(const int leaders, SwiftKvLeaders(m, s.layer, s.group));
  if (!std::isfinite(s.ridge_lambda) || s.ridge_lambda < 0.0) {
    return Invalid(absl::StrCat("swiftkv.ridge_lambda = ", s.ridge_lambda, " is not ≥ 0"));
  }
  PDSERVE_RETURN_IF_ERROR(CheckArray(s.norm, m.dim, "swiftkv.norm"));
  PDSERVE_RETURN_IF_ERROR(CheckCount(s.wk.size(), leaders, "swiftkv.wk"));
  PDSERVE_RETURN_IF_ERROR(CheckCount(s.wv.size(), leaders, "swiftkv.wv"));
  const uint64_t weights = static_cast<uint64_t>(KvDim(m)) * m.dim;
  for (int i = 0; i < leaders; ++i) {
    PDSERVE_RETURN_IF_ERROR(CheckArray(s.wk[i], weights, absl::StrCat("swiftkv.wk[", i, "]")));
    PDSERVE_RETURN_IF_ERROR(CheckArray(s.wv[i], weights, absl::StrCat("swiftkv.wv[", i, "]")));
  }
  PDSERVE_RETURN_IF_ERROR(CheckArray(s.mse_init, leaders, "swiftkv.mse_init"));
  PDSERVE_RETURN_IF_ERROR(CheckArray(s.mse_fit, leaders, "swiftkv.mse_fit"));
  PDSERVE_RETURN_IF_ERROR(CheckNonNegative(s.mse_init, "swiftkv.mse_init"));
  return CheckNonNegative(s.mse_fit, "swiftkv.mse_fit");
}

// One basis: rank in [1, d], d×d finite basis, d finite eigenvalues in descending order.
absl::Status CheckBasis(int d, int rank, const std::vector<float>& basis,
                        const std::vector<double>& eigenvalues, const std::string& field) {
  PDSERVE_RETURN_IF_ERROR(CheckRange(rank, 1, d, field + "_rank"));
  PDSERVE_RETURN_IF_ERROR(CheckArray(basis, uint64_t{1} * d * d, field + "_basis"));
  PDSERVE_RETURN_IF_ERROR(CheckArray(eigenvalues, d, field + "_eigenvalues"));
  for (int i = 1; i < d; ++i) {
    if (eigenvalues[i] > eigenvalues[i - 1]) {
      return Invalid(absl::StrCat(field, "_eigenvalues are not descending at ", i));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckZack(const CalibrationModel& m, const ZackBases& z,
                       const std::optional<SwiftKvRecovery>& swiftkv) {
  if (!std::isfinite(z.removal_rate) || z.removal_rate < 0.0 || z.removal_rate > 1.0) {
    return Invalid(absl::StrCat("zack.removal_rate = ", z.removal_rate, " not in [0, 1]"));
  }
  PDSERVE_RETURN_IF_ERROR(CheckCacheLayerCount(m, swiftkv, z.heads.size()));
  for (size_t c = 0; c < z.heads.size(); ++c) {
    const std::string layer = absl::StrCat("zack.heads[", c, "]");
    PDSERVE_RETURN_IF_ERROR(CheckCount(z.heads[c].size(), m.n_kv_heads, layer));
    for (size_t g = 0; g < z.heads[c].size(); ++g) {
      const ZackHeadBasis& h = z.heads[c][g];
      const std::string head = absl::StrCat(layer, "[", g, "].");
      PDSERVE_RETURN_IF_ERROR(
          CheckBasis(m.head_dim, h.qk_rank, h.qk_basis, h.qk_eigenvalues, head + "qk"));
      PDSERVE_RETURN_IF_ERROR(
          CheckBasis(m.head_dim, h.vo_rank, h.vo_basis, h.vo_eigenvalues, head + "vo"));
    }
  }
  return absl::OkStatus();
}

absl::Status Validate(const Calibration& c) {
  PDSERVE_RETURN_IF_ERROR(CheckModel(c.model));
  if (c.corpus.size() > kMaxCalibrationCorpusBytes) {
    return Invalid(absl::StrCat("corpus has ", c.corpus.size(), " bytes, more than ",
                                kMaxCalibrationCorpusBytes));
  }
  if (c.tokens < 0) return Invalid(absl::StrCat("tokens = ", c.tokens, " < 0"));
  if (c.swiftkv) PDSERVE_RETURN_IF_ERROR(CheckSwiftKv(c.model, *c.swiftkv));
  if (c.zack) PDSERVE_RETURN_IF_ERROR(CheckZack(c.model, *c.zack, c.swiftkv));
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Writing. Serialization is total: it writes what the structs hold (the reader rejects an
// inconsistent calibration).

// Appends the body to `out` (when not null) and hashes it on the way.
class BodyWriter {
 public:
  explicit BodyWriter(std::string* out) : out_(out) {}

  template <typename T>
  void Put(T value) {
    Append(&value, sizeof(T));
  }
  template <typename T>
  void PutArray(const std::vector<T>& values) {
    Put<uint64_t>(values.size());
    Append(values.data(), values.size() * sizeof(T));
  }
  template <typename T>
  void PutArrays(const std::vector<std::vector<T>>& arrays) {
    Put<uint32_t>(static_cast<uint32_t>(arrays.size()));
    for (const std::vector<T>& values : arrays) PutArray(values);
  }
  void PutString(const std::string& s) {
    Put<uint32_t>(static_cast<uint32_t>(s.size()));
    Append(s.data(), s.size());
  }
  uint64_t hash() const { return hash_; }

 private:
  void Append(const void* data, size_t n) {
    if (n == 0) return;
    const auto* bytes = static_cast<const uint8_t*>(data);
    hash_ = Fnv1a64({bytes, n}, hash_);
    if (out_ != nullptr) out_->append(reinterpret_cast<const char*>(bytes), n);
  }

  std::string* out_;
  uint64_t hash_ = kFnv1a64Seed;
};

void WriteSwiftKv(const SwiftKvRecovery& s, BodyWriter& w) {
  w.Put<int32_t>(s.layer);
  w.Put<int32_t>(s.group);
  w.Put<double>(s.ridge_lambda);
  w.PutArray(s.norm);
  w.PutArrays(s.wk);
  w.PutArrays(s.wv);
  w.PutArray(s.mse_init);
  w.PutArray(s.mse_fit);
}

void WriteZack(const ZackBases& z, BodyWriter& w) {
  w.Put<double>(z.removal_rate);
  w.Put<uint32_t>(static_cast<uint32_t>(z.heads.size()));
  for (const std::vector<ZackHeadBasis>& layer : z.heads) {
    w.Put<uint32_t>(static_cast<uint32_t>(layer.size()));
    for (const ZackHeadBasis& h : layer) {
      w.Put<int32_t>(h.qk_rank);
      w.Put<int32_t>(h.vo_rank);
      w.PutArray(h.qk_basis);
      w.PutArray(h.qk_eigenvalues);
      w.PutArray(h.vo_basis);
      w.PutArray(h.vo_eigenvalues);
    }
  }
}

void WriteBody(const Calibration& c, BodyWriter& w) {
  for (int v :
       {c.model.dim, c.model.n_layers, c.model.n_heads, c.model.n_kv_heads, c.model.head_dim}) {
    w.Put<int32_t>(v);
  }
  w.PutString(c.corpus);
  w.Put<int64_t>(c.tokens);
  w.Put<uint8_t>(c.swiftkv ? 1 : 0);
  if (c.swiftkv) WriteSwiftKv(*c.swiftkv, w);
  w.Put<uint8_t>(c.zack ? 1 : 0);
  if (c.zack) WriteZack(*c.zack, w);
}

// ---------------------------------------------------------------------------------------------
// Reading: counts are checked against the shape before any element is read or allocated.

template <typename T>
absl::Status ReadArray(ByteReader& r, uint64_t expected, const std::string& field,
                       std::vector<T>& out) {
  PDSERVE_ASSIGN_OR_RETURN(const uint64_t count, r.Read<uint64_t>(field + " count"));
  if (count != expected) {
    return r.Error(absl::StrCat(field, " has ", count, " elements, expected ", expected));
  }
  PDSERVE_ASSIGN_OR_RETURN(std::span<const uint8_t> bytes, r.ReadBytes(count * sizeof(T), field));
  out.resize(count);
  if (count > 0) std::memcpy(out.data(), bytes.data(), bytes.size());
  return absl::OkStatus();
}

template <typename T>
absl::Status ReadCount(ByteReader& r, uint64_t expected, const std::string& field) {
  PDSERVE_ASSIGN_OR_RETURN(const T count, r.Read<T>(field + " count"));
  if (count != expected) {
    return r.Error(absl::StrCat(field, " count is ", count, ", expected ", expected));
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ReadFlag(ByteReader& r, const std::string& field) {
  PDSERVE_ASSIGN_OR_RETURN(const uint8_t flag, r.Read<uint8_t>(field));
  if (flag > 1) return r.Error(absl::StrCat(field, " is ", int{flag}, ", expected 0 or 1"));
  return flag == 1;
}

absl::Status ReadSwiftKv(ByteReader& r, const CalibrationModel& m, SwiftKvRecovery& s) {
  PDSERVE_ASSIGN_OR_RETURN(s.layer, r.Read<int32_t>("swiftkv.layer"));
  PDSERVE_ASSIGN_OR_RETURN(s.group, r.Read<int32_t>("swiftkv.group"));
  absl::StatusOr<int> leaders = SwiftKvLeaders(m, s.layer, s.group);
  if (!leaders.ok()) return r.Error(leaders.status().message());
  PDSERVE_ASSIGN_OR_RETURN(s.ridge_lambda, r.Read<double>("swiftkv.ridge_lambda"));
  PDSERVE_RETURN_IF_ERROR(ReadArray(r, m.dim, "swiftkv.norm", s.norm));
  const uint64_t weights = static_cast<uint64_t>(KvDim(m)) * m.dim;
  for (auto [name, arrays] : {std::pair{"swiftkv.wk", &s.wk}, std::pair{"swiftkv.wv", &s.wv}}) {
    PDSERVE_RETURN_IF_ERROR(ReadCount<uint32_t>(r, *leaders, name));
    arrays->resize(*leaders);
    for (int i = 0; i < *leaders; ++i) {
      PDSERVE_RETURN_IF_ERROR(ReadArray(r, weights, absl::StrCat(name, "[", i, "]"), (*arrays)[i]));
    }
  }
  PDSERVE_RETURN_IF_ERROR(ReadArray(r, *leaders, "swiftkv.mse_init", s.mse_init));
  return ReadArray(r, *leaders, "swiftkv.mse_fit", s.mse_fit);
}

absl::Status ReadZackHead(ByteReader& r, int d, const std::string& field, ZackHeadBasis& h) {
  const uint64_t basis = uint64_t{1} * d * d;
  PDSERVE_ASSIGN_OR_RETURN(h.qk_rank, r.Read<int32_t>(field + "qk_rank"));
  PDSERVE_ASSIGN_OR_RETURN(h.vo_rank, r.Read<int32_t>(field + "vo_rank"));
  PDSERVE_RETURN_IF_ERROR(ReadArray(r, basis, field + "qk_basis", h.qk_basis));
  PDSERVE_RETURN_IF_ERROR(ReadArray(r, d, field + "qk_eigenvalues", h.qk_eigenvalues));
  PDSERVE_RETURN_IF_ERROR(ReadArray(r, basis, field + "vo_basis", h.vo_basis));
  return ReadArray(r, d, field + "vo_eigenvalues", h.vo_eigenvalues);
}

absl::Status ReadZack(ByteReader& r, const CalibrationModel& m,
                      const std::optional<SwiftKvRecovery>& swiftkv, ZackBases& z) {
  PDSERVE_ASSIGN_OR_RETURN(z.removal_rate, r.Read<double>("zack.removal_rate"));
  PDSERVE_ASSIGN_OR_RETURN(const uint32_t cache_layers,
                           r.Read<uint32_t>("zack.heads (cache layers) count"));
  absl::Status count = CheckCacheLayerCount(m, swiftkv, cache_layers);
  if (!count.ok()) return r.Error(count.message());
  z.heads.resize(cache_layers);
  for (uint32_t c = 0; c < cache_layers; ++c) {
    const std::string layer = absl::StrCat("zack.heads[", c, "]");
    PDSERVE_RETURN_IF_ERROR(ReadCount<uint32_t>(r, m.n_kv_heads, layer));
    z.heads[c].resize(m.n_kv_heads);
    for (int g = 0; g < m.n_kv_heads; ++g) {
      PDSERVE_RETURN_IF_ERROR(
          ReadZackHead(r, m.head_dim, absl::StrCat(layer, "[", g, "]."), z.heads[c][g]));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadBody(ByteReader& r, Calibration& c) {
  const std::pair<const char*, int*> shape[] = {{"model.dim", &c.model.dim},
                                                {"model.n_layers", &c.model.n_layers},
                                                {"model.n_heads", &c.model.n_heads},
                                                {"model.n_kv_heads", &c.model.n_kv_heads},
                                                {"model.head_dim", &c.model.head_dim}};
  for (const auto& [name, value] : shape) {
    PDSERVE_ASSIGN_OR_RETURN(*value, r.Read<int32_t>(name));
  }
  absl::Status model = CheckModel(c.model);
  if (!model.ok()) return r.Error(model.message());
  PDSERVE_ASSIGN_OR_RETURN(const uint32_t corpus_bytes, r.Read<uint32_t>("corpus length"));
  if (corpus_bytes > kMaxCalibrationCorpusBytes) {
    return r.Error(
        absl::StrCat("corpus length ", corpus_bytes, " exceeds ", kMaxCalibrationCorpusBytes));
  }
  PDSERVE_ASSIGN_OR_RETURN(c.corpus, r.ReadString(corpus_bytes, "corpus"));
  PDSERVE_ASSIGN_OR_RETURN(c.tokens, r.Read<int64_t>("tokens"));
  PDSERVE_ASSIGN_OR_RETURN(const bool has_swiftkv, ReadFlag(r, "swiftkv flag"));
  if (has_swiftkv) PDSERVE_RETURN_IF_ERROR(ReadSwiftKv(r, c.model, c.swiftkv.emplace()));
  PDSERVE_ASSIGN_OR_RETURN(const bool has_zack, ReadFlag(r, "zack flag"));
  if (has_zack) {
    PDSERVE_RETURN_IF_ERROR(ReadZack(r, c.model, c.swiftkv, c.zack.emplace()));
  }
  if (r.remaining() != 0) {
    return r.Error(absl::StrCat(r.remaining(), " trailing bytes after the last field"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Calibration> Parse(std::span<const uint8_t> bytes, const std::string& context) {
  ByteReader r(bytes, context);
  PDSERVE_ASSIGN_OR_RETURN(std::span<const uint8_t> magic, r.ReadBytes(sizeof(kMagic), "magic"));
  if (std::memcmp(magic.data(), kMagic, sizeof(kMagic)) != 0) {
    return r.Error("not a calibration file (bad magic)");
  }
  PDSERVE_ASSIGN_OR_RETURN(const uint32_t version, r.Read<uint32_t>("version"));
  if (version != kCalibrationVersion) {
    return r.Error(absl::StrCat("unsupported calibration version ", version, " (this build reads ",
                                kCalibrationVersion, ")"));
  }
  PDSERVE_ASSIGN_OR_RETURN(const uint32_t reserved, r.Read<uint32_t>("reserved"));
  if (reserved != 0) return r.Error(absl::StrCat("reserved header field is ", reserved));
  PDSERVE_ASSIGN_OR_RETURN(const uint64_t body_bytes, r.Read<uint64_t>("body size"));
  PDSERVE_ASSIGN_OR_RETURN(const uint64_t hash, r.Read<uint64_t>("content hash"));
  if (body_bytes != r.remaining()) {
    return r.Error(absl::StrCat("the header declares a body of ", body_bytes, " bytes but ",
                                r.remaining(), " follow"));
  }
  if (Fnv1a64(bytes.subspan(r.offset())) != hash) {
    return absl::DataLossError(absl::StrCat(context, ": content hash mismatch"));
  }
  Calibration c;
  PDSERVE_RETURN_IF_ERROR(ReadBody(r, c));
  PDSERVE_RETURN_IF_ERROR(WithContext(Validate(c), context));
  return c;
}

}  // namespace

absl::Status ValidateCalibration(const Calibration& calibration) {
  return WithContext(Validate(calibration), "calibration");
}

std::string SerializeCalibration(const Calibration& calibration) {
  std::string out(kHeaderBytes, '\0');
  BodyWriter writer(&out);
  WriteBody(calibration, writer);
  const uint32_t version = kCalibrationVersion;
  const uint32_t reserved = 0;
  const uint64_t body_bytes = out.size() - kHeaderBytes;
  const uint64_t hash = writer.hash();
  char* p = out.data();
  std::memcpy(p, kMagic, sizeof(kMagic));
  std::memcpy(p + 8, &version, 4);
  std::memcpy(p + 12, &reserved, 4);
  std::memcpy(p + 16, &body_bytes, 8);
  std::memcpy(p + 24, &hash, 8);
  return out;
}

absl::StatusOr<Calibration> ParseCalibration(std::string_view bytes) {
  return Parse({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, "calibration");
}

uint64_t CalibrationHash(const Calibration& calibration) {
  BodyWriter writer(nullptr);
  WriteBody(calibration, writer);
  return writer.hash();
}

absl::Status WriteCalibrationFile(const std::string& path, const Calibration& calibration) {
  PDSERVE_RETURN_IF_ERROR(ValidateCalibration(calibration));
  const std::string bytes = SerializeCalibration(calibration);
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) {
      const int error = errno != 0 ? errno : EIO;
      return absl::ErrnoToStatus(error, absl::StrCat("cannot create '", tmp, "'"));
    }
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    out.close();
    if (!out) {
      std::error_code ignored;
      std::filesystem::remove(tmp, ignored);
      return absl::InternalError(absl::StrCat("cannot write '", tmp, "'"));
    }
  }
  std::error_code error;
  std::filesystem::rename(tmp, path, error);
  if (error) {
    std::error_code ignored;
    std::filesystem::remove(tmp, ignored);
    return absl::InternalError(
        absl::StrCat("cannot rename '", tmp, "' to '", path, "': ", error.message()));
  }
  return absl::OkStatus();
}

absl::StatusOr<Calibration> ReadCalibrationFile(const std::string& path) {
  PDSERVE_ASSIGN_OR_RETURN(std::shared_ptr<const MappedFile> file, MappedFile::Open(path));
  return Parse(file->bytes(), path);
}

}  // namespace pdserve
