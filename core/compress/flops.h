// PrefillFlops: multiply-adds (×2) of a prefill of `prompt_tokens` tokens under a KV plan, counted
// from the shapes: every matmul the tokens run (SwiftKV's later layers only for the last token),
// the SwiftKV KV projection, ZACK's q/k projections, attention scores and value sums over the
// causal context at the stored widths, and the classifier for the last token. The ratio of two
// plans' counts is the "prefill FLOPs ratio" the quality harness reports.
#ifndef PDSERVE_CORE_COMPRESS_FLOPS_H_
#define PDSERVE_CORE_COMPRESS_FLOPS_H_

#include "core/engine/kv_plan.h"
#include "core/model/model_config.h"

namespace pdserve {

double PrefillFlops(const ModelConfig& config, const KvPlan& plan, int prompt_tokens);

}  // namespace pdserve

#endif  // PDSERVE_CORE_COMPRESS_FLOPS_H_
