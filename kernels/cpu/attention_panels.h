// Attention as GEMMs over gathered panels (attention.cc's prefill path, attention_importance.cc):
// one KV head's keys or values, read page by page as stored (f32, f16, FP8; ZACK widths), laid out
// as the B panels of the fp32 micro-kernels (gemm_kernels.h), and a GEMM of query rows over them.
// Internal to kernels/cpu.
#ifndef PDSERVE_KERNELS_CPU_ATTENTION_PANELS_H_
#define PDSERVE_KERNELS_CPU_ATTENTION_PANELS_H_

#include <cstdint>

#include "kernels/attention.h"
#include "kernels/cpu/gemm_kernels.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels {

// Sequences with at least this many queries run on the panels (below, the row kernels pay).
inline constexpr int kGemmMinQueries = kAttentionDecodeMaxQueries + 1;

// n rounded up to whole panels of any kernel's width: the floats a panel layout sizes n to.
inline int64_t RoundUpToPanels(int64_t n) { return (n + kGemmMaxNr - 1) / kGemmMaxNr * kGemmMaxNr; }

// Keys of tokens [0, n) of KV head g as the panels of S = alpha · Q·Kᵀ: panel p holds keys
// [p·nr, p·nr + nr) as dk × nr floats, [c, j] = alpha · K[p·nr + j, c]; keys past n are zeros.
// `scratch` holds a page of rows (page_size · dk floats).
void GatherKeyPanels(const KvSectionView& section, const PagedKvView& kv, int g, int n, int nr,
                     float alpha, float* panels, float* scratch);

// Values of tokens [0, n) of KV head g as the panels of O = P·V: panel p holds dims
// [p·nr, p·nr + nr) as n × nr floats, [t, j] = V[t, p·nr + j]; dims past dv are zeros.
// `scratch` holds a page of rows (page_size · dv floats).
void GatherValuePanels(const KvSectionView& section, const PagedKvView& kv, int g, int n, int nr,
                       float* panels, float* scratch);

// y[i, j] = Σ_k x[i, k] · B[k, j] for i < m, j < n and k < kc, B's columns in panels of nr,
// `panel_stride` floats apart, row k of a panel at k · nr.
void GemmOverPanels(const GemmKernel& kernel, const float* x, int64_t ldx, int m,
                    const float* panels, int64_t panel_stride, int kc, int n, float* y,
                    int64_t ldy);

// Scores of m query rows (ldq floats apart) against the keys in `key_panels` (GatherKeyPanels of
// dk dims, alpha applied): scores[i · n + t] for t < n. With no key dims (dk = 0) every score is
// 0, so the weights are uniform, as on the decode path and in AttentionReference.
void KeyPanelScores(const GemmKernel& kernel, const float* q, int64_t ldq, int m,
                    const float* key_panels, int dk, int n, float* scores);

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_ATTENTION_PANELS_H_
