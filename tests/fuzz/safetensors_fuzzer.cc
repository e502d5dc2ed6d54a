// libFuzzer target for Hugging Face checkpoint files: each input is read both as a safetensors file
// (ReadSafetensors) and as a config.json (ReadJsonFile, then ParseHfConfig). Beyond ASan and UBSan
// it checks that every tensor of an accepted safetensors file is the size its shape says and that
// the tensors viewing the mapping lie inside the file without overlapping, and that an accepted
// config is valid with SwiftKV fields in range. Built and run by tests/fuzz/fuzz.sh; seeds in
// corpus/safetensors.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/base/json_fields.h"
#include "core/formats/hf_config.h"
#include "core/formats/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace pdserve::fuzz {
namespace {

void CheckSafetensors(const SafetensorsFile& file, size_t size) {
  Check(file.file->size() == size, "the mapping is the whole file");
  std::vector<std::pair<uintptr_t, size_t>> mapped;  // [start, bytes) of views into the mapping
  for (const auto& [name, tensor] : file.tensors) {
    Check(name != "__metadata__", "__metadata__ is no tensor");
    Check(std::all_of(tensor.shape.begin(), tensor.shape.end(), [](int64_t d) { return d >= 0; }),
          "dimensions are non-negative");
    Check(tensor.NumBytes() <= size, "a tensor fits in the file");
    if (tensor.owner == file.file) {
      CheckInside(tensor, file.file->data(), size);
      mapped.emplace_back(reinterpret_cast<uintptr_t>(tensor.data), tensor.NumBytes());
    } else {
      Check(tensor.owner != nullptr && (tensor.data != nullptr || tensor.NumBytes() == 0),
            "a copied tensor owns its bytes");
    }
  }
  std::sort(mapped.begin(), mapped.end());
  for (size_t i = 1; i < mapped.size(); ++i) {
    Check(mapped[i - 1].first + mapped[i - 1].second <= mapped[i].first, "tensors do not overlap");
  }
}

void CheckConfig(const HfConfig& config) {
  Check(config.model.Validate().ok(), "a parsed config is valid");
  if (!config.swiftkv) return;
  const HfSwiftKvConfig& swiftkv = *config.swiftkv;
  const int layers = config.model.n_layers;
  Check(swiftkv.layer >= 0 && swiftkv.layer <= layers && swiftkv.group >= 1 &&
            (layers - swiftkv.layer) % swiftkv.group == 0,
        "SwiftKV fields are in range");
}

void FuzzOne(std::string_view input) {
  const std::string path = ScratchDir::Get().Write("model.safetensors", input);
  const absl::StatusOr<SafetensorsFile> file = ReadSafetensors(path);
  if (file.ok()) {
    CheckSafetensors(*file, input.size());
  } else {
    CheckRefusal(file.status(), path);
  }
  const absl::StatusOr<Json> json = ReadJsonFile(path);
  if (!json.ok()) {
    CheckRefusal(json.status(), path);
    return;
  }
  const absl::StatusOr<HfConfig> config = ParseHfConfig(*json, path);
  if (config.ok()) {
    CheckConfig(*config);
  } else {
    CheckRefusal(config.status(), path);
  }
}

}  // namespace
}  // namespace pdserve::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  pdserve::fuzz::FuzzOne(std::string_view(reinterpret_cast<const char*>(data), size));
  return 0;
}
