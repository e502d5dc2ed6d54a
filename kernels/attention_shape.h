// AttentionShape and AttentionSequence: what the attention kernels (kernels/attention.h on the
// CPU, kernels/cuda/attention.h on the GPU) are told about the heads and about each sequence. Plain
// structs of raw pointers; the CUDA kernels take them with every pointer in device memory.
#ifndef PDSERVE_KERNELS_ATTENTION_SHAPE_H_
#define PDSERVE_KERNELS_ATTENTION_SHAPE_H_

#include <cstdint>

#include "kernels/host_device.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels {

struct AttentionShape {
  int n_heads = 0;
  int n_kv_heads = 0;
  int head_dim = 0;  // the model's: sets the softmax scale and bounds every stored width
  // Float offsets of each query head's slice in a query row and in an output row; null =
  // h·head_dim.
  const int* q_offsets = nullptr;
  const int* out_offsets = nullptr;

  PDSERVE_HOST_DEVICE int group() const { return n_heads / n_kv_heads; }
  PDSERVE_HOST_DEVICE int64_t q_offset(int h) const {
    return q_offsets ? q_offsets[h] : int64_t{h} * head_dim;
  }
  PDSERVE_HOST_DEVICE int64_t out_offset(int h) const {
    return out_offsets ? out_offsets[h] : int64_t{h} * head_dim;
  }
};

struct AttentionSequence {
  const float* q = nullptr;    // n_queries rows, q_row_stride floats apart
  int64_t q_row_stride = 0;    // 0 = n_heads · head_dim
  float* out = nullptr;        // n_queries rows, out_row_stride floats apart
  int64_t out_row_stride = 0;  // 0 = n_heads · head_dim
  int n_queries = 0;
  int start_pos = 0;
  PagedKvView kv;
  // Null, or a float per token the rows see, added to every query head's scaled score of that
  // token before the softmax: token retention's weight for a KVCrush representative that stands
  // for evicted tokens (core/kv/token_retention.h), 0 for the others. CPU kernels only: the CUDA
  // engine has no token retention and leaves it null.
  const float* token_bias = nullptr;
};

}  // namespace pdserve::kernels

#endif  // PDSERVE_KERNELS_ATTENTION_SHAPE_H_
