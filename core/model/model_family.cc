#include "core/model/model_family.h"

#include <iterator>

#include "absl/strings/str_cat.h"

namespace pdserve {
namespace {

constexpr FamilyTraits kFamilies[] = {
    {ModelFamily::kLlama, "llama", "llama", "LlamaForCausalLM", "llama", RopePairing::kAdjacent,
     /*qkv_bias=*/false, /*qk_norm=*/false},
    {ModelFamily::kMistral, "mistral", "mistral", "MistralForCausalLM", "llama",
     RopePairing::kAdjacent, /*qkv_bias=*/false, /*qk_norm=*/false},
    {ModelFamily::kQwen2, "qwen2", "qwen2", "Qwen2ForCausalLM", "qwen2", RopePairing::kSplitHalf,
     /*qkv_bias=*/true, /*qk_norm=*/false},
    {ModelFamily::kQwen3, "qwen3", "qwen3", "Qwen3ForCausalLM", "qwen3", RopePairing::kSplitHalf,
     /*qkv_bias=*/false, /*qk_norm=*/true},
};

constexpr bool InDeclarationOrder() {
  for (size_t i = 0; i < std::size(kFamilies); ++i) {
    if (static_cast<size_t>(kFamilies[i].family) != i) return false;
  }
  return true;
}
static_assert(InDeclarationOrder(), "Traits() indexes kFamilies by ModelFamily");

template <typename Field>
const FamilyTraits* FindBy(Field field, std::string_view value) {
  for (const FamilyTraits& traits : kFamilies) {
    if (traits.*field == value) return &traits;
  }
  return nullptr;
}

}  // namespace

std::span<const FamilyTraits> AllFamilies() { return kFamilies; }

const FamilyTraits& Traits(ModelFamily family) { return kFamilies[static_cast<int>(family)]; }

const FamilyTraits* FamilyByHfModelType(std::string_view model_type) {
  return FindBy(&FamilyTraits::hf_model_type, model_type);
}

const FamilyTraits* FamilyByGgufArchitecture(std::string_view architecture) {
  return FindBy(&FamilyTraits::gguf_architecture, architecture);  // "llama": Llama, listed first
}

const FamilyTraits* FamilyByName(std::string_view name) {
  return FindBy(&FamilyTraits::name, name);
}

std::string FamilyNames() {
  std::string names;
  for (const FamilyTraits& traits : kFamilies) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", traits.name);
  }
  return names;
}

}  // namespace pdserve
