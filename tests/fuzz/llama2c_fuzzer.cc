// libFuzzer target for llama2.c files: each input is loaded both as a checkpoint
// (LoadLlama2cCheckpoint) and as a tokenizer.bin (LoadLlama2cTokenizer). Beyond ASan and UBSan it
// checks that an accepted checkpoint's weights are views inside the file (model_check.h) and that
// an accepted tokenizer encodes and decodes (tokenizer_check.h). Built and run by
// tests/fuzz/fuzz.sh; seeds in corpus/llama2c.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/formats/llama2c_checkpoint.h"
#include "core/tokenizer/llama2c_tokenizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_check.h"
#include "tests/fuzz/tokenizer_check.h"

namespace pdserve::fuzz {
namespace {

void FuzzOne(std::string_view input) {
  const std::string path = ScratchDir::Get().Write("llama2c.bin", input);
  const absl::StatusOr<ModelWeights> weights = LoadLlama2cCheckpoint(path);
  if (weights.ok()) {
    CheckLoadedWeights(*weights, input.size());
  } else {
    CheckRefusal(weights.status(), path);
  }
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadLlama2cTokenizer(path);
  if (tokenizer.ok()) {
    CheckTokenizer(**tokenizer, SampleText(input));
  } else {
    CheckRefusal(tokenizer.status());
  }
}

}  // namespace
}  // namespace pdserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pdserve::fuzz::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
