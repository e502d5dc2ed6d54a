// llama2.c's tokenizer.bin: int32 max_token_length, then per token a float32 merge score, an int32
// byte length and the piece bytes (spaces as ' ', bytes as "<0xNN>", BOS/EOS as "\n<s>\n" and
// "\n</s>\n"). Loaded into a Vocabulary (ids 0/1/2 = unk/bos/eos) for MergeTokenizer.
#ifndef PDSERVE_CORE_TOKENIZER_LLAMA2C_TOKENIZER_H_
#define PDSERVE_CORE_TOKENIZER_LLAMA2C_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

// Reads every token of `path`. InvalidArgument naming the path for truncation, negative or
// oversized lengths, or (when expected_vocab_size > 0) a different token count.
absl::StatusOr<Vocabulary> LoadLlama2cVocabulary(const std::string& path,
                                                 int expected_vocab_size = -1);

absl::StatusOr<std::unique_ptr<Tokenizer>> LoadLlama2cTokenizer(const std::string& path,
                                                                int expected_vocab_size = -1);

// Writes `vocab` in the tokenizer.bin format.
absl::Status WriteLlama2cTokenizer(const std::string& path, const Vocabulary& vocab);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_LLAMA2C_TOKENIZER_H_
