// CudaModel: what CudaEngine keeps in device memory, uploaded once — the weights it streams (in
// the engine's weight dtype; norms f32), the RoPE tables, and per cache layer the KV pools with
// the CPU engine's page layout plus the layout's and ZACK's small index arrays. Views handed to
// the kernels point into it. Move-only; freed with it.
#ifndef PDSERVE_CORE_ENGINE_CUDA_MODEL_H_
#define PDSERVE_CORE_ENGINE_CUDA_MODEL_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "core/engine/kv_plan.h"
#include "core/model/model_weights.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"
#include "kernels/cuda/rope.h"
#include "kernels/kv_view.h"

namespace pdserve {

struct DeviceTensor {
  kernels::cuda::DeviceBuffer<uint8_t> bytes;
  kernels::cuda::DeviceMatrix matrix;  // points into bytes; rows × cols (a vector: 1 × n)

  const float* f32() const { return static_cast<const float*>(matrix.data); }
};

struct DeviceLayer {
  DeviceTensor attn_norm, ffn_norm;  // f32
  DeviceTensor w_in, wo, w13, w2;    // the plan's stacked projections and the MLP
};

// One cache layer: K and V sections of num_pages pages each, laid out as on the CPU.
struct DeviceCache {
  kernels::cuda::DeviceBuffer<uint8_t> k_pool, v_pool;
  kernels::cuda::DeviceBuffer<int> k_dims, v_dims;
  kernels::cuda::DeviceBuffer<int64_t> k_head_offsets, v_head_offsets;
  kernels::cuda::DeviceBuffer<float> k_basis;  // ZACK; empty = none
  kernels::cuda::DeviceBuffer<int64_t> k_basis_offsets;
  kernels::cuda::DeviceBuffer<int> q_offsets, out_offsets;
  kernels::KvSectionView k, v;  // every pointer on the device
};

struct CudaModel {
  DeviceTensor embedding, classifier, final_norm;
  DeviceTensor swiftkv_norm, swiftkv_kv;  // empty without SwiftKV
  std::vector<DeviceLayer> layers;
  std::vector<DeviceCache> caches;
  kernels::cuda::DeviceBuffer<float> rope_cos, rope_sin;
  kernels::cuda::RopeTables rope;
};

// The model's embedding, norms, MLP and classifier (converted to `dtype` as LlamaEngine converts
// them; norms f32) and the plan's attention projections and cache layouts (built for `dtype`).
// ResourceExhausted when device memory runs out.
absl::StatusOr<CudaModel> UploadModel(const ModelWeights& run, const KvPlan& plan, DType dtype,
                                      int num_pages, int max_context);

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_CUDA_MODEL_H_
