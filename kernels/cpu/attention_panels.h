// Attention as GEMMs over gathered panels (attention.cc's prefill path, attention_importance.cc):
// one KV head's keys or values, read page by page as stored (f32, f16, FP8; ZACK widths), laid out
// as the B panels of the fp32 micro-kernels (gemm_kernels.h), and a GEMM of query rows over them.
// Internal to kernels/cpu.
#ifndef PDSERVE_KERNELS_CPU_ATTENTION_PANELS_H_
#define PDSERVE_KERNELS_CPU_ATTENTION_PANELS_H_

#include <cstdint>

#include "kernels/cpu/gemm_kernels.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels {

// Sequences with at least this many queries run on the panels (below, the row kernels pay).
inline constexpr int kGemmMinQueries = 16;

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

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_CPU_ATTENTION_PANELS_H_
