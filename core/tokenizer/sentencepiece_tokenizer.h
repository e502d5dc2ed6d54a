// A Tokenizer over a SentencePiece model file (tokenizer.model of Hugging Face Llama checkpoints),
// backed by libsentencepiece. The library is reached through pdserve_spm_shim, a module loaded
// with dlmopen into a link namespace of its own (sentencepiece_shim/spm_shim.h), because Debian's
// libsentencepiece exports a protobuf that clashes with the gRPC services'. Encoding is the
// library's; decoding follows the Tokenizer contract (byte tokens give their byte,
// control/unknown/unused tokens nothing, "▁" is a space and the leading space after BOS is
// dropped). The tokenizer owns its processor; immutable after loading and safe to use from many
// threads.
#ifndef PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
#define PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/tokenizer/tokenizer.h"

namespace pdserve {

// Loads the serialized ModelProto at `path`. NotFound when the file is missing; InvalidArgument
// naming the path (and including libsentencepiece's message) when the library refuses it, or when
// it defines no BOS or EOS control token; FailedPrecondition naming the module's paths when
// pdserve_spm_shim cannot be loaded (it is looked for next to the executable, then in the build
// tree).
//
// ExportVocabulary() reports user-defined pieces as kNormal (libsentencepiece 0.1.97 does not
// expose that type) and reads add_dummy_prefix from the file's NormalizerSpec.
// `chat_template`: the model's (from tokenizer_config.json beside it), empty for none.
absl::StatusOr<std::unique_ptr<Tokenizer>> LoadSentencePieceTokenizer(
    const std::string& path, std::string chat_template = "");

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_TOKENIZER_H_
