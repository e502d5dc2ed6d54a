// EncodeSentencePieceModel: serializes a Vocabulary as a SentencePiece ModelProto, the bytes of a
// tokenizer.model file, describing a BPE model with byte fallback and an identity normalizer, so
// that libsentencepiece tokenizes exactly like MergeTokenizer over the same vocabulary (valid
// UTF-8 input). The protobuf wire format is written by hand; no protobuf dependency.
// A pure function; thread-safe.
#ifndef PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_MODEL_WRITER_H_
#define PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_MODEL_WRITER_H_

#include <string>

#include "core/tokenizer/vocabulary.h"

namespace pdserve {

// Returns the serialized ModelProto: one SentencePiece per token (spaces written as U+2581, byte
// tokens as "<0xNN>" in upper case, the token's score and type), TrainerSpec {model_type BPE,
// vocab_size, byte_fallback, unk/bos/eos ids and pieces, pad_id -1} and NormalizerSpec {name
// "identity", add_dummy_prefix from `vocab`, remove_extra_whitespaces false, escape_whitespaces}.
// Expects vocab.Validate() to pass; libsentencepiece additionally refuses empty or repeated pieces
// and vocabularies without exactly one unknown token.
std::string EncodeSentencePieceModel(const Vocabulary& vocab);

}  // namespace pdserve

#endif  // PDSERVE_CORE_TOKENIZER_SENTENCEPIECE_MODEL_WRITER_H_
