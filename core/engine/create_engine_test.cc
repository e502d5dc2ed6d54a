// CreateEngine picks the engine by device; --device parsing; a CUDA engine without a device (or
// without the backend) is refused with a reason, before anything is allocated.
#include "core/engine/create_engine.h"

#include "core/engine/llama_engine.h"
#include "core/model/random_model.h"
#include "gtest/gtest.h"

namespace pdserve {
namespace {

ModelConfig Config() {
  ModelConfig c;
  c.dim = 32;
  c.hidden_dim = 64;
  c.n_layers = 2;
  c.n_heads = 4;
  c.n_kv_heads = 2;
  c.vocab_size = 64;
  c.max_seq_len = 32;
  return c;
}

TEST(DeviceTest, ParsesBothDevicesAndNamesTheChoicesOtherwise) {
  EXPECT_EQ(*ParseDevice("cpu"), Device::kCpu);
  EXPECT_EQ(*ParseDevice("CUDA"), Device::kCuda);
  absl::StatusOr<Device> bad = ParseDevice("gpu");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(bad.status().message().find("cpu, cuda"), std::string::npos);
  EXPECT_STREQ(DeviceName(Device::kCuda), "cuda");
}

TEST(CreateEngineTest, CpuGivesAWorkingEngine) {
  const ModelWeights weights = MakeRandomModel(Config(), 3);
  EngineOptions options;
  absl::StatusOr<std::unique_ptr<Engine>> engine = CreateEngine(weights, options);
  ASSERT_TRUE(engine.ok()) << engine.status();
  const int sequence = *(*engine)->AddSequence();
  const int32_t tokens[] = {1, 5, 9};
  ForwardChunk chunk{sequence, tokens};
  absl::StatusOr<std::span<const float>> logits = (*engine)->Forward({&chunk, 1});
  ASSERT_TRUE(logits.ok()) << logits.status();
  EXPECT_EQ(logits->size(), static_cast<size_t>(Config().vocab_size));
}

TEST(CreateEngineTest, CudaWithoutADeviceOrBackendIsRefusedWithTheReason) {
  if (CudaUnavailableReason().empty()) GTEST_SKIP() << "a CUDA device is present";
  EngineOptions options;
  options.device = Device::kCuda;
  absl::StatusOr<std::unique_ptr<Engine>> engine =
      CreateEngine(MakeRandomModel(Config(), 3), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(engine.status().message());
  EXPECT_NE(message.find(CudaUnavailableReason()), std::string::npos) << message;
}

TEST(CreateEngineTest, CpuEngineRefusesTheCudaDeviceDirectly) {
  EngineOptions options;
  options.device = Device::kCuda;
  absl::StatusOr<std::unique_ptr<LlamaEngine>> engine =
      LlamaEngine::Create(MakeRandomModel(Config(), 3), options);
  ASSERT_FALSE(engine.ok());
  EXPECT_EQ(engine.status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace pdserve
