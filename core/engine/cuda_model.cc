#include "core/engine/cuda_model.h"

#include <cuda_runtime_api.h>

#include <span>

#include "core/base/status_macros.h"
#include "core/kv/paged_kv_cache.h"
#include "kernels/rope.h"

namespace pdserve {
namespace {

using kernels::cuda::DeviceBuffer;

absl::StatusOr<DeviceTensor> Upload(const Tensor& tensor) {
  DeviceTensor out;
  const auto* bytes = static_cast<const uint8_t*>(tensor.data);
  PDSERVE_ASSIGN_OR_RETURN(out.bytes, DeviceBuffer<uint8_t>::FromHost(
                                          std::span<const uint8_t>(bytes, tensor.NumBytes())));
  out.matrix = {out.bytes.data(), tensor.dtype, tensor.shape.size() > 1 ? tensor.rows() : 1,
                tensor.cols()};
  return out;
}

template <typename T>
absl::StatusOr<DeviceBuffer<T>> UploadVector(const std::vector<T>& values) {
  return DeviceBuffer<T>::FromHost(std::span<const T>(values));
}

// A section of num_pages pages, zeroed, and its view with device pointers.
absl::Status UploadSection(const KvSectionLayout& layout, int num_pages,
                           DeviceBuffer<uint8_t>& pool, DeviceBuffer<int>& dims,
                           DeviceBuffer<int64_t>& head_offsets, kernels::KvSectionView& view) {
  const int64_t stride = PagedKvCache::StrideOf(layout);
  PDSERVE_ASSIGN_OR_RETURN(pool, DeviceBuffer<uint8_t>::Allocate(stride * num_pages));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaMemset(pool.data(), 0, pool.bytes()));
  PDSERVE_ASSIGN_OR_RETURN(dims, UploadVector(layout.dims()));
  PDSERVE_ASSIGN_OR_RETURN(head_offsets, UploadVector(layout.head_offsets()));
  view = SectionView(layout, pool.data(), stride);
  view.dims = dims.data();
  view.head_offsets = head_offsets.data();
  return absl::OkStatus();
}

absl::StatusOr<DeviceCache> UploadCache(const CachePlan& plan, int num_pages) {
  DeviceCache cache;
  PDSERVE_RETURN_IF_ERROR(UploadSection(plan.layout.k, num_pages, cache.k_pool, cache.k_dims,
                                        cache.k_head_offsets, cache.k));
  PDSERVE_RETURN_IF_ERROR(UploadSection(plan.layout.v, num_pages, cache.v_pool, cache.v_dims,
                                        cache.v_head_offsets, cache.v));
  PDSERVE_ASSIGN_OR_RETURN(cache.k_basis, UploadVector(plan.k_basis));
  PDSERVE_ASSIGN_OR_RETURN(cache.k_basis_offsets, UploadVector(plan.k_basis_offsets));
  PDSERVE_ASSIGN_OR_RETURN(cache.q_offsets, UploadVector(plan.q_offsets));
  PDSERVE_ASSIGN_OR_RETURN(cache.out_offsets, UploadVector(plan.out_offsets));
  return cache;
}

absl::StatusOr<DeviceLayer> UploadLayer(const LayerWeights& weights, const LayerPlan& plan,
                                        DType dtype) {
  DeviceLayer layer;
  PDSERVE_ASSIGN_OR_RETURN(layer.attn_norm, Upload(ToF32(weights.attn_norm)));
  PDSERVE_ASSIGN_OR_RETURN(layer.ffn_norm, Upload(ToF32(weights.ffn_norm)));
  PDSERVE_ASSIGN_OR_RETURN(layer.w_in, Upload(plan.w_in.single()));
  PDSERVE_ASSIGN_OR_RETURN(layer.wo, Upload(plan.wo));
  PDSERVE_ASSIGN_OR_RETURN(
      layer.w13,
      Upload(ConcatRows({ConvertTensor(weights.w1, dtype), ConvertTensor(weights.w3, dtype)})));
  PDSERVE_ASSIGN_OR_RETURN(layer.w2, Upload(ConvertTensor(weights.w2, dtype)));
  return layer;
}

}  // namespace

absl::StatusOr<CudaModel> UploadModel(const ModelWeights& run, const KvPlan& plan, DType dtype,
                                      int num_pages, int max_context) {
  CudaModel model;
  PDSERVE_ASSIGN_OR_RETURN(model.embedding, Upload(ConvertTensor(run.token_embedding, dtype)));
  PDSERVE_ASSIGN_OR_RETURN(model.classifier, Upload(ConvertTensor(run.classifier, dtype)));
  PDSERVE_ASSIGN_OR_RETURN(model.final_norm, Upload(ToF32(run.final_norm)));
  if (plan.swiftkv()) {
    PDSERVE_ASSIGN_OR_RETURN(model.swiftkv_norm, Upload(ToF32(plan.swiftkv_norm)));
    PDSERVE_ASSIGN_OR_RETURN(model.swiftkv_kv, Upload(plan.swiftkv_kv.single()));
  }
  for (size_t j = 0; j < run.layers.size(); ++j) {
    PDSERVE_ASSIGN_OR_RETURN(DeviceLayer layer, UploadLayer(run.layers[j], plan.layers[j], dtype));
    model.layers.push_back(std::move(layer));
  }
  for (const CachePlan& cache : plan.caches) {
    PDSERVE_ASSIGN_OR_RETURN(DeviceCache device, UploadCache(cache, num_pages));
    model.caches.push_back(std::move(device));
  }
  const ModelConfig& c = run.config;
  const kernels::RopeTable table(c.head_dim(), max_context, c.rope_theta, c.rope_scaling);
  const size_t entries = static_cast<size_t>(max_context) * (c.head_dim() / 2);
  PDSERVE_ASSIGN_OR_RETURN(model.rope_cos,
                           DeviceBuffer<float>::FromHost(std::span(table.cos(0), entries)));
  PDSERVE_ASSIGN_OR_RETURN(model.rope_sin,
                           DeviceBuffer<float>::FromHost(std::span(table.sin(0), entries)));
  model.rope = {model.rope_cos.data(), model.rope_sin.data(), c.head_dim()};
  return model;
}

}  // namespace pdserve
