#include "core/tokenizer/create_tokenizer.h"

#include "core/tokenizer/bpe_tokenizer.h"
#include "core/tokenizer/merge_tokenizer.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<Tokenizer>> CreateTokenizer(Vocabulary vocabulary) {
  if (vocabulary.model == TokenizerModel::kByteLevelBpe) {
    absl::StatusOr<std::unique_ptr<BpeTokenizer>> bpe = BpeTokenizer::Create(std::move(vocabulary));
    if (!bpe.ok()) return bpe.status();
    return std::unique_ptr<Tokenizer>(std::move(*bpe));
  }
  absl::StatusOr<std::unique_ptr<MergeTokenizer>> merge =
      MergeTokenizer::Create(std::move(vocabulary));
  if (!merge.ok()) return merge.status();
  return std::unique_ptr<Tokenizer>(std::move(*merge));
}

}  // namespace pdserve
