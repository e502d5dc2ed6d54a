// KvCompression: how an engine stores and reads its KV cache beyond the model's own structure
// (SwiftKV/AcrossKV live in the weights, ModelWeights::swiftkv). Identity settings — ZACK off,
// FP8 off, KCache off, retention off — give the plain engine bit for bit.
#ifndef PDSERVE_CORE_ENGINE_KV_COMPRESSION_H_
#define PDSERVE_CORE_ENGINE_KV_COMPRESSION_H_

#include <memory>

#include "absl/status/status.h"
#include "core/calib/calibration.h"
#include "core/kv/kv_layout.h"
#include "core/kv/token_retention.h"

namespace pdserve {

// KCache decode (DESIGN §4): layers from full_layers on keep V in a separate tier and decode steps
// fetch only the value pages of the selected tokens.
struct KCacheOptions {
  int top_n = 0;        // tokens chosen by score per KV head; 0 = KCache off
  int full_layers = 2;  // layers [0, full_layers) attend densely, V resident
  int sink = 4;         // first tokens always kept
  int recent = 16;      // newest tokens always kept (≥ 1: a token always sees itself)
  bool renormalize = false;

  bool enabled() const { return top_n > 0; }
};

struct KvCompression {
  // ZACK bases and ranks per cache layer and KV head; null = off. Must match the model's cache
  // layers (n_layers, or l + (L − l)/G with SwiftKV).
  std::shared_ptr<const ZackBases> zack;
  // FP8 e4m3 KV with scales per token per head (default) or per page per head; f32 when kNone.
  KvScaleMode fp8 = KvScaleMode::kNone;
  // Without FP8: IEEE f16 elements (what llama.cpp and vLLM store by default) instead of f32;
  // finite values beyond ±65504 saturate. CPU engine only.
  bool f16 = false;
  KCacheOptions kcache;
  // Token retention (KVCrush): after a prompt's last chunk (ForwardChunk::retain) each cache layer
  // keeps only the tokens it selects. Off when !retention.enabled().
  RetentionOptions retention;

  absl::Status Validate() const;
};

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_KV_COMPRESSION_H_
