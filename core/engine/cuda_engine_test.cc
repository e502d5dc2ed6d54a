// CudaEngine against LlamaEngine (the reference) on the same weights and inputs: stories260K's
// greedy output, logits under every technique and their combination, batches mixing prefill and
// decode, 16-bit weights, KV pages moved between the two engines (disaggregation through the pinned
// host mirror), and the errors it owes its callers. GPU tests: each skips without a
// device. Tolerances are relative to the largest logit: 1e-4 where the arithmetic is the same
// up to summation order (f32), 2e-2 where FP8 codes or bf16 activations may round differently.
#include "core/engine/cuda_engine.h"

#include <cmath>
#include <cstdlib>
#include <map>
#include <utility>
#include <vector>

#include "core/compress/calibrator.h"
#include "core/compress/profile.h"
#include "core/engine/kv_transfer.h"
#include "core/engine/llama_engine.h"
#include "core/engine/logits_testing.h"
#include "core/engine/sampler.h"
#include "core/formats/model_loader.h"
#include "core/kv/kv_page.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"
#include "kernels/cuda/gpu_test.h"

namespace pdserve {
namespace {

// The build's shared directory, or $PDSERVE_SHARED_DIR (a bundle run on another machine).
std::string SharedDir() {
  const char* env = std::getenv("PDSERVE_SHARED_DIR");
  return env != nullptr ? env : PDSERVE_SHARED_DIR;
}

ModelConfig Config() {
  ModelConfig c;
  c.dim = 64;
  c.hidden_dim = 128;
  c.n_layers = 4;
  c.n_heads = 8;
  c.n_kv_heads = 2;
  c.vocab_size = 256;
  c.max_seq_len = 256;
  c.tied_embeddings = false;
  return c;
}

const ModelWeights& Model() {
  static const ModelWeights* weights = new ModelWeights(MakeRandomModel(Config(), 11));
  return *weights;
}

std::vector<int32_t> Tokens(int n, int salt = 0) {
  std::vector<int32_t> t(n);
  for (int i = 0; i < n; ++i) t[i] = 1 + (i * 37 + salt * 101) % (Config().vocab_size - 1);
  return t;
}

// SwiftKV recovery at l = 2 (group `group`) and ZACK bases, ρ = 0, made once per group.
// Calibration for `profile`'s cache layout (its SwiftKV layer and AcrossKV group), with ZACK bases.
const Calibration& TestCalibration(const CompressionProfile& profile) {
  static std::map<std::pair<int, int>, Calibration>* cache =
      new std::map<std::pair<int, int>, Calibration>;
  auto [it, inserted] = cache->try_emplace({profile.swiftkv_layer, profile.across_kv});
  if (inserted) {
    std::vector<std::vector<int32_t>> sequences;
    for (int s = 0; s < 4; ++s) sequences.push_back(Tokens(128, s + 10));
    CalibrateOptions options;
    options.swiftkv_layer = profile.swiftkv_layer;
    options.across_kv = profile.across_kv;
    options.zack = true;
    options.num_threads = 1;
    absl::StatusOr<Calibration> calibration = Calibrate(Model(), sequences, options, "test");
    EXPECT_TRUE(calibration.ok()) << calibration.status();
    it->second = *calibration;
  }
  return it->second;
}

EngineOptions Options(Device device, const KvCompression& compression = {}) {
  EngineOptions o;
  o.device = device;
  o.max_batch_tokens = 256;
  o.max_sequences = 4;
  o.kv_page_size = 16;
  o.compression = compression;
  return o;
}

std::unique_ptr<Engine> Make(const ModelWeights& weights, const EngineOptions& options) {
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      options.device == Device::kCuda
          ? absl::StatusOr<std::unique_ptr<Engine>>(CudaEngine::Create(weights, options))
          : absl::StatusOr<std::unique_ptr<Engine>>(LlamaEngine::Create(weights, options));
  EXPECT_TRUE(engine.ok()) << engine.status();
  return engine.ok() ? std::move(*engine) : nullptr;
}

// Logits of a prompt's last token, prefilled in chunks of `chunk`, then of `decode`
// teacher-forced decode steps; all rows concatenated.
std::vector<float> RunPrompt(Engine& engine, const std::vector<int32_t>& prompt, int decode,
                             int chunk) {
  const int sequence = *engine.AddSequence();
  std::vector<float> out;
  std::span<const float> last;
  for (size_t begin = 0; begin < prompt.size(); begin += chunk) {
    const size_t n = std::min<size_t>(chunk, prompt.size() - begin);
    ForwardChunk c{sequence, std::span(prompt).subspan(begin, n)};
    absl::StatusOr<std::span<const float>> logits = engine.Forward({&c, 1});
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    last = *logits;
  }
  out.assign(last.begin(), last.end());
  const std::vector<int32_t> next = Tokens(decode, 99);
  for (int i = 0; i < decode; ++i) {
    ForwardChunk c{sequence, std::span(next).subspan(i, 1)};
    absl::StatusOr<std::span<const float>> logits = engine.Forward({&c, 1});
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    out.insert(out.end(), logits->begin(), logits->end());
  }
  EXPECT_TRUE(engine.RemoveSequence(sequence).ok());
  return out;
}

TEST(CudaEngineTest, Stories260KGreedyOutputEqualsTheCpuEngine) {
  PDSERVE_REQUIRE_GPU();
  absl::StatusOr<LoadedModel> model = LoadModel(SharedDir() + "/models/stories260K/stories260K.bin",
                                                SharedDir() + "/models/stories260K/tok512.bin");
  ASSERT_TRUE(model.ok()) << model.status();
  std::vector<std::vector<int32_t>> outputs;
  for (Device device : {Device::kCpu, Device::kCuda}) {
    std::unique_ptr<Engine> engine = Make(model->weights, Options(device));
    ASSERT_NE(engine, nullptr);
    const int sequence = *engine->AddSequence();
    std::vector<int32_t> tokens = {1};  // BOS, as llama2.c starts
    for (int step = 0; step < 200; ++step) {
      ForwardChunk chunk{sequence, std::span(tokens).last(1)};
      absl::StatusOr<std::span<const float>> logits = engine->Forward({&chunk, 1});
      ASSERT_TRUE(logits.ok()) << logits.status();
      tokens.push_back(ArgMax(*logits));
    }
    outputs.push_back(tokens);
  }
  EXPECT_EQ(outputs[1], outputs[0]);
}

struct TechniqueCase {
  const char* name;
  CompressionProfile profile;
  bool calibrated;  // served with TestCalibration(profile)
  double tolerance;
};

std::vector<TechniqueCase> Techniques() {
  std::vector<TechniqueCase> cases;
  cases.push_back({"plain", {}, false, 1e-4});
  CompressionProfile swiftkv;
  swiftkv.swiftkv_layer = 2;
  swiftkv.swiftkv_recovery = true;
  cases.push_back({"swiftkv", swiftkv, true, 1e-4});
  CompressionProfile across = swiftkv;
  across.across_kv = 2;
  cases.push_back({"swiftkv+acrosskv", across, true, 1e-4});
  CompressionProfile zack;
  zack.zack = true;
  zack.zack_rho = 0.05;
  cases.push_back({"zack", zack, true, 1e-4});
  CompressionProfile fp8;
  fp8.fp8 = KvScaleMode::kPerTokenHead;
  cases.push_back({"fp8", fp8, false, 2e-2});
  CompressionProfile kcache;
  kcache.kcache = {.top_n = 8, .full_layers = 1, .sink = 2, .recent = 4};
  cases.push_back({"kcache", kcache, false, 1e-3});
  CompressionProfile all = across;
  all.zack = true;
  all.zack_rho = 0.05;
  all.fp8 = KvScaleMode::kPerTokenHead;
  all.kcache = {.top_n = 8, .full_layers = 1, .sink = 2, .recent = 4};
  cases.push_back({"all", all, true, 2e-2});
  return cases;
}

absl::StatusOr<PreparedModel> Prepare(const TechniqueCase& c) {
  return PrepareModel(Model(), c.profile, c.calibrated ? &TestCalibration(c.profile) : nullptr);
}

// Runs without a GPU too, so that a case the model refuses fails on every machine, not only on
// the rare one with a device.
TEST(CudaEngineTest, EveryTechniqueCaseIsServable) {
  for (const TechniqueCase& c : Techniques()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<PreparedModel> prepared = Prepare(c);
    EXPECT_TRUE(prepared.ok()) << prepared.status();
  }
}

TEST(CudaEngineTest, EveryTechniqueMatchesTheCpuEngine) {
  PDSERVE_REQUIRE_GPU();
  for (const TechniqueCase& c : Techniques()) {
    SCOPED_TRACE(c.name);
    absl::StatusOr<PreparedModel> prepared = Prepare(c);
    ASSERT_TRUE(prepared.ok()) << prepared.status();
    // Chunks of 48 cross page boundaries (pages of 16 hold 3 per chunk), 20 decode steps.
    const std::vector<int32_t> prompt = Tokens(150, 3);
    std::unique_ptr<Engine> cpu =
        Make(prepared->weights, Options(Device::kCpu, prepared->compression));
    std::unique_ptr<Engine> gpu =
        Make(prepared->weights, Options(Device::kCuda, prepared->compression));
    ASSERT_NE(gpu, nullptr);
    EXPECT_LE(MaxRelativeError(RunPrompt(*gpu, prompt, 20, 48), RunPrompt(*cpu, prompt, 20, 48)),
              c.tolerance);
  }
}

TEST(CudaEngineTest, MixedBatchEqualsSequencesRunAlone) {
  PDSERVE_REQUIRE_GPU();
  std::unique_ptr<Engine> engine = Make(Model(), Options(Device::kCuda));
  ASSERT_NE(engine, nullptr);
  // Alone: a 40-token prompt, and a 70-token prompt followed by one decode step.
  const std::vector<int32_t> a = Tokens(40, 1), b = Tokens(70, 2), step = {17};
  const std::vector<float> alone_a = RunPrompt(*engine, a, 0, 40);
  const int sb = *engine->AddSequence();
  ForwardChunk prefill_b{sb, b};
  ASSERT_TRUE(engine->Forward({&prefill_b, 1}).ok());
  ForwardChunk decode_b{sb, step};
  absl::StatusOr<std::span<const float>> alone = engine->Forward({&decode_b, 1});
  ASSERT_TRUE(alone.ok());
  const std::vector<float> alone_b(alone->begin(), alone->end());
  ASSERT_TRUE(engine->RemoveSequence(sb).ok());
  // Together: b's prefill first, then one batch of a's prompt and b's decode step.
  const int sa = *engine->AddSequence();
  const int sb2 = *engine->AddSequence();
  ForwardChunk again_b{sb2, b};
  ASSERT_TRUE(engine->Forward({&again_b, 1}).ok());
  const ForwardChunk batch[] = {{sa, a}, {sb2, step}};
  absl::StatusOr<std::span<const float>> together = engine->Forward(batch);
  ASSERT_TRUE(together.ok()) << together.status();
  const size_t vocab = Config().vocab_size;
  ASSERT_EQ(together->size(), 2 * vocab);
  EXPECT_LE(MaxRelativeError({together->begin(), together->begin() + vocab}, alone_a), 1e-5);
  EXPECT_LE(MaxRelativeError({together->begin() + vocab, together->end()}, alone_b), 1e-5);
}

TEST(CudaEngineTest, Bf16WeightsMatchTheCpuEngineInBf16) {
  PDSERVE_REQUIRE_GPU();
  EngineOptions cpu_options = Options(Device::kCpu), gpu_options = Options(Device::kCuda);
  cpu_options.weight_dtype = gpu_options.weight_dtype = DType::kBF16;
  const std::vector<int32_t> prompt = Tokens(100, 4);
  std::unique_ptr<Engine> cpu = Make(Model(), cpu_options), gpu = Make(Model(), gpu_options);
  ASSERT_NE(gpu, nullptr);
  EXPECT_LE(MaxRelativeError(RunPrompt(*gpu, prompt, 10, 100), RunPrompt(*cpu, prompt, 10, 100)),
            2e-2);
}

TEST(CudaEngineTest, BadInputIsRefusedAndChangesNothing) {
  PDSERVE_REQUIRE_GPU();
  std::unique_ptr<Engine> engine = Make(Model(), Options(Device::kCuda));
  ASSERT_NE(engine, nullptr);
  const int sequence = *engine->AddSequence();
  const int32_t bad[] = {1, Config().vocab_size};
  ForwardChunk chunk{sequence, bad};
  absl::StatusOr<std::span<const float>> logits = engine->Forward({&chunk, 1});
  ASSERT_FALSE(logits.ok());
  EXPECT_EQ(logits.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(engine->SequenceLength(sequence), 0);
}

// Every technique at once (SwiftKV + AcrossKV + ZACK + FP8 + KCache): every page layout there is.
absl::StatusOr<PreparedModel> AllTechniques() { return Prepare(Techniques().back()); }

// As a prefill worker does: each cache layer's pages of `sequence`, encoded from
// CacheLayerStored while the Forward runs.
class LayerExporter : public CacheLayerObserver {
 public:
  LayerExporter(Engine& engine, int sequence) : engine_(engine), sequence_(sequence) {}
  void CacheLayerStored(int cache_layer) override {
    layers.push_back(cache_layer);
    const int n = NumKvPages(engine_.SequenceLength(sequence_), engine_.options().kv_page_size);
    for (int p = 0; p < n; ++p) {
      absl::StatusOr<std::string> page = EncodeSequencePage(engine_, sequence_, cache_layer, p,
                                                            /*request_id=*/5, /*calibration=*/6);
      EXPECT_TRUE(page.ok()) << page.status();
      pages.push_back(page.ok() ? *page : std::string());
    }
  }
  std::vector<int> layers;
  std::vector<std::string> pages;

 private:
  Engine& engine_;
  int sequence_;
};

struct Transfer {
  std::vector<int> layers;    // as the exporter's observer heard them
  std::vector<float> decode;  // the importer's logits of the decode steps
};

// Prefills `prompts` on `from` as a prefill worker does: each prompt's leading chunks of 40 alone
// and unobserved, then the last chunk of every prompt in one observed batch. Moves every
// sequence's pages into a new sequence of `to` and runs 12 teacher-forced decode steps there, all
// sequences in each step's batch.
Transfer PrefillHereDecodeThere(Engine& from, Engine& to,
                                const std::vector<std::vector<int32_t>>& prompts) {
  Transfer out;
  std::vector<std::unique_ptr<LayerExporter>> exporters;
  std::vector<ForwardChunk> last_chunks;
  for (const std::vector<int32_t>& prompt : prompts) {
    const int source = *from.AddSequence();
    exporters.push_back(std::make_unique<LayerExporter>(from, source));
    std::span<const int32_t> rest(prompt);
    while (rest.size() > 40) {
      ForwardChunk lead{source, rest.first(40)};
      EXPECT_TRUE(from.Forward({&lead, 1}).ok());
      rest = rest.subspan(40);
    }
    last_chunks.push_back({source, rest});
  }
  struct Fanout : CacheLayerObserver {
    std::vector<std::unique_ptr<LayerExporter>>* exporters;
    void CacheLayerStored(int cache_layer) override {
      for (auto& exporter : *exporters) exporter->CacheLayerStored(cache_layer);
    }
  } fanout;
  fanout.exporters = &exporters;
  from.set_cache_layer_observer(&fanout);
  EXPECT_TRUE(from.Forward(last_chunks).ok());
  from.set_cache_layer_observer(nullptr);
  out.layers = exporters.front()->layers;
  std::vector<int> targets;
  for (size_t i = 0; i < prompts.size(); ++i) {
    absl::StatusOr<int> target = to.AddSequenceWithTokens(static_cast<int>(prompts[i].size()));
    EXPECT_TRUE(target.ok()) << target.status();
    if (!target.ok()) return out;
    targets.push_back(*target);
    for (const std::string& bytes : exporters[i]->pages) {
      absl::StatusOr<KvPageView> page =
          DecodeKvPage({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()});
      EXPECT_TRUE(page.ok()) << page.status();
      if (!page.ok()) return out;
      const absl::Status imported = ImportKvPage(to, *target, *page, /*write_v=*/true);
      EXPECT_TRUE(imported.ok()) << imported;
    }
  }
  const std::vector<int32_t> next = Tokens(12, 99);
  for (size_t i = 0; i < next.size(); ++i) {
    std::vector<ForwardChunk> step;
    for (int target : targets) step.push_back({target, std::span(next).subspan(i, 1)});
    absl::StatusOr<std::span<const float>> logits = to.Forward(step);
    EXPECT_TRUE(logits.ok()) << logits.status();
    if (!logits.ok()) return out;
    out.decode.insert(out.decode.end(), logits->begin(), logits->end());
  }
  return out;
}

// Leaves a 40-token sequence live between freed pages, so that the next sequence's pages are not
// one ascending run: they come back in reverse and around a gap.
void FragmentPool(Engine& engine) {
  const std::vector<int32_t> tokens = Tokens(40, 8);
  const int a = *engine.AddSequence(), b = *engine.AddSequence();
  const ForwardChunk chunks[] = {{a, tokens}, {b, tokens}};
  ASSERT_TRUE(engine.Forward(chunks).ok());
  ASSERT_TRUE(engine.RemoveSequence(a).ok());
}

TEST(CudaEngineTest, KvPagesMoveBetweenTheGpuAndTheCpuEngine) {
  PDSERVE_REQUIRE_GPU();
  absl::StatusOr<PreparedModel> prepared = AllTechniques();
  ASSERT_TRUE(prepared.ok()) << prepared.status();
  EngineOptions cpu_options = Options(Device::kCpu, prepared->compression);
  EngineOptions gpu_options = Options(Device::kCuda, prepared->compression);
  gpu_options.host_kv_pages = true;
  cpu_options.max_sequences = gpu_options.max_sequences = 6;
  // Two prompts exported from one batch. Their last pages are partly filled, and each observed
  // chunk (tokens 120..149, 40..69) starts mid-page, so a page holds tokens of an unobserved and
  // of the observed Forward.
  const std::vector<std::vector<int32_t>> prompt = {Tokens(150, 7), Tokens(70, 9)};
  std::unique_ptr<Engine> cpu = Make(prepared->weights, cpu_options);
  std::unique_ptr<Engine> gpu = Make(prepared->weights, gpu_options);
  std::unique_ptr<Engine> cpu_peer = Make(prepared->weights, cpu_options);
  ASSERT_NE(cpu, nullptr);
  ASSERT_NE(gpu, nullptr);
  ASSERT_NE(cpu_peer, nullptr);
  FragmentPool(*gpu);
  const Transfer reference = PrefillHereDecodeThere(*cpu, *cpu_peer, prompt);
  const Transfer gpu_to_cpu = PrefillHereDecodeThere(*gpu, *cpu, prompt);
  const Transfer cpu_to_gpu = PrefillHereDecodeThere(*cpu_peer, *gpu, prompt);
  EXPECT_EQ(gpu_to_cpu.layers, reference.layers);
  EXPECT_LE(MaxRelativeError(gpu_to_cpu.decode, reference.decode), 2e-2);
  EXPECT_LE(MaxRelativeError(cpu_to_gpu.decode, reference.decode), 2e-2);
}

TEST(CudaEngineTest, PagesStayOnTheDeviceWithoutHostKvPages) {
  PDSERVE_REQUIRE_GPU();
  std::unique_ptr<Engine> engine = Make(Model(), Options(Device::kCuda));
  ASSERT_NE(engine, nullptr);
  EXPECT_EQ(engine->AddSequenceWithTokens(20).status().code(),
            absl::StatusCode::kFailedPrecondition);
  const int sequence = *engine->AddSequence();
  const std::vector<int32_t> prompt = Tokens(20);
  ForwardChunk chunk{sequence, prompt};
  ASSERT_TRUE(engine->Forward({&chunk, 1}).ok());
  EXPECT_EQ(engine->SequencePage(sequence, 0, 0).status().code(),
            absl::StatusCode::kFailedPrecondition);
}

TEST(CudaEngineTest, PerPageFp8ScalesAreRefusedBeforeTouchingTheDevice) {
  KvCompression compression;
  compression.fp8 = KvScaleMode::kPerPageHead;
  absl::StatusOr<std::unique_ptr<CudaEngine>> engine =
      CudaEngine::Create(Model(), Options(Device::kCuda, compression));
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(std::string(engine.status().message()).find("per-page"), std::string::npos);
}

}  // namespace
}  // namespace pdserve
