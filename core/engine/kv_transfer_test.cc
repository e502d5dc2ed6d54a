// KV transfer between two engines of the same model: every page a prefill engine exports, decoded
// and imported into a second engine, lets that engine continue the sequence with logits bit for
// bit equal to the prefill engine's own decode steps — plain and under the default compression
// profile (SwiftKV l=4, FP8 per-token, KCache top-32), the latter with a value tier from
// value_tier_factory. Also: CacheLayerStored order and streaming export from it, refused
// layouts and page counts, decode-only factory engines, AddSequenceWithTokens accounting, and
// copies of a sequence within one engine.
#include "core/engine/kv_transfer.h"

#include <span>
#include <string>
#include <vector>

#include "core/engine/llama_engine.h"
#include "core/formats/model_loader.h"
#include "core/model/random_model.h"
#include "core/model/swiftkv_weights.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

const std::string kShared = PDSERVE_SHARED_DIR;
constexpr uint64_t kRequest = 77;
constexpr uint64_t kCalibration = 0xC0FFEE;

ModelWeights Stories260K() {
  auto model = LoadModel(kShared + "/models/stories260K/stories260K.bin",
                         kShared + "/models/stories260K/tok512.bin");
  EXPECT_TRUE(model.ok()) << model.status();
  return model->weights;
}

std::vector<int32_t> Tokens(int n, int vocab, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 3 + (i * 37 + salt * 101) % (vocab - 3);
  return t;
}

std::span<const uint8_t> AsBytes(const std::string& s) {
  return {reinterpret_cast<const uint8_t*>(s.data()), s.size()};
}

// The default compression profile (tools/profile_flags.cc, core/compress/profile.h PrepareModel
// without a calibration): SwiftKV l=4 rewired, FP8 per-token scales, KCache top-32.
struct Prepared {
  ModelWeights weights;
  KvCompression compression;
};

Prepared DefaultProfile(const ModelWeights& w) {
  Prepared p{w, {}};
  auto swiftkv = RewireSwiftKv(w, 4, 1);
  EXPECT_TRUE(swiftkv.ok()) << swiftkv.status();
  p.weights.swiftkv = *swiftkv;
  p.compression.fp8 = KvScaleMode::kPerTokenHead;
  p.compression.kcache.top_n = 32;
  return p;
}

EngineOptions Options(const KvCompression& compression) {
  EngineOptions o;
  o.num_threads = 2;
  o.max_sequences = 2;
  o.max_context = 128;
  o.compression = compression;
  return o;
}

std::unique_ptr<LlamaEngine> MakeEngine(const ModelWeights& w, const EngineOptions& o) {
  auto engine = LlamaEngine::Create(w, o);
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// A value_tier_factory that makes InProcessValueTiers (the engine then treats its tier as
// possibly remote).
decltype(EngineOptions::value_tier_factory) InProcessTierFactory() {
  return [](int page_size, int num_pages,
            std::vector<KvSectionLayout> sections) -> absl::StatusOr<std::unique_ptr<ValueTier>> {
    auto tier = InProcessValueTier::Create(page_size, num_pages, std::move(sections));
    if (!tier.ok()) return tier.status();
    return std::unique_ptr<ValueTier>(std::move(*tier));
  };
}

// A new sequence of `engine` holding `prompt`, prefilled in one Forward.
int Prefilled(LlamaEngine& engine, std::span<const int32_t> prompt) {
  const int s = *engine.AddSequence();
  ForwardChunk chunk{s, prompt};
  EXPECT_TRUE(engine.Forward({&chunk, 1}).ok());
  return s;
}

// Every page of every cache layer of `sequence`, encoded.
std::vector<std::string> ExportSequence(LlamaEngine& engine, int sequence) {
  std::vector<std::string> pages;
  const int n = NumKvPages(engine.SequenceLength(sequence), engine.options().kv_page_size);
  for (int c = 0; c < static_cast<int>(engine.plan().caches.size()); ++c) {
    for (int p = 0; p < n; ++p) {
      auto page = EncodeSequencePage(engine, sequence, c, p, kRequest, kCalibration);
      EXPECT_TRUE(page.ok()) << page.status();
      pages.push_back(page.ok() ? *page : std::string());
    }
  }
  return pages;
}

// A new sequence of `num_tokens` tokens in `engine` holding the decoded pages.
int ImportSequence(LlamaEngine& engine, int num_tokens, const std::vector<std::string>& pages) {
  auto sequence = engine.AddSequenceWithTokens(num_tokens);
  EXPECT_TRUE(sequence.ok()) << sequence.status();
  for (const std::string& bytes : pages) {
    auto page = DecodeKvPage(AsBytes(bytes));
    EXPECT_TRUE(page.ok()) << page.status();
    EXPECT_EQ(page->header.request_id, kRequest);
    EXPECT_EQ(page->header.calibration_hash, kCalibration);
    EXPECT_TRUE(ImportKvPage(engine, *sequence, *page, true).ok());
  }
  return *sequence;
}

std::vector<float> Step(LlamaEngine& engine, int sequence, int32_t token) {
  ForwardChunk chunk{sequence, {&token, 1}};
  auto logits = engine.Forward({&chunk, 1});
  EXPECT_TRUE(logits.ok()) << logits.status();
  return logits.ok() ? std::vector<float>(logits->begin(), logits->end()) : std::vector<float>();
}

// Prefills 40 tokens in A (3 pages of 16, the last partial), moves them to B, then runs the same
// decode steps on both: bit-identical logits.
void ExpectTransferContinuesBitForBit(const ModelWeights& w, const EngineOptions& a_options,
                                      const EngineOptions& b_options) {
  auto a = MakeEngine(w, a_options);
  auto b = MakeEngine(w, b_options);
  ASSERT_TRUE(a && b);
  const std::vector<int32_t> prompt = Tokens(40, w.config.vocab_size);
  const int sa = *a->AddSequence();
  ForwardChunk chunk{sa, prompt};
  ASSERT_TRUE(a->Forward({&chunk, 1}).ok());
  const std::vector<std::string> pages = ExportSequence(*a, sa);
  ASSERT_EQ(pages.size(), a->plan().caches.size() * 3);
  const int sb = ImportSequence(*b, 40, pages);
  EXPECT_EQ(b->SequenceLength(sb), 40);
  const std::vector<int32_t> next = Tokens(8, w.config.vocab_size, 3);
  for (size_t i = 0; i < next.size(); ++i) {
    const std::vector<float> from_a = Step(*a, sa, next[i]);
    ASSERT_FALSE(from_a.empty());
    EXPECT_EQ(Step(*b, sb, next[i]), from_a) << "decode step " << i;
  }
  EXPECT_EQ(b->kv_bytes_fetched(), a->kv_bytes_fetched());
  // The continued caches agree too: 48 tokens, the third page now full.
  EXPECT_EQ(ExportSequence(*b, sb), ExportSequence(*a, sa));
}

// A copy of a prefilled sequence continues as the sequence does, bit for bit, and holds the same
// pages; plain and under the default profile (whose KCache V lives in the value tier).
void ExpectCopyContinuesBitForBit(const ModelWeights& w, EngineOptions o) {
  o.max_sequences = 3;
  auto engine = MakeEngine(w, o);
  ASSERT_TRUE(engine);
  const std::vector<int32_t> prompt = Tokens(40, w.config.vocab_size);
  const int s = Prefilled(*engine, prompt);
  const absl::StatusOr<int> copy = CopySequence(*engine, s);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_NE(*copy, s);
  EXPECT_EQ(engine->SequenceLength(*copy), 40);
  EXPECT_EQ(ExportSequence(*engine, *copy), ExportSequence(*engine, s));
  const std::vector<int32_t> next = Tokens(8, w.config.vocab_size, 3);
  for (size_t i = 0; i < next.size(); ++i) {
    const std::vector<float> original = Step(*engine, s, next[i]);
    ASSERT_FALSE(original.empty());
    EXPECT_EQ(Step(*engine, *copy, next[i]), original) << "decode step " << i;
  }
}

TEST(KvTransferTest, CopiedSequenceContinuesBitForBit) {
  ExpectCopyContinuesBitForBit(Stories260K(), Options({}));
  const Prepared p = DefaultProfile(Stories260K());
  ExpectCopyContinuesBitForBit(p.weights, Options(p.compression));
}

TEST(KvTransferTest, CopyRefusesUnknownSequencesAndFullEngines) {
  const ModelWeights w = Stories260K();
  auto engine = MakeEngine(w, Options({}));  // two sequence slots
  ASSERT_TRUE(engine);
  EXPECT_EQ(CopySequence(*engine, 5).status().code(), absl::StatusCode::kNotFound);
  const std::vector<int32_t> prompt = Tokens(20, w.config.vocab_size);
  const int s = Prefilled(*engine, prompt);
  const absl::StatusOr<int> copy = CopySequence(*engine, s);
  ASSERT_TRUE(copy.ok()) << copy.status();
  EXPECT_EQ(CopySequence(*engine, s).status().code(), absl::StatusCode::kResourceExhausted);
  // Removing the copy gives its slot and pages back: copying again succeeds.
  ASSERT_TRUE(engine->RemoveSequence(*copy).ok());
  const absl::StatusOr<int> again = CopySequence(*engine, s);
  ASSERT_TRUE(again.ok()) << again.status();
  ASSERT_TRUE(engine->RemoveSequence(*again).ok());
  // An empty sequence copies to an empty one.
  const int empty = *engine->AddSequence();
  ASSERT_TRUE(engine->RemoveSequence(s).ok());
  const absl::StatusOr<int> empty_copy = CopySequence(*engine, empty);
  ASSERT_TRUE(empty_copy.ok()) << empty_copy.status();
  EXPECT_EQ(engine->SequenceLength(*empty_copy), 0);
}

TEST(KvTransferTest, CopyRefusesMovedSequencesAndFactoryTiers) {
  const ModelWeights w = Stories260K();
  auto engine = MakeEngine(w, Options({}));
  ASSERT_TRUE(engine);
  const std::vector<int32_t> prompt = Tokens(20, w.config.vocab_size);
  const int s = Prefilled(*engine, prompt);
  EXPECT_TRUE(CheckCopyable(*engine, s).ok());
  ASSERT_TRUE(engine->SetSequencePosition(s, 25).ok());  // as if retention dropped 5 tokens
  EXPECT_EQ(CheckCopyable(*engine, s).code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(CopySequence(*engine, s).status().code(), absl::StatusCode::kFailedPrecondition);

  const Prepared p = DefaultProfile(w);
  EngineOptions o = Options(p.compression);
  o.value_tier_factory = InProcessTierFactory();
  auto tiered = MakeEngine(p.weights, o);
  ASSERT_TRUE(tiered);
  const absl::StatusOr<int> t = tiered->AddSequenceWithTokens(20);  // decode-only: no prefill
  ASSERT_TRUE(t.ok()) << t.status();
  const absl::StatusOr<int> copy = CopySequence(*tiered, *t);
  EXPECT_EQ(copy.status().code(), absl::StatusCode::kFailedPrecondition) << copy.status();
  EXPECT_EQ(tiered->SequenceLength(1 - *t), -1) << "the refused copy took a sequence";
}

TEST(KvTransferTest, PlainModelContinuesBitForBit) {
  const ModelWeights w = Stories260K();
  const EngineOptions o = Options({});
  ExpectTransferContinuesBitForBit(w, o, o);
}

TEST(KvTransferTest, DefaultProfileContinuesBitForBitWithAFactoryTier) {
  const Prepared p = DefaultProfile(Stories260K());
  const EngineOptions a = Options(p.compression);
  EngineOptions b = a;
  int factory_calls = 0;
  b.value_tier_factory =
      [&](int page_size, int num_pages,
          std::vector<KvSectionLayout> sections) -> absl::StatusOr<std::unique_ptr<ValueTier>> {
    ++factory_calls;
    EXPECT_EQ(page_size, a.kv_page_size);
    EXPECT_EQ(num_pages, 2 * 128 / a.kv_page_size);
    EXPECT_EQ(sections.size(), 3u);  // cache layers 2, 3 (dense below full_layers) and 4 (SwiftKV)
    auto tier = InProcessValueTier::Create(page_size, num_pages, std::move(sections));
    if (!tier.ok()) return tier.status();
    return std::unique_ptr<ValueTier>(std::move(*tier));
  };
  ExpectTransferContinuesBitForBit(p.weights, a, b);
  EXPECT_EQ(factory_calls, 1);
}

// Records the observer calls that matter here, in order.
class StoreLog : public ForwardObserver, public CacheLayerObserver {
 public:
  void LayerInput(int layer, const float*, int) override { log.push_back("layer" + S(layer)); }
  void Queries(int, const float*, int64_t, int) override {}
  void CachedKv(int cache_layer, const float*, const float*, int64_t, int) override {
    log.push_back("kv" + S(cache_layer));
  }
  void CacheLayerStored(int cache_layer) override {
    log.push_back("stored" + S(cache_layer));
    stored.push_back(cache_layer);
  }
  static std::string S(int i) { return std::to_string(i); }
  std::vector<std::string> log;
  std::vector<int> stored;
};

TEST(KvTransferTest, CacheLayerStoredOncePerCacheLayerInOrder) {
  const ModelWeights w = Stories260K();
  ASSERT_EQ(w.config.n_layers, 5);
  auto plain = MakeEngine(w, Options({}));
  StoreLog log;
  plain->set_observer(&log);
  plain->set_cache_layer_observer(&log);
  const int a = *plain->AddSequence(), b = *plain->AddSequence();
  const std::vector<int32_t> prompt = Tokens(20, w.config.vocab_size);
  int32_t one = 9;
  ASSERT_TRUE(plain->Forward(std::vector<ForwardChunk>{{a, prompt}, {b, {&one, 1}}}).ok());
  EXPECT_EQ(log.stored, (std::vector<int>{0, 1, 2, 3, 4}));
  EXPECT_EQ(log.log[2], "stored0");  // right after layer 0's store, before layer 1 runs
  EXPECT_EQ(log.log[3], "layer1");

  // SwiftKV l=2: caches 2, 3, 4 are stored by one fused store before layer 2 runs.
  ModelWeights swiftkv = w;
  swiftkv.swiftkv = *RewireSwiftKv(w, 2, 1);
  auto engine = MakeEngine(swiftkv, Options({}));
  StoreLog swift_log;
  engine->set_observer(&swift_log);
  engine->set_cache_layer_observer(&swift_log);
  const int s = *engine->AddSequence();
  ForwardChunk chunk{s, prompt};
  ASSERT_TRUE(engine->Forward({&chunk, 1}).ok());
  const std::vector<std::string> expected = {"layer0",  "kv0",     "stored0", "layer1", "kv1",
                                             "stored1", "kv2",     "kv3",     "kv4",    "stored2",
                                             "stored3", "stored4", "layer2",  "layer3", "layer4"};
  EXPECT_EQ(swift_log.log, expected);
}

// A prefill worker ships each cache layer's pages from CacheLayerStored, while later layers still
// compute: the pages equal those exported after the Forward.
class StreamingExporter : public CacheLayerObserver {
 public:
  StreamingExporter(Engine& engine, int sequence) : engine_(engine), sequence_(sequence) {}
  void CacheLayerStored(int cache_layer) override {
    const int n = NumKvPages(engine_.SequenceLength(sequence_), engine_.options().kv_page_size);
    for (int p = 0; p < n; ++p) {
      auto page = EncodeSequencePage(engine_, sequence_, cache_layer, p, kRequest, kCalibration);
      EXPECT_TRUE(page.ok()) << page.status();
      pages.push_back(page.ok() ? *page : std::string());
    }
  }
  std::vector<std::string> pages;

 private:
  Engine& engine_;
  int sequence_;
};

TEST(KvTransferTest, PagesExportedFromCacheLayerStoredEqualThoseAfterForward) {
  const Prepared p = DefaultProfile(Stories260K());
  auto engine = MakeEngine(p.weights, Options(p.compression));
  const int s = *engine->AddSequence();
  StreamingExporter exporter(*engine, s);
  engine->set_cache_layer_observer(&exporter);
  const std::vector<int32_t> prompt = Tokens(40, p.weights.config.vocab_size);
  ForwardChunk chunk{s, prompt};
  ASSERT_TRUE(engine->Forward({&chunk, 1}).ok());
  engine->set_cache_layer_observer(nullptr);
  EXPECT_EQ(exporter.pages.size(), 5u * 3);
  EXPECT_EQ(exporter.pages, ExportSequence(*engine, s));
}

TEST(KvTransferTest, ImportRefusesMismatchedLayoutsAndPages) {
  const ModelWeights w = Stories260K();
  auto plain = MakeEngine(w, Options({}));
  KvCompression fp8;
  fp8.fp8 = KvScaleMode::kPerTokenHead;
  auto compressed = MakeEngine(w, Options(fp8));
  const int s = *plain->AddSequence();
  const std::vector<int32_t> prompt = Tokens(40, w.config.vocab_size);
  ForwardChunk chunk{s, prompt};
  ASSERT_TRUE(plain->Forward({&chunk, 1}).ok());
  auto encoded = EncodeSequencePage(*plain, s, 1, 2, kRequest, kCalibration);
  ASSERT_TRUE(encoded.ok()) << encoded.status();
  auto page = DecodeKvPage(AsBytes(*encoded));
  ASSERT_TRUE(page.ok()) << page.status();
  EXPECT_EQ(page->header.num_tokens, 8);

  const int other = *compressed->AddSequenceWithTokens(40);
  absl::Status status = ImportKvPage(*compressed, other, *page, true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("layout"), std::string::npos) << status;

  const int shorter = *plain->AddSequenceWithTokens(39);  // its third page holds 7 tokens
  status = ImportKvPage(*plain, shorter, *page, true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("holds 8 tokens"), std::string::npos) << status;
  ASSERT_TRUE(plain->RemoveSequence(shorter).ok());
  const int two_pages = *plain->AddSequenceWithTokens(32);
  status = ImportKvPage(*plain, two_pages, *page, true);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(status.message()).find("pages [0, 2)"), std::string::npos) << status;
  EXPECT_EQ(ImportKvPage(*plain, 5, *page, true).code(), absl::StatusCode::kNotFound);

  EXPECT_EQ(EncodeSequencePage(*plain, s, 5, 0, 0, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EncodeSequencePage(*plain, s, 0, 3, 0, 0).status().code(),
            absl::StatusCode::kOutOfRange);
  EXPECT_EQ(EncodeSequencePage(*plain, 7, 0, 0, 0, 0).status().code(), absl::StatusCode::kNotFound);
}

TEST(KvTransferTest, FactoryTierEngineRunsDecodeStepsOnly) {
  const Prepared p = DefaultProfile(Stories260K());
  EngineOptions o = Options(p.compression);
  o.value_tier_factory = InProcessTierFactory();
  auto engine = MakeEngine(p.weights, o);
  const int s = *engine->AddSequence();
  const std::vector<int32_t> prompt = Tokens(5, p.weights.config.vocab_size);
  ForwardChunk chunk{s, prompt};
  const absl::Status status = engine->Forward({&chunk, 1}).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(std::string(status.message()).find("value_tier_factory"), std::string::npos);
  EXPECT_EQ(engine->SequenceLength(s), 0);
  // One-token chunks run.
  EXPECT_FALSE(Step(*engine, s, prompt[0]).empty());
  EXPECT_EQ(engine->SequenceLength(s), 1);

  // Without KCache the factory is never needed: prefill runs.
  EngineOptions no_kcache = o;
  no_kcache.compression.kcache = {};
  no_kcache.value_tier_factory =
      [](int, int, std::vector<KvSectionLayout>) -> absl::StatusOr<std::unique_ptr<ValueTier>> {
    ADD_FAILURE() << "factory called without KCache layers";
    return absl::InternalError("unexpected");
  };
  auto dense = MakeEngine(p.weights, no_kcache);
  const int d = *dense->AddSequence();
  ForwardChunk dense_chunk{d, prompt};
  EXPECT_TRUE(dense->Forward({&dense_chunk, 1}).ok());

  // A factory's error fails Create.
  o.value_tier_factory =
      [](int, int, std::vector<KvSectionLayout>) -> absl::StatusOr<std::unique_ptr<ValueTier>> {
    return absl::UnavailableError("no store");
  };
  EXPECT_EQ(LlamaEngine::Create(p.weights, o).status().code(), absl::StatusCode::kUnavailable);
}

TEST(KvTransferTest, AddSequenceWithTokensTakesAndGivesBackEverything) {
  const ModelWeights w = MakeRandomModel(
      [] {
        ModelConfig c;
        c.dim = 48;
        c.hidden_dim = 100;
        c.n_layers = 3;
        c.n_heads = 6;
        c.n_kv_heads = 2;
        c.vocab_size = 300;
        c.max_seq_len = 96;
        return c;
      }(),
      1);
  EngineOptions o;
  o.max_context = 24;
  o.max_sequences = 2;
  o.kv_page_size = 4;
  o.kv_pages = 6;  // 24 tokens in all
  auto engine = MakeEngine(w, o);
  EXPECT_EQ(engine->AddSequenceWithTokens(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->AddSequenceWithTokens(25).status().code(), absl::StatusCode::kInvalidArgument);
  const int full = *engine->AddSequenceWithTokens(24);
  EXPECT_EQ(engine->SequenceLength(full), 24);
  EXPECT_TRUE(engine->SequencePage(full, 2, 5).ok());
  EXPECT_EQ(engine->SequencePage(full, 2, 6).status().code(), absl::StatusCode::kOutOfRange);
  EXPECT_EQ(engine->SequencePage(full, 3, 0).status().code(), absl::StatusCode::kOutOfRange);
  // No page left: refused, and the sequence slot is not kept.
  EXPECT_EQ(engine->AddSequenceWithTokens(1).status().code(), absl::StatusCode::kResourceExhausted);
  const int empty = *engine->AddSequence();
  EXPECT_EQ(engine->AddSequenceWithTokens(1).status().code(),
            absl::StatusCode::kResourceExhausted);  // no slot
  ASSERT_TRUE(engine->RemoveSequence(full).ok());
  EXPECT_EQ(engine->SequencePage(full, 0, 0).status().code(), absl::StatusCode::kNotFound);
  ASSERT_TRUE(engine->RemoveSequence(empty).ok());
  // Every page came back: two sequences of 12 fit again.
  const int a = *engine->AddSequenceWithTokens(12), b = *engine->AddSequenceWithTokens(12);
  EXPECT_EQ(engine->SequenceLength(a) + engine->SequenceLength(b), 24);
  const KvPageSlots slots = *engine->SequencePage(b, 0, 2);
  EXPECT_EQ(slots.tier_section, -1);
  EXPECT_NE(slots.k, slots.v);
}

}  // namespace
}  // namespace pdserve
