// libFuzzer target for GGUF model files: GgufFile::Open, then LoadGgufModel and a tokenizer over
// the vocabulary it reads. Beyond ASan and UBSan it checks that an accepted file's metadata and
// tensor indexes are consistent, that every tensor lies inside the file at an aligned offset of
// the data section, and that a loaded model's weights are views into the file and its tokenizer
// works (tokenizer_check.h). Built and run by tests/fuzz/fuzz.sh; seeds in corpus/gguf.
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "core/formats/gguf_file.h"
#include "core/formats/gguf_model.h"
#include "core/tokenizer/create_tokenizer.h"
#include "tests/fuzz/fuzz_support.h"
#include "tests/fuzz/model_check.h"
#include "tests/fuzz/tokenizer_check.h"

namespace pdserve::fuzz {
namespace {

void CheckValue(const GgufValue& value) {
  if (value.element_type() == GgufType::kString) {
    const std::vector<std::string>* strings = value.AsStringArray();
    Check(value.is_array() ? strings != nullptr && strings->size() == value.size()
                           : value.AsString() != nullptr && value.size() == 1,
          "a string value holds its strings");
  } else {
    Check(value.raw_elements().size() == value.size() * GgufTypeBytes(value.element_type()),
          "a numeric value holds count x element bytes");
    Check(value.is_array() || value.size() == 1, "a scalar holds one element");
  }
  value.AsInt();
  value.AsFloat();
  value.AsBool();
  value.AsIntArray();
  value.AsFloatArray();
  value.Describe();
}

void CheckFile(const GgufFile& file, size_t size) {
  const std::shared_ptr<const MappedFile>& mapping = file.mapped_file();
  Check(mapping->size() == size, "the mapping is the whole file");
  Check(file.version() == 2 || file.version() == 3, "the version is 2 or 3");
  const uint64_t alignment = file.alignment();
  Check(alignment != 0 && (alignment & (alignment - 1)) == 0, "the alignment is a power of two");
  Check(file.data_offset() % alignment == 0, "the data section is aligned");
  for (const auto& [key, value] : file.metadata()) {
    Check(file.FindValue(key) == &value, "every key finds its own value");
    CheckValue(value);
  }
  for (const GgufTensor& t : file.tensors()) {
    Check(file.FindTensor(t.name) == &t, "every tensor name finds its own tensor");
    Check(t.offset % alignment == 0, "tensor offsets are aligned");
    Check(t.tensor.data == mapping->data() + file.data_offset() + t.offset,
          "a tensor's data is at its offset in the data section");
    Check(t.tensor.owner == mapping, "tensors are owned by the mapping");
    CheckInside(t.tensor, mapping->data(), mapping->size());
    Check(!t.tensor.shape.empty() && t.tensor.cols() % BlockElements(t.tensor.dtype) == 0,
          "tensor rows are whole blocks");
  }
}

// Opens `input` as a GGUF file and, when that succeeds, as a model.
void FuzzOne(std::string_view input) {
  const std::string path = ScratchDir::Get().Write("model.gguf", input);
  const absl::StatusOr<GgufFile> file = GgufFile::Open(path);
  if (!file.ok()) {
    CheckRefusal(file.status(), path);
    return;
  }
  CheckFile(*file, input.size());
  const absl::StatusOr<GgufModel> model = LoadGgufModel(path);
  if (!model.ok()) {
    CheckRefusal(model.status(), path);
    return;
  }
  CheckLoadedWeights(model->weights, input.size());
  Check(model->vocabulary.Validate().ok(), "a loaded vocabulary is valid");
  Check(model->vocabulary.size() == model->weights.config.vocab_size,
        "the vocabulary has vocab_size tokens");
  const absl::StatusOr<std::unique_ptr<Tokenizer>> tokenizer = CreateTokenizer(model->vocabulary);
  if (tokenizer.ok()) CheckTokenizer(**tokenizer, SampleText(input));
}

}  // namespace
}  // namespace pdserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pdserve::fuzz::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
