// For GPU tests of kernels that read or write paged KV: a section's pool on the host (written by
// the CPU codec, read by the CPU references) and its copy on the device, with the device views the
// CUDA kernels take. Include only in tests.
#ifndef PDSERVE_KERNELS_CUDA_KV_SECTION_TESTING_H_
#define PDSERVE_KERNELS_CUDA_KV_SECTION_TESTING_H_

#include <cstdint>
#include <vector>

#include "core/kv/kv_layout.h"
#include "core/kv/paged_kv_cache.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gpu_test.h"
#include "kernels/kv_view.h"

namespace pdserve::kernels::cuda {

struct TestSection {
  KvSectionLayout layout = {};
  int64_t stride = 0;
  std::vector<uint8_t> host = {};
  DeviceBuffer<uint8_t> device = {};
  DeviceBuffer<int> dims = {};
  DeviceBuffer<int64_t> head_offsets = {};

  uint8_t* Page(int32_t page) { return host.data() + page * stride; }
  KvSectionView HostView() const { return SectionView(layout, host.data(), stride); }
  // The device copy's view; its pool starts `pool_offset` bytes into the buffer (see Upload).
  KvSectionView DeviceView(int pool_offset = 0) const {
    KvSectionView view = SectionView(layout, device.data() + pool_offset, stride);
    view.dims = dims.data();
    view.head_offsets = head_offsets.data();
    return view;
  }
  // Copies the host pool to the device after `pool_offset` bytes of 0xFF (misaligned pools), and
  // the layout's widths and head offsets.
  void Upload(int pool_offset = 0) {
    std::vector<uint8_t> shifted(pool_offset, 0xFF);
    shifted.insert(shifted.end(), host.begin(), host.end());
    device = cuda::Upload<uint8_t>(shifted);
    dims = cuda::Upload<int>(layout.dims());
    head_offsets = cuda::Upload<int64_t>(layout.head_offsets());
  }
};

// n_pages pages laid out by `layout`, every byte `fill`, on the host and on the device.
inline TestSection FilledSection(const KvSectionLayout& layout, int n_pages, uint8_t fill) {
  TestSection section{.layout = layout, .stride = PagedKvCache::StrideOf(layout)};
  section.host.assign(n_pages * section.stride, fill);
  section.Upload();
  return section;
}

// Float offsets of each query head's slice in rows packed by its KV head's width (prefix sums);
// *row_floats receives the row's width.
inline std::vector<int> PackedOffsets(int n_heads, int n_kv_heads, const std::vector<int>& widths,
                                      int* row_floats) {
  std::vector<int> offsets(n_heads);
  int at = 0;
  for (int h = 0; h < n_heads; ++h) {
    offsets[h] = at;
    at += widths[h / (n_heads / n_kv_heads)];
  }
  *row_floats = at;
  return offsets;
}

}  // namespace pdserve::kernels::cuda

#endif  // PDSERVE_KERNELS_CUDA_KV_SECTION_TESTING_H_
