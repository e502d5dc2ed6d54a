// Hugging Face Llama checkpoints: a directory with config.json (transformers' LlamaConfig),
// model.safetensors or model-0000i-of-0000n.safetensors shards with model.safetensors.index.json,
// and optionally tokenizer.model (SentencePiece) or tokenizer.json (byte-level BPE). Weights load
// zero-copy from the mapped shards (norms are converted to f32) and keep the file's split-half RoPE
// pairing of the q/k rows (config.rope_pairing = kSplitHalf). Tensor names map as
//   model.embed_tokens.weight                    token_embedding
//   model.layers.N.self_attn.{q,k,v,o}_proj.weight   wq wk wv wo
//   model.layers.N.mlp.{gate,down,up}_proj.weight    w1 w2 w3
//   model.layers.N.{input,post_attention}_layernorm.weight   attn_norm ffn_norm
//   model.norm.weight  final_norm;   lm_head.weight  classifier (optional when tied)
// Snowflake's SwiftKV checkpoints (model_type "llama_swiftkv", LlamaSwiftKVForCausalLM) keep every
// tensor above (the teacher q/k/v of layers ≥ l included) and add, into weights.swiftkv:
//   model.norm_swiftkv.weight                        norm
//   model.layers.j.self_attn.q_proj_swiftkv.weight   wq[j − l]       for every j ≥ l
//   model.layers.j.self_attn.{k,v}_proj_swiftkv.weight   wk, wv[(j − l) / G]   for leaders,
//                                                    (j − l) % G == 0; absent on followers
// with q/k rows in the same split-half pairing as the layers'.
// Stateless functions; thread-safe. The returned weights share ownership of the mapped files.
#ifndef PDSERVE_CORE_FORMATS_HF_MODEL_H_
#define PDSERVE_CORE_FORMATS_HF_MODEL_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "core/model/model_weights.h"
#include "core/tensor/dtype.h"
#include "core/tokenizer/vocabulary.h"

namespace pdserve {

struct HfModel {
  ModelWeights weights;
  std::string tokenizer_model_path;  // dir/tokenizer.model, else dir/tokenizer.json, else ""
};

// Loads the checkpoint in `dir`. NotFound when config.json (or both model.safetensors and its
// index) is missing. InvalidArgument naming the file for: malformed JSON or fields of the wrong
// type; model_type other than "llama" or "llama_swiftkv"; hidden_act other than "silu"; a
// rope_scaling or rope_parameters whose rope_type (or type) is neither "default" nor "llama3", or
// a "llama3" one missing factor, low_freq_factor, high_freq_factor or
// original_max_position_embeddings, out of ModelConfig::Validate's range, or set in both keys with
// different values; attention_bias or mlp_bias true; a head_dim other than hidden_size /
// num_attention_heads; num_key_value_layers outside [0, num_hidden_layers] or a
// key_value_group_size that does not divide the layers after it; shard names in the index that
// are not plain file names; missing tensors, wrong shapes, and unexpected tensors (any name other
// than the above and "*.rotary_emb.inv_freq", e.g. layers beyond num_hidden_layers, biases, or
// SwiftKV tensors the config does not define: k/v_proj_swiftkv on a group follower, any on a
// layer < l, any with model_type "llama").
// Defaults follow LlamaConfig: num_key_value_heads = num_attention_heads, rope_theta 10000,
// rms_norm_eps 1e-6, max_position_embeddings 2048, tie_word_embeddings false; and
// LlamaSwiftKVConfig: swiftkv false, num_key_value_layers num_hidden_layers (also when 0),
// key_value_group_size 1 (also when 0). weights.swiftkv is set only when swiftkv is true and
// l < num_hidden_layers; otherwise the SwiftKV tensors the class defines are checked, if present,
// and dropped (the model is the plain one).
absl::StatusOr<HfModel> LoadHfModel(const std::string& dir);

struct HfWriteOptions {
  DType dtype = DType::kF32;  // of the matrices; norms are written as f32
  int num_shards = 1;         // 1: model.safetensors; else shards + model.safetensors.index.json
};

// Creates `dir` if needed and writes config.json, generation_config.json, tokenizer.model (from
// `vocab`, checked by loading it back), tokenizer_config.json and the tensors. q/k rows are
// permuted to the split-half pairing first, as Hugging Face's convert_llama_weights_to_hf.py does;
// lm_head.weight is omitted when the embeddings are tied. With weights.swiftkv at l < L it writes
// a SwiftKV checkpoint (model_type "llama_swiftkv", "swiftkv": true, num_key_value_layers,
// key_value_group_size and the tensors above, q/k permuted alike); at l = L a plain one. A
// config.rope_scaling is written as a "llama3" rope_scaling dict (null when none).
// InvalidArgument when the weights or the vocabulary are invalid or disagree in size, num_shards
// is not in [1, number of tensors], or swiftkv.layer is 0 (which config.json cannot express);
// Internal when writing fails.
absl::Status WriteHfModel(const std::string& dir, const ModelWeights& weights,
                          const Vocabulary& vocab, const HfWriteOptions& options);

}  // namespace pdserve

#endif  // PDSERVE_CORE_FORMATS_HF_MODEL_H_
