// libFuzzer target for tokenizer files: a Hugging Face tokenizer.json (ReadHfTokenizerJson, then
// CreateTokenizer) and a SentencePiece tokenizer.model (LoadSentencePieceTokenizer). The input up
// to its first NUL byte is the tokenizer.json and what follows the tokenizer_config.json beside it
// (none without a NUL: JSON text holds no raw NUL); the whole input is also the tokenizer.model.
// Beyond ASan and UBSan it checks that an accepted vocabulary is valid and that every accepted
// tokenizer encodes and decodes (tokenizer_check.h). libsentencepiece itself runs uninstrumented
// in pdserve_spm_shim (its own link namespace), so only pdserve's side of that loader is covered.
// Built and run by tests/fuzz/fuzz.sh; seeds in corpus/tokenizer.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/tokenizer/create_tokenizer.h"
#include "core/tokenizer/hf_tokenizer_json.h"
#include "core/tokenizer/sentencepiece_tokenizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/tokenizer_check.h"

namespace pdserve::fuzz {
namespace {

void FuzzHfTokenizerJson(std::string_view input) {
  ScratchDir& dir = ScratchDir::Get();
  const size_t nul = input.find('\0');
  const std::string path = dir.Write("tokenizer.json", input.substr(0, nul));
  if (nul == std::string_view::npos) {
    dir.Remove("tokenizer_config.json");
  } else {
    dir.Write("tokenizer_config.json", input.substr(nul + 1));
  }
  const absl::StatusOr<Vocabulary> vocabulary = ReadHfTokenizerJson(path);
  if (!vocabulary.ok()) {
    CheckRefusal(vocabulary.status());
    return;
  }
  Check(vocabulary->Validate().ok(), "a loaded vocabulary is valid");
  Check(vocabulary->model == TokenizerModel::kByteLevelBpe, "tokenizer.json is byte-level BPE");
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = CreateTokenizer(*vocabulary);
  if (tokenizer.ok()) CheckTokenizer(**tokenizer, SampleText(input));
}

void FuzzSentencePiece(std::string_view input) {
  const std::string path = ScratchDir::Get().Write("tokenizer.model", input);
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = LoadSentencePieceTokenizer(path);
  if (tokenizer.ok()) {
    CheckTokenizer(**tokenizer, SampleText(input));
  } else {
    CheckRefusal(tokenizer.status(), path);
  }
}

}  // namespace
}  // namespace pdserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  pdserve::fuzz::FuzzHfTokenizerJson(input);
  pdserve::fuzz::FuzzSentencePiece(input);
  return 0;
}
