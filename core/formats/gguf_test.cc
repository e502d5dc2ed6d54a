// Tests of the GGUF reader, writer and llama model mapping: round trips of a small random model in
// every dtype, metadata values of every type, and malformed files (hand-built or derived from a
// valid one), each of which must fail with a message naming the file.

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/engine/llama_reference.h"
#include "core/formats/gguf_file.h"
#include "core/formats/gguf_model.h"
#include "core/formats/gguf_writer.h"
#include "core/model/random_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/scratch_dir.h"

namespace pdserve {
namespace {

using ::testing::HasSubstr;

// ----------------------------------------------------------------------------------------------
// Fixtures: a synthetic vocabulary and a small random model.

Vocabulary MakeVocabulary() {
  Vocabulary v;
  auto add = [&v](std::string piece, float score, TokenType type) {
    v.pieces.push_back(std::move(piece));
    v.scores.push_back(score);
    v.types.push_back(type);
  };
  add("<unk>", 0.0f, TokenType::kUnknown);
  add("<s>", 0.0f, TokenType::kControl);
  add("</s>", 0.0f, TokenType::kControl);
  for (int b = 0; b < 256; ++b) {
    char piece[8];
    std::snprintf(piece, sizeof(piece), "<0x%02X>", b);
    add(piece, 0.0f, TokenType::kByte);
  }
  const char* words[] = {" ",  "e",  "t",   "a",   " t", " a",   "he",  " the", "in", " s", "er",
                         " w", "on", " b",  "re",  "at", " c",   "ou",  " o",   "nd", " f", "en",
                         "is", " m", " p",  "ing", "it", "or",   "es",  " d",   "an", " h", "ed",
                         " l", "ar", " in", "al",  "ll", " and", " to", "  "};
  float score = -1.0f;
  for (const char* w : words) add(w, score -= 0.5f, TokenType::kNormal);
  v.bos_id = 1;
  v.eos_id = 2;
  v.unk_id = 0;
  return v;
}

ModelWeights MakeModel(bool tied, RopePairing pairing = RopePairing::kAdjacent) {
  ModelConfig c;
  c.dim = 16;
  c.hidden_dim = 40;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 300;
  c.max_seq_len = 64;
  c.norm_eps = 1e-6f;
  c.rope_theta = 500000.0f;
  c.rope_pairing = pairing;
  c.tied_embeddings = tied;
  return MakeRandomModel(c, tied ? 7 : 11);
}

void ExpectSameTensor(const Tensor& actual, const Tensor& expected, const std::string& name) {
  SCOPED_TRACE(name);
  ASSERT_FALSE(actual.empty());
  EXPECT_EQ(actual.dtype, expected.dtype);
  ASSERT_EQ(actual.shape, expected.shape);
  EXPECT_EQ(std::memcmp(actual.data, expected.data, expected.NumBytes()), 0);
}

void ExpectSameWeights(const ModelWeights& actual, const ModelWeights& expected) {
  const ModelConfig &a = actual.config, &e = expected.config;
  EXPECT_EQ(a.dim, e.dim);
  EXPECT_EQ(a.hidden_dim, e.hidden_dim);
  EXPECT_EQ(a.n_layers, e.n_layers);
  EXPECT_EQ(a.n_heads, e.n_heads);
  EXPECT_EQ(a.n_kv_heads, e.n_kv_heads);
  EXPECT_EQ(a.vocab_size, e.vocab_size);
  EXPECT_EQ(a.max_seq_len, e.max_seq_len);
  EXPECT_EQ(a.norm_eps, e.norm_eps);
  EXPECT_EQ(a.rope_theta, e.rope_theta);
  EXPECT_EQ(a.rope_pairing, RopePairing::kAdjacent);
  EXPECT_EQ(a.tied_embeddings, e.tied_embeddings);
  ExpectSameTensor(actual.token_embedding, expected.token_embedding, "token_embedding");
  ExpectSameTensor(actual.final_norm, expected.final_norm, "final_norm");
  ExpectSameTensor(actual.classifier, expected.classifier, "classifier");
  ASSERT_EQ(actual.layers.size(), expected.layers.size());
  for (size_t l = 0; l < actual.layers.size(); ++l) {
    const LayerWeights &x = actual.layers[l], &y = expected.layers[l];
    const std::string p = absl::StrCat("layer ", l, " ");
    ExpectSameTensor(x.attn_norm, y.attn_norm, p + "attn_norm");
    ExpectSameTensor(x.wq, y.wq, p + "wq");
    ExpectSameTensor(x.wk, y.wk, p + "wk");
    ExpectSameTensor(x.wv, y.wv, p + "wv");
    ExpectSameTensor(x.wo, y.wo, p + "wo");
    ExpectSameTensor(x.ffn_norm, y.ffn_norm, p + "ffn_norm");
    ExpectSameTensor(x.w1, y.w1, p + "w1");
    ExpectSameTensor(x.w2, y.w2, p + "w2");
    ExpectSameTensor(x.w3, y.w3, p + "w3");
  }
}

class GgufTest : public ::testing::Test {
 protected:
  std::string Path(const std::string& name) const { return scratch_ / name; }

  std::string WriteBytes(const std::string& name, const std::string& bytes) const {
    std::string path = Path(name);
    std::ofstream(path, std::ios::binary).write(bytes.data(), bytes.size());
    return path;
  }

  static std::string ReadBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

  // Writes the tied f32 test model and returns its path.
  std::string WriteValidModel(const std::string& name, bool tied = true,
                              DType dtype = DType::kF32) const {
    std::string path = Path(name);
    EXPECT_TRUE(WriteGgufModel(path, MakeModel(tied), MakeVocabulary(), dtype).ok());
    return path;
  }

  const ScratchDir scratch_{"gguf_test"};
};

// Loading `path` must fail with a message naming the path and containing `expected`.
void ExpectLoadError(const std::string& path, const std::string& expected) {
  absl::StatusOr<GgufModel> model = LoadGgufModel(path);
  ASSERT_FALSE(model.ok()) << "loaded " << path;
  EXPECT_EQ(model.status().code(), absl::StatusCode::kInvalidArgument) << model.status();
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(path));
  EXPECT_THAT(std::string(model.status().message()), HasSubstr(expected));
}

// ----------------------------------------------------------------------------------------------
// Round trips

class GgufRoundTripTest : public GgufTest,
                          public ::testing::WithParamInterface<std::tuple<DType, bool>> {};

TEST_P(GgufRoundTripTest, WeightsSurviveExactly) {
  const auto [dtype, tied] = GetParam();
  const ModelWeights source = MakeModel(tied);
  const std::string path = Path("model.gguf");
  ASSERT_TRUE(WriteGgufModel(path, source, MakeVocabulary(), dtype).ok());

  absl::StatusOr<GgufModel> loaded = LoadGgufModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  // Matrices are converted to `dtype`, norms stay f32: exactly what ConvertWeights produces.
  ExpectSameWeights(loaded->weights, ConvertWeights(source, dtype));
  EXPECT_EQ(loaded->weights.token_embedding.dtype, dtype);
  EXPECT_EQ(loaded->weights.final_norm.dtype, DType::kF32);
  if (tied) {
    EXPECT_EQ(loaded->weights.classifier.data, loaded->weights.token_embedding.data);
  } else {
    EXPECT_NE(loaded->weights.classifier.data, loaded->weights.token_embedding.data);
  }

  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->FindTensor("output.weight") == nullptr, tied);
  const int64_t expected_file_type = dtype == DType::kF32 ? 0 : dtype == DType::kF16 ? 1 : 32;
  EXPECT_EQ(*file->GetInt("general.file_type"), expected_file_type);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, GgufRoundTripTest,
                         ::testing::Combine(::testing::Values(DType::kF32, DType::kF16,
                                                              DType::kBF16),
                                            ::testing::Bool()),
                         [](const auto& info) {
                           return absl::StrCat(DTypeName(std::get<0>(info.param)),
                                               std::get<1>(info.param) ? "_tied" : "_untied");
                         });

TEST_F(GgufTest, SplitHalfWeightsAreWrittenInAdjacentPairing) {
  const ModelWeights source = MakeModel(/*tied=*/false, RopePairing::kSplitHalf);
  const std::string path = Path("split.gguf");
  ASSERT_TRUE(WriteGgufModel(path, source, MakeVocabulary(), DType::kF32).ok());
  absl::StatusOr<GgufModel> loaded = LoadGgufModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  ExpectSameWeights(loaded->weights, WithRopePairing(source, RopePairing::kAdjacent));
}

TEST_F(GgufTest, VocabularySurvives) {
  Vocabulary vocab = MakeVocabulary();
  vocab.add_dummy_prefix = false;
  vocab.bos_id = 2;
  vocab.eos_id = 1;
  const std::string path = Path("vocab.gguf");
  ASSERT_TRUE(WriteGgufModel(path, MakeModel(true), vocab, DType::kF16).ok());
  absl::StatusOr<GgufModel> loaded = LoadGgufModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const Vocabulary& v = loaded->vocabulary;
  EXPECT_EQ(v.pieces, vocab.pieces);
  EXPECT_EQ(v.scores, vocab.scores);
  EXPECT_EQ(v.types, vocab.types);
  EXPECT_EQ(v.bos_id, 2);
  EXPECT_EQ(v.eos_id, 1);
  EXPECT_EQ(v.unk_id, 0);
  EXPECT_FALSE(v.add_dummy_prefix);
}

TEST_F(GgufTest, MetadataFollowsLlamaCpp) {
  const std::string path = WriteValidModel("meta.gguf");
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->version(), 3u);
  EXPECT_EQ(file->alignment(), 32u);
  EXPECT_EQ(file->data_offset() % 32, 0u);
  EXPECT_EQ(*file->GetString("general.architecture"), "llama");
  EXPECT_EQ(*file->GetString("general.name"), "meta");
  EXPECT_EQ(*file->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_TRUE(*file->GetBool("tokenizer.ggml.add_bos_token"));
  for (const char* key :
       {"llama.context_length", "llama.embedding_length", "llama.block_count",
        "llama.feed_forward_length", "llama.rope.dimension_count", "llama.attention.head_count",
        "llama.attention.head_count_kv", "llama.vocab_size", "tokenizer.ggml.bos_token_id",
        "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id"}) {
    ASSERT_NE(file->FindValue(key), nullptr) << key;
    EXPECT_EQ(file->FindValue(key)->type(), GgufType::kUint32) << key;
  }
  EXPECT_EQ(*file->GetInt("llama.rope.dimension_count"), 4);
  EXPECT_EQ(file->FindValue("llama.attention.layer_norm_rms_epsilon")->type(), GgufType::kFloat32);
  EXPECT_EQ(file->FindValue("llama.rope.freq_base")->type(), GgufType::kFloat32);
  EXPECT_EQ(file->FindValue("tokenizer.ggml.scores")->element_type(), GgufType::kFloat32);
  EXPECT_EQ(file->FindValue("tokenizer.ggml.token_type")->element_type(), GgufType::kInt32);
  const std::vector<std::string>& tokens =
      *file->FindValue("tokenizer.ggml.tokens")->AsStringArray();
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[3 + 256 + 4], "\xE2\x96\x81t");  // " t" with U+2581
  // ggml's ne[0] is the fastest dimension: token_embd is ne = [dim, vocab].
  const GgufTensor* embd = file->FindTensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  EXPECT_EQ(embd->tensor.shape, (std::vector<int64_t>{300, 16}));
  EXPECT_EQ(file->FindTensor("blk.1.ffn_down.weight")->tensor.shape,
            (std::vector<int64_t>{16, 40}));
}

TEST_F(GgufTest, EveryValueTypeRoundTrips) {
  GgufWriter writer;
  ASSERT_TRUE(writer.SetMetadata("u8", GgufValue::Of<uint8_t>(200)).ok());
  ASSERT_TRUE(writer.SetMetadata("i8", GgufValue::Of<int8_t>(-100)).ok());
  ASSERT_TRUE(writer.SetMetadata("u16", GgufValue::Of<uint16_t>(60000)).ok());
  ASSERT_TRUE(writer.SetMetadata("i16", GgufValue::Of<int16_t>(-30000)).ok());
  ASSERT_TRUE(writer.SetMetadata("u32", GgufValue::Of<uint32_t>(4000000000u)).ok());
  ASSERT_TRUE(writer.SetMetadata("i32", GgufValue::Of<int32_t>(-2000000000)).ok());
  ASSERT_TRUE(writer.SetMetadata("u64", GgufValue::Of<uint64_t>(uint64_t{1} << 40)).ok());
  ASSERT_TRUE(writer.SetMetadata("u64big", GgufValue::Of<uint64_t>(~uint64_t{0})).ok());
  ASSERT_TRUE(writer.SetMetadata("i64", GgufValue::Of<int64_t>(-(int64_t{1} << 50))).ok());
  ASSERT_TRUE(writer.SetMetadata("f32", GgufValue::Of(1.5f)).ok());
  ASSERT_TRUE(writer.SetMetadata("f64", GgufValue::Of(-2.25)).ok());
  ASSERT_TRUE(writer.SetMetadata("bool", GgufValue::Of(true)).ok());
  ASSERT_TRUE(writer.SetMetadata("str", GgufValue::Of(std::string("h\xC3\xA9llo"))).ok());
  ASSERT_TRUE(writer.SetMetadata("a_i16", GgufValue::ArrayOf(std::vector<int16_t>{-1, 2})).ok());
  ASSERT_TRUE(writer.SetMetadata("a_f64", GgufValue::ArrayOf(std::vector<double>{0.5, 1})).ok());
  ASSERT_TRUE(writer.SetMetadata("a_bool", GgufValue::ArrayOf(std::vector<bool>{true, 0})).ok());
  ASSERT_TRUE(writer.SetMetadata("a_str", GgufValue::ArrayOf({"x", "", "yz"})).ok());
  ASSERT_TRUE(writer.SetMetadata("a_empty", GgufValue::ArrayOf(std::vector<uint8_t>{})).ok());
  ASSERT_TRUE(writer.SetMetadata("str", GgufValue::Of(std::string("replaced"))).ok());
  EXPECT_FALSE(writer.SetMetadata("", GgufValue::Of(true)).ok());
  EXPECT_FALSE(writer.SetMetadata("general.alignment", GgufValue::Of(64u)).ok());
  const std::string path = Path("values.gguf");
  ASSERT_TRUE(writer.WriteFile(path).ok());

  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->metadata().size(), 18u);
  EXPECT_EQ(file->metadata()[12].first, "str");  // replaced in place
  EXPECT_EQ(*file->GetInt("u8"), 200);
  EXPECT_EQ(*file->GetInt("i8"), -100);
  EXPECT_EQ(*file->GetInt("u16"), 60000);
  EXPECT_EQ(*file->GetInt("i16"), -30000);
  EXPECT_EQ(*file->GetInt("u32"), 4000000000);
  EXPECT_EQ(*file->GetInt("i32"), -2000000000);
  EXPECT_EQ(*file->GetInt("u64"), int64_t{1} << 40);
  EXPECT_FALSE(file->GetInt("u64big").ok());  // does not fit int64
  EXPECT_EQ(*file->GetInt("i64"), -(int64_t{1} << 50));
  EXPECT_EQ(*file->GetFloat("f32"), 1.5);
  EXPECT_EQ(*file->GetFloat("f64"), -2.25);
  EXPECT_TRUE(*file->GetBool("bool"));
  EXPECT_EQ(*file->GetString("str"), "replaced");
  EXPECT_EQ(*file->FindValue("a_i16")->AsIntArray(), (std::vector<int64_t>{-1, 2}));
  EXPECT_EQ(*file->FindValue("a_f64")->AsFloatArray(), (std::vector<float>{0.5f, 1.0f}));
  EXPECT_EQ(file->FindValue("a_bool")->Describe(), "array[2] of bool");
  EXPECT_EQ(*file->FindValue("a_str")->AsStringArray(), (std::vector<std::string>{"x", "", "yz"}));
  EXPECT_EQ(file->FindValue("a_empty")->size(), 0u);
  absl::Status wrong = file->GetString("u8").status();
  EXPECT_THAT(std::string(wrong.message()), HasSubstr("'u8' is uint8, expected a string"));
  EXPECT_THAT(std::string(file->GetInt("nope").status().message()), HasSubstr("'nope' is missing"));
  EXPECT_TRUE(file->tensors().empty());
}

TEST_F(GgufTest, WriterRejectsBadTensors) {
  GgufWriter writer;
  Tensor t = MakeF32Tensor({1, 2, 3, 4}, {2, 2});
  EXPECT_TRUE(writer.AddTensor("a", t).ok());
  EXPECT_FALSE(writer.AddTensor("a", t).ok());
  EXPECT_FALSE(writer.AddTensor("", t).ok());
  EXPECT_FALSE(writer.AddTensor(std::string(64, 'x'), t).ok());
  EXPECT_FALSE(writer.AddTensor("b", Tensor{}).ok());
  EXPECT_FALSE(
      writer.AddTensor("c", MakeF32Tensor(std::vector<float>(32, 0.0f), {2, 2, 2, 2, 2})).ok());
}

TEST_F(GgufTest, WriteRejectsMismatchedVocabulary) {
  Vocabulary vocab = MakeVocabulary();
  vocab.pieces.pop_back();
  vocab.scores.pop_back();
  vocab.types.pop_back();
  EXPECT_FALSE(WriteGgufModel(Path("x.gguf"), MakeModel(true), vocab, DType::kF32).ok());
}

// ----------------------------------------------------------------------------------------------
// Hand-built files

class RawGguf {
 public:
  explicit RawGguf(uint64_t tensors, uint64_t kvs, uint32_t version = 3) {
    bytes_ = "GGUF";
    U32(version).U64(tensors).U64(kvs);
  }
  RawGguf& U32(uint32_t v) { return Put(v); }
  RawGguf& U64(uint64_t v) { return Put(v); }
  RawGguf& Str(const std::string& s) {
    U64(s.size());
    bytes_ += s;
    return *this;
  }
  // A metadata key of `type` whose payload the caller appends.
  RawGguf& Key(const std::string& key, GgufType type) {
    return Str(key).U32(static_cast<uint32_t>(type));
  }
  RawGguf& TensorInfo(const std::string& name, std::vector<uint64_t> ne, uint32_t type,
                      uint64_t offset) {
    Str(name).U32(static_cast<uint32_t>(ne.size()));
    for (uint64_t n : ne) U64(n);
    return U32(type).U64(offset);
  }
  RawGguf& PadTo(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, '\0');
    return *this;
  }
  RawGguf& Zeros(size_t n) {
    bytes_.append(n, '\0');
    return *this;
  }
  const std::string& bytes() const { return bytes_; }

 private:
  template <typename T>
  RawGguf& Put(T v) {
    bytes_.append(reinterpret_cast<const char*>(&v), sizeof(v));
    return *this;
  }
  std::string bytes_;
};

class GgufRawTest : public GgufTest {
 protected:
  // Opening `bytes` must fail with InvalidArgument naming the path and containing `expected`.
  void ExpectOpenError(const std::string& bytes, const std::string& expected) {
    const std::string path = WriteBytes(absl::StrCat("raw", count_++, ".gguf"), bytes);
    absl::StatusOr<GgufFile> file = GgufFile::Open(path);
    ASSERT_FALSE(file.ok()) << "opened " << expected;
    EXPECT_EQ(file.status().code(), absl::StatusCode::kInvalidArgument) << file.status();
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(path));
    EXPECT_THAT(std::string(file.status().message()), HasSubstr(expected));
  }
  int count_ = 0;
};

TEST_F(GgufRawTest, ReadsAHandBuiltFileWithCustomAlignment) {
  RawGguf raw(2, 2, /*version=*/2);
  raw.Key("general.alignment", GgufType::kUint32).U32(64);
  raw.Key("x", GgufType::kBool).Zeros(1);
  raw.TensorInfo("a", {3, 2}, 0, 0).TensorInfo("b", {5}, 30, 64).PadTo(64);
  const size_t data = raw.bytes().size();
  std::string bytes = raw.bytes();
  bytes.resize(data + 64 + 10, '\x01');
  absl::StatusOr<GgufFile> file = GgufFile::Open(WriteBytes("custom.gguf", bytes));
  ASSERT_TRUE(file.ok()) << file.status();
  EXPECT_EQ(file->version(), 2u);
  EXPECT_EQ(file->alignment(), 64u);
  EXPECT_EQ(file->data_offset(), data);
  EXPECT_FALSE(*file->GetBool("x"));
  const GgufTensor* a = file->FindTensor("a");
  EXPECT_EQ(a->tensor.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(a->tensor.dtype, DType::kF32);
  EXPECT_EQ(a->tensor.data, file->mapped_file()->data() + data);
  const GgufTensor* b = file->FindTensor("b");
  EXPECT_EQ(b->tensor.dtype, DType::kBF16);
  EXPECT_EQ(b->tensor.data, file->mapped_file()->data() + data + 64);
}

TEST_F(GgufRawTest, RejectsBadHeaders) {
  ExpectOpenError("GGUX" + RawGguf(0, 0).bytes().substr(4), "not a GGUF file");
  ExpectOpenError(RawGguf(0, 0, 1).bytes(), "unsupported GGUF version 1");
  ExpectOpenError(RawGguf(0, 0, 4).bytes(), "unsupported GGUF version 4");
  ExpectOpenError(RawGguf(0, 0, 0x03000000).bytes(), "big-endian");
  ExpectOpenError(RawGguf(uint64_t{1} << 60, 0).bytes(), "tensor count");
  ExpectOpenError(RawGguf(1000, 0).Zeros(100).bytes(), "tensor count");
  ExpectOpenError(RawGguf(0, uint64_t{1} << 62).bytes(), "metadata count");
  ExpectOpenError("GGUF", "truncated while reading the version");
}

TEST_F(GgufRawTest, RejectsAbsurdStrings) {
  ExpectOpenError(RawGguf(0, 1).U64(uint64_t{1} << 62).Zeros(16).bytes(), "over the limit");
  ExpectOpenError(RawGguf(0, 1).U64(~uint64_t{0}).Zeros(16).bytes(), "over the limit");
  ExpectOpenError(RawGguf(0, 1).Key("s", GgufType::kString).U64(uint64_t{1} << 40).bytes(),
                  "over the limit");
  ExpectOpenError(RawGguf(0, 1).Key("s", GgufType::kString).U64(1000).Zeros(10).bytes(),
                  "truncated while reading the value of 's'");
  ExpectOpenError(RawGguf(0, 1).Str("").U32(7).Zeros(8).bytes(), "is empty");
}

TEST_F(GgufRawTest, RejectsAbsurdArrays) {
  ExpectOpenError(RawGguf(0, 1)
                      .Key("a", GgufType::kArray)
                      .U32(static_cast<uint32_t>(GgufType::kUint32))
                      .U64(uint64_t{1} << 61)
                      .Zeros(64)
                      .bytes(),
                  "array 'a' claims 2305843009213693952 elements");
  ExpectOpenError(RawGguf(0, 1)
                      .Key("a", GgufType::kArray)
                      .U32(static_cast<uint32_t>(GgufType::kString))
                      .U64(~uint64_t{0})
                      .Zeros(64)
                      .bytes(),
                  "claims");
  ExpectOpenError(RawGguf(0, 1)
                      .Key("a", GgufType::kArray)
                      .U32(static_cast<uint32_t>(GgufType::kString))
                      .U64(3)
                      .Str("x")
                      .U64(uint64_t{1} << 50)
                      .Zeros(8)
                      .bytes(),
                  "the array 'a'[1] at offset");
  ExpectOpenError(RawGguf(0, 1)
                      .Key("a", GgufType::kArray)
                      .U32(static_cast<uint32_t>(GgufType::kArray))
                      .U64(1)
                      .Zeros(16)
                      .bytes(),
                  "unsupported element type 9");
  ExpectOpenError(RawGguf(0, 1).Key("a", GgufType::kArray).U32(13).U64(1).Zeros(8).bytes(),
                  "unsupported element type 13");
}

TEST_F(GgufRawTest, RejectsBadValues) {
  ExpectOpenError(RawGguf(0, 1).Str("k").U32(13).Zeros(8).bytes(), "unknown value type 13");
  ExpectOpenError(RawGguf(0, 1).Key("b", GgufType::kBool).U32(2).bytes(), "bool value 2");
  ExpectOpenError(
      RawGguf(0, 2).Key("k", GgufType::kUint8).Zeros(1).Key("k", GgufType::kUint8).Zeros(1).bytes(),
      "'k' appears twice");
  ExpectOpenError(RawGguf(0, 1).Key("general.alignment", GgufType::kUint32).U32(3).bytes(),
                  "general.alignment must be a uint32 power of two");
  ExpectOpenError(RawGguf(0, 1).Key("general.alignment", GgufType::kUint64).U64(32).bytes(),
                  "general.alignment must be a uint32 power of two");
}

TEST_F(GgufRawTest, RejectsBadTensorInfos) {
  auto one_tensor = [](std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    return RawGguf(1, 0).TensorInfo("blk.0.attn_q.weight", std::move(ne), type, offset).PadTo(32);
  };
  ExpectOpenError(one_tensor({256, 32}, 10, 0).Zeros(4096).bytes(),
                  "tensor blk.0.attn_q.weight has ggml type 10 (Q2_K); supported: F32, F16, BF16, "
                  "Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K");
  ExpectOpenError(one_tensor({32, 32}, 12, 0).Zeros(2048).bytes(),
                  "tensor blk.0.attn_q.weight is Q4_K but its rows of 32 elements are not a whole "
                  "number of 256-element blocks");
  ExpectOpenError(one_tensor({48, 2}, 8, 0).Zeros(2048).bytes(), "not a whole number of 32");
  ExpectOpenError(one_tensor({256, 64}, 14, 0).Zeros(2048).bytes(), "lies outside the file");
  ExpectOpenError(one_tensor({32, 32}, 999, 0).Zeros(2048).bytes(), "ggml type 999 (unknown)");
  ExpectOpenError(one_tensor({8}, 0, 0).Zeros(16).bytes(), "lies outside the file");
  ExpectOpenError(one_tensor({8}, 0, uint64_t{1} << 63).Zeros(64).bytes(), "lies outside the file");
  ExpectOpenError(one_tensor({8}, 0, 4).Zeros(64).bytes(), "not a multiple of the alignment 32");
  ExpectOpenError(one_tensor({uint64_t{1} << 40, uint64_t{1} << 40}, 0, 0).bytes(),
                  "invalid dimensions");
  ExpectOpenError(one_tensor({uint64_t{1} << 61}, 0, 0).Zeros(64).bytes(), "too large");
  ExpectOpenError(one_tensor({8, 0}, 0, 0).bytes(), "invalid dimensions [8, 0]");
  ExpectOpenError(one_tensor({~uint64_t{0}}, 0, 0).bytes(), "invalid dimensions");
  ExpectOpenError(one_tensor({1, 1, 1, 1, 1}, 0, 0).bytes(), "has 5 dimensions");
  ExpectOpenError(one_tensor({}, 0, 0).bytes(), "has 0 dimensions");
  ExpectOpenError(RawGguf(1, 0).TensorInfo(std::string(64, 'x'), {1}, 0, 0).bytes(),
                  "over the limit of 63");
  ExpectOpenError(RawGguf(2, 0)
                      .TensorInfo("t", {8}, 0, 0)
                      .TensorInfo("t", {8}, 0, 32)
                      .PadTo(32)
                      .Zeros(64)
                      .bytes(),
                  "tensor t appears twice");
}

// ----------------------------------------------------------------------------------------------
// Malformed files derived from a valid model

TEST_F(GgufTest, TruncatedFilesFailCleanly) {
  const std::string path = WriteValidModel("full.gguf", /*tied=*/false, DType::kF16);
  const std::string bytes = ReadBytes(path);
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  uint64_t data_end = 0;
  for (const GgufTensor& t : file->tensors()) {
    data_end = std::max<uint64_t>(data_end, file->data_offset() + t.offset + t.tensor.NumBytes());
  }
  const uint64_t header_end = file->data_offset();
  std::vector<uint64_t> cuts = {0, 1, 3, 4, 7, 8, 15, 16, 23, 24, 25, 31};
  for (int i = 1; i <= 16; ++i) cuts.push_back(24 + (header_end - 24) * i / 17);  // metadata
  for (int i = 1; i <= 10; ++i) cuts.push_back(header_end - 37 * i);              // tensor infos
  for (int i = 0; i < 10; ++i) cuts.push_back(header_end + (data_end - header_end) * i / 10);
  cuts.push_back(data_end - 1);
  for (uint64_t cut : cuts) {
    SCOPED_TRACE(absl::StrCat("truncated at ", cut, " of ", bytes.size()));
    const std::string truncated = WriteBytes("truncated.gguf", bytes.substr(0, cut));
    absl::StatusOr<GgufModel> model = LoadGgufModel(truncated);
    ASSERT_FALSE(model.ok());
    EXPECT_THAT(std::string(model.status().message()), HasSubstr(truncated));
  }
  EXPECT_GE(cuts.size(), 49u);
}

TEST_F(GgufTest, CorruptedBytesNeverCrash) {
  const std::string path = WriteValidModel("full.gguf");
  const std::string bytes = ReadBytes(path);
  absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  ASSERT_TRUE(file.ok()) << file.status();
  std::mt19937 rng(42);
  // Corrupt the header region (where counts, lengths and offsets live) a few bytes at a time.
  std::uniform_int_distribution<size_t> where(0, file->data_offset() - 1);
  std::uniform_int_distribution<int> value(0, 255);
  int failures = 0;
  for (int trial = 0; trial < 200; ++trial) {
    std::string corrupted = bytes;
    for (int i = 0; i < 4; ++i) corrupted[where(rng)] = static_cast<char>(value(rng));
    const std::string mutated = WriteBytes("mutated.gguf", corrupted);
    absl::StatusOr<GgufModel> model = LoadGgufModel(mutated);
    if (!model.ok()) {
      ++failures;
      EXPECT_THAT(std::string(model.status().message()), HasSubstr(mutated));
    }
  }
  EXPECT_GT(failures, 0);
}

// Rewrites the model at `src` to `dst` through GgufWriter after `edit` changes metadata/tensors.
void Rewrite(const std::string& src, const std::string& dst,
             const std::function<void(GgufWriter&, std::vector<GgufTensor>&)>& edit) {
  absl::StatusOr<GgufFile> file = GgufFile::Open(src);
  ASSERT_TRUE(file.ok()) << file.status();
  GgufWriter writer;
  for (const auto& [key, value] : file->metadata()) {
    ASSERT_TRUE(writer.SetMetadata(key, value).ok());
  }
  std::vector<GgufTensor> tensors = file->tensors();
  edit(writer, tensors);
  for (const GgufTensor& t : tensors) ASSERT_TRUE(writer.AddTensor(t.name, t.tensor).ok());
  ASSERT_TRUE(writer.WriteFile(dst).ok());
}

void RemoveTensor(std::vector<GgufTensor>& tensors, const std::string& name) {
  std::erase_if(tensors, [&name](const GgufTensor& t) { return t.name == name; });
}

TEST_F(GgufTest, UnchangedRewriteLoads) {
  const std::string src = WriteValidModel("src.gguf", /*tied=*/false);
  const std::string dst = Path("dst.gguf");
  Rewrite(src, dst, [](GgufWriter&, std::vector<GgufTensor>&) {});
  EXPECT_EQ(ReadBytes(src), ReadBytes(dst));
  EXPECT_TRUE(LoadGgufModel(dst).ok());
}

TEST_F(GgufTest, MissingRequiredKeysAreNamed) {
  const std::string src = WriteValidModel("src.gguf");
  for (const char* key : {"general.architecture", "llama.context_length", "llama.embedding_length",
                          "llama.block_count", "llama.feed_forward_length",
                          "llama.attention.head_count", "tokenizer.ggml.model"}) {
    SCOPED_TRACE(key);
    const std::string dst = Path("missing.gguf");
    Rewrite(src, dst, [key](GgufWriter& w, std::vector<GgufTensor>&) { w.RemoveMetadata(key); });
    ExpectLoadError(dst, absl::StrCat("metadata key '", key, "' is missing"));
  }
  const std::string dst = Path("no_tokens.gguf");
  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    w.RemoveMetadata("tokenizer.ggml.tokens");
  });
  ExpectLoadError(dst, "tokenizer.ggml.tokens");
}

TEST_F(GgufTest, RopeScalingIsRefusedNotIgnored) {
  const std::string src = WriteValidModel("src.gguf");
  const std::string dst = Path("scaled.gguf");
  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    ASSERT_TRUE(w.SetMetadata("llama.rope.scaling.factor", GgufValue::Of(4.0f)).ok());
  });
  ExpectLoadError(dst, "llama.rope.scaling.factor is 4");
  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    ASSERT_TRUE(w.SetMetadata("llama.rope.scaling.type", GgufValue::Of(std::string("yarn"))).ok());
  });
  ExpectLoadError(dst, "rope.scaling.type is 'yarn'");
  // Factor 1 and type "none" mean no scaling.
  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    ASSERT_TRUE(w.SetMetadata("llama.rope.scaling.factor", GgufValue::Of(1.0f)).ok());
    ASSERT_TRUE(w.SetMetadata("llama.rope.scaling.type", GgufValue::Of(std::string("none"))).ok());
  });
  EXPECT_TRUE(LoadGgufModel(dst).ok());
}

// Llama 3 RoPE scaling is written as llama.cpp stores it (rope_freqs.weight, the rule's per-pair
// divisors) and read back as those divisors; the loaded model's logits equal the scaled model's.
TEST_F(GgufTest, Llama3RopeScalingTravelsAsRopeFreqs) {
  ModelWeights scaled = MakeModel(/*tied=*/true);
  scaled.config.rope_scaling = {.factor = 8.0f,
                                .low_freq_factor = 1.0f,
                                .high_freq_factor = 4.0f,
                                .original_max_positions = 32};
  const std::string path = Path("scaled.gguf");
  ASSERT_TRUE(WriteGgufModel(path, scaled, MakeVocabulary(), DType::kF32).ok());
  absl::StatusOr<GgufModel> loaded = LoadGgufModel(path);
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  const kernels::RopeScaling& got = loaded->weights.config.rope_scaling;
  EXPECT_EQ(got.factor, 0.0f);
  EXPECT_EQ(got.freq_factors, scaled.config.rope_scaling.FreqFactors(scaled.config.head_dim(),
                                                                     scaled.config.rope_theta));
  EXPECT_EQ(got.freq_factors, (std::vector<float>{1.0f, 8.0f}));  // head dim 4: one per band
  // Written again, the divisors stay as they are.
  const std::string again = Path("scaled-again.gguf");
  ASSERT_TRUE(WriteGgufModel(again, loaded->weights, MakeVocabulary(), DType::kF32).ok());
  absl::StatusOr<GgufModel> reloaded = LoadGgufModel(again);
  ASSERT_TRUE(reloaded.ok()) << reloaded.status();
  EXPECT_EQ(reloaded->weights.config.rope_scaling.freq_factors, got.freq_factors);
  // Logits at a position where scaling matters agree with the rule's.
  const std::vector<int> tokens = {1, 5, 9, 33, 2, 7, 100, 250, 3, 8, 60, 61};
  LlamaReference rule(scaled), divisors(loaded->weights);
  std::vector<float> want, have;
  for (int token : tokens) {
    want = rule.Forward(token);
    have = divisors.Forward(token);
  }
  ASSERT_EQ(want.size(), have.size());
  for (size_t i = 0; i < want.size(); ++i) EXPECT_NEAR(have[i], want[i], 1e-5f) << i;
}

TEST_F(GgufTest, OptionalKeysTakeDefaults) {
  const std::string src = WriteValidModel("src.gguf");
  const std::string dst = Path("defaults.gguf");
  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    for (const char* key :
         {"llama.attention.head_count_kv", "llama.attention.layer_norm_rms_epsilon",
          "llama.rope.freq_base", "llama.vocab_size", "llama.rope.dimension_count",
          "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id"}) {
      w.RemoveMetadata(key);
    }
  });
  absl::StatusOr<GgufModel> model = LoadGgufModel(dst);
  // Without head_count_kv the kv heads default to 4, so attn_k's shape no longer matches.
  ASSERT_FALSE(model.ok());
  EXPECT_THAT(std::string(model.status().message()),
              HasSubstr("tensor blk.0.attn_k.weight has shape [8, 16]"));

  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    for (const char* key :
         {"llama.attention.layer_norm_rms_epsilon", "llama.rope.freq_base", "llama.vocab_size",
          "tokenizer.ggml.scores", "tokenizer.ggml.token_type", "tokenizer.ggml.bos_token_id"}) {
      w.RemoveMetadata(key);
    }
  });
  model = LoadGgufModel(dst);
  ASSERT_TRUE(model.ok()) << model.status();
  EXPECT_EQ(model->weights.config.norm_eps, 1e-5f);
  EXPECT_EQ(model->weights.config.rope_theta, 10000.0f);
  EXPECT_EQ(model->weights.config.vocab_size, 300);
  EXPECT_EQ(model->vocabulary.bos_id, 1);
  EXPECT_EQ(model->vocabulary.types[5], TokenType::kNormal);
  EXPECT_EQ(model->vocabulary.scores[299], 0.0f);
}

TEST_F(GgufTest, RejectsInconsistentModels) {
  const std::string src = WriteValidModel("src.gguf");
  const std::string dst = Path("bad.gguf");
  auto set = [&](const std::string& key, GgufValue value) {
    Rewrite(src, dst, [&](GgufWriter& w, std::vector<GgufTensor>&) {
      ASSERT_TRUE(w.SetMetadata(key, value).ok());
    });
  };
  set("general.architecture", GgufValue::Of(std::string("gpt2")));
  ExpectLoadError(dst, "general.architecture is 'gpt2'; supported: 'llama', 'qwen2', 'qwen3'");
  // key_length states the head dim (written as 4 = 16 / 4 heads): 8 makes it explicit, and then
  // the value width and the q projection disagree.
  set("llama.attention.key_length", GgufValue::Of<uint32_t>(8));
  ExpectLoadError(dst, "llama.attention.value_length is 4, not the head dim 8");
  Rewrite(src, dst, [&](GgufWriter& w, std::vector<GgufTensor>&) {
    ASSERT_TRUE(w.SetMetadata("llama.attention.key_length", GgufValue::Of<uint32_t>(8)).ok());
    ASSERT_TRUE(w.SetMetadata("llama.attention.value_length", GgufValue::Of<uint32_t>(8)).ok());
    ASSERT_TRUE(w.SetMetadata("llama.rope.dimension_count", GgufValue::Of<uint32_t>(8)).ok());
  });
  ExpectLoadError(dst, "tensor blk.0.attn_q.weight has shape [16, 16], expected [32, 16]");
  set("llama.block_count", GgufValue::Of(std::string("2")));
  ExpectLoadError(dst, "'llama.block_count' is string, expected an integer");
  set("llama.block_count", GgufValue::Of<int32_t>(-2));
  ExpectLoadError(dst, "'llama.block_count' = -2 is out of range");
  set("llama.feed_forward_length", GgufValue::Of<uint32_t>(48));
  ExpectLoadError(dst, "tensor blk.0.ffn_gate.weight has shape [40, 16], expected [48, 16]");
  set("llama.attention.head_count", GgufValue::Of<uint32_t>(3));
  ExpectLoadError(dst, "n_heads 3 is not divisible by n_kv_heads");
  set("llama.rope.dimension_count", GgufValue::Of<uint32_t>(2));
  ExpectLoadError(dst, "partial rotary");
  set("tokenizer.ggml.model", GgufValue::Of(std::string("bert")));
  ExpectLoadError(dst, "tokenizer.ggml.model is 'bert'");
  set("tokenizer.ggml.token_type", GgufValue::ArrayOf(std::vector<int32_t>(300, 9)));
  ExpectLoadError(dst, "token 0 has token type 9");
  set("tokenizer.ggml.scores", GgufValue::ArrayOf(std::vector<float>(299, 0.0f)));
  ExpectLoadError(dst,
                  "'tokenizer.ggml.scores' is array[299] of float32, expected an array of 300");
  set("tokenizer.ggml.eos_token_id", GgufValue::Of<uint32_t>(300));
  ExpectLoadError(dst, "eos id 300 is outside [0, 300)");
}

TEST_F(GgufTest, RejectsVocabularySizeMismatch) {
  const std::string src = WriteValidModel("src.gguf");
  const std::string dst = Path("bad.gguf");
  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    Vocabulary v = MakeVocabulary();
    v.pieces.resize(299);
    v.scores.resize(299);
    std::vector<int32_t> types(299, 1);
    ASSERT_TRUE(w.SetMetadata("tokenizer.ggml.tokens", GgufValue::ArrayOf(v.pieces)).ok());
    ASSERT_TRUE(w.SetMetadata("tokenizer.ggml.scores", GgufValue::ArrayOf(v.scores)).ok());
    ASSERT_TRUE(w.SetMetadata("tokenizer.ggml.token_type", GgufValue::ArrayOf(types)).ok());
  });
  ExpectLoadError(dst, "the vocabulary has 299 tokens but token_embd.weight has 300 rows");
}

TEST_F(GgufTest, RejectsTensorProblems) {
  const std::string src = WriteValidModel("src.gguf");
  const std::string dst = Path("bad.gguf");
  Rewrite(src, dst,
          [](GgufWriter&, std::vector<GgufTensor>& t) { RemoveTensor(t, "blk.1.ffn_up.weight"); });
  ExpectLoadError(dst, "tensor blk.1.ffn_up.weight is missing");
  Rewrite(src, dst, [](GgufWriter&, std::vector<GgufTensor>& t) {
    for (GgufTensor& x : t) {
      if (x.name == "blk.1.attn_k.weight")
        x.tensor = MakeF32Tensor(std::vector<float>(256), {16, 16});
    }
  });
  ExpectLoadError(dst, "tensor blk.1.attn_k.weight has shape [16, 16], expected [8, 16]");
  Rewrite(src, dst, [](GgufWriter&, std::vector<GgufTensor>& t) {
    t.push_back({"rope_freqs.weight", MakeF32Tensor(std::vector<float>(3, 1.0f), {3}), 0});
  });
  ExpectLoadError(dst, "tensor rope_freqs.weight has shape [3], expected [2]");
  Rewrite(src, dst, [](GgufWriter&, std::vector<GgufTensor>& t) {
    t.push_back({"rope_freqs.weight", MakeF32Tensor(std::vector<float>(2), {2}), 0});
  });
  ExpectLoadError(dst, "RoPE frequency factor 0 = 0");
  Rewrite(src, dst, [](GgufWriter& w, std::vector<GgufTensor>&) {
    ASSERT_TRUE(w.SetMetadata("llama.block_count", GgufValue::Of<uint32_t>(3)).ok());
  });
  ExpectLoadError(dst, "tensor blk.2.attn_q.weight is missing");
}

TEST_F(GgufTest, MissingFileIsNotFound) {
  EXPECT_EQ(LoadGgufModel(Path("absent.gguf")).status().code(), absl::StatusCode::kNotFound);
}

}  // namespace
}  // namespace pdserve
