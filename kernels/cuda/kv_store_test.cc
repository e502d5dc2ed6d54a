// cuda::StoreKv and cuda::ProjectQueries against the CPU's WriteKvRow and ProjectRows on pages laid
// out by the real core/kv code: f32 and per-token FP8 sections, uniform and ragged widths, several
// targets written at once from fused rows (every target's K side by side, then every target's V,
// as SwiftKV's bulk write), page sizes 16 and 7, rows scattered over shuffled page slots.
//
// Without ZACK the GPU stores the same floats the CPU does, so the pools must be byte-identical.
// With ZACK the K projection sums in another order: V sections must still be byte-identical, bytes
// outside the written K rows untouched, and the written K rows close to the CPU's — f32 within
// 1e-5·(1 + Σ|basis·x|); FP8 each dequantized value within half an e4m3 step (plus the scale's
// drift) of the exact projection, the scale within 1e-5 relative of the CPU's.
#include "kernels/cuda/kv_store.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "core/kv/kv_layout.h"
#include "core/kv/kv_row_codec.h"
#include "core/kv/paged_kv_cache.h"
#include "gtest/gtest.h"
#include "kernels/basis_projection.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gpu_test.h"
#include "kernels/cuda/kv_section_testing.h"

namespace pdserve::kernels::cuda {
namespace {

using Section = TestSection;

template <typename T>
std::vector<T> Download(const DeviceBuffer<T>& device) {
  std::vector<T> host(device.size());
  const absl::Status status = device.CopyToHost(std::span<T>(host));
  if (!status.ok()) {
    std::fprintf(stderr, "download failed: %s\n", status.ToString().c_str());
    std::abort();
  }
  return host;
}

struct Config {
  int n_kv_heads = 4;
  int head_dim = 64;
  int page_size = 16;
  int n_rows = 53;
  int n_targets = 1;
  KvElement element = KvElement::kF32;
  bool zack = false;
  bool ragged_v = false;
  uint32_t seed = 1;
};

KvScaleMode ScalesOf(KvElement element) {
  return element == KvElement::kF32 ? KvScaleMode::kNone : KvScaleMode::kPerTokenHead;
}

// Widths per KV head: ZACK ranks for K (one head dropped to 0 when there are enough), irregular V
// widths when ragged.
std::vector<int> KDims(const Config& c, int target) {
  std::vector<int> dims(c.n_kv_heads, c.head_dim);
  if (!c.zack) return dims;
  for (int g = 0; g < c.n_kv_heads; ++g) dims[g] = (c.head_dim * (g + 2)) / 7 + target + 1;
  if (c.n_kv_heads > 2) dims[1] = 0;
  return dims;
}
std::vector<int> VDims(const Config& c, int target) {
  std::vector<int> dims(c.n_kv_heads, c.head_dim);
  if (!c.ragged_v) return dims;
  for (int g = 0; g < c.n_kv_heads; ++g) dims[g] = c.head_dim - 3 * g - 2 * target - 1;
  return dims;
}

// Seeded values whose magnitude varies by row (2^-8 .. 2^8) so that FP8 scales differ; row 0 is
// all zeros (scale 1).
std::vector<float> RandomRows(std::mt19937& rng, int n, int64_t stride) {
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-8, 8);
  std::vector<float> rows(n * stride);
  for (int t = 0; t < n; ++t) {
    const float magnitude = t == 0 ? 0.0f : std::ldexp(1.0f, exponent(rng));
    for (int64_t i = 0; i < stride; ++i) rows[t * stride + i] = magnitude * dist(rng);
  }
  return rows;
}

struct Target {
  Section k;
  Section v;
  std::vector<float> basis = {};  // [Σ k dims, head_dim]
  std::vector<int64_t> basis_offsets = {};
  DeviceBuffer<float> basis_device = {};
  DeviceBuffer<int64_t> basis_offsets_device = {};
  int64_t k_column = 0;
  int64_t v_column = 0;
};

void ExpectBytesEqual(const std::vector<uint8_t>& got, const std::vector<uint8_t>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int64_t bad = 0, first = -1;
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i] && bad++ == 0) first = static_cast<int64_t>(i);
  }
  EXPECT_EQ(bad, 0) << what << ": " << bad << " bytes differ, the first at " << first << " (gpu "
                    << (first >= 0 ? int{got[first]} : 0) << ", cpu "
                    << (first >= 0 ? int{want[first]} : 0) << ")";
}

// ZACK K sections: bytes outside the written rows and scales equal; written rows close.
void ExpectProjectedClose(const Section& k, const std::vector<uint8_t>& got,
                          const std::vector<std::vector<float>>& exact,
                          const std::vector<std::vector<float>>& magnitude, const Config& c,
                          const std::vector<int32_t>& page_ids, const std::vector<int>& slots) {
  std::vector<uint8_t> masked_got = got, masked_want = k.host;
  std::vector<float> got_row(c.head_dim), want_row(c.head_dim);
  int bad = 0;
  int64_t codes = 0, equal_codes = 0;
  for (int t = 0; t < c.n_rows; ++t) {
    const int64_t page = int64_t{page_ids[t]} * k.stride;
    for (int g = 0; g < c.n_kv_heads; ++g) {
      const int dim = k.layout.dim(g);
      ReadKvRow(k.layout, got.data() + page, g, slots[t], got_row.data());
      ReadKvRow(k.layout, k.host.data() + page, g, slots[t], want_row.data());
      const float* x = exact[t].data() + static_cast<int64_t>(g) * c.head_dim;
      float got_scale = 0.0f, want_scale = 0.0f;
      const int64_t row = page + k.layout.row_offset(g, slots[t]);
      if (k.layout.element() == KvElement::kE4M3) {
        const int64_t scale = page + k.layout.scale_offset(g) + 4 * int64_t{slots[t]};
        std::memcpy(&got_scale, got.data() + scale, 4);
        std::memcpy(&want_scale, k.host.data() + scale, 4);
        EXPECT_NEAR(got_scale, want_scale, 1e-5 * want_scale) << "row " << t << " head " << g;
        std::memset(masked_got.data() + scale, 0, 4);
        std::memset(masked_want.data() + scale, 0, 4);
        for (int i = 0; i < dim; ++i) equal_codes += got[row + i] == k.host[row + i];
        codes += dim;
      }
      for (int i = 0; i < dim; ++i) {
        // f32: the two summation orders differ by rounding relative to Σ|basis·x|, which
        // cancellation can make far larger than the result itself.
        const double tolerance = k.layout.element() == KvElement::kF32
                                     ? 1e-5 * (1.0 + magnitude[t][int64_t{g} * c.head_dim + i])
                                     : std::abs(x[i]) / 16 + got_scale / 512 + 1e-5 * got_scale;
        if (std::abs(double{got_row[i]} -
                     (k.layout.element() == KvElement::kF32 ? want_row[i] : x[i])) > tolerance &&
            ++bad <= 5) {
          ADD_FAILURE() << "row " << t << " head " << g << " [" << i << "]: gpu " << got_row[i]
                        << ", cpu " << want_row[i] << ", exact " << x[i];
        }
      }
      const int64_t row_bytes = int64_t{dim} * k.layout.element_bytes();
      std::memset(masked_got.data() + row, 0, row_bytes);
      std::memset(masked_want.data() + row, 0, row_bytes);
    }
  }
  EXPECT_EQ(bad, 0) << "projected K values out of tolerance";
  EXPECT_GE(equal_codes, codes * 9 / 10) << "most FP8 codes should agree exactly";
  ExpectBytesEqual(masked_got, masked_want, "K pool outside the written rows");
}

void CheckStore(const Config& c) {
  std::mt19937 rng(c.seed);
  const int d = c.head_dim, kv_dim = c.n_kv_heads * d;
  const int n_pages = (c.n_rows + c.page_size - 1) / c.page_size + 2;
  // Fused rows: 3 floats of padding, every target's K, then every target's V, then 5 spare.
  std::vector<Target> targets;
  int64_t column = 3 + int64_t{c.n_targets} * kv_dim;
  std::uniform_real_distribution<float> basis_dist(-0.2f, 0.2f);
  for (int i = 0; i < c.n_targets; ++i) {
    const std::vector<int> k_dims = KDims(c, i), v_dims = VDims(c, i);
    targets.push_back(
        {.k = FilledSection(KvSectionLayout(c.page_size, k_dims, c.element, ScalesOf(c.element)),
                            n_pages, static_cast<uint8_t>(0x5A + i)),
         .v = FilledSection(KvSectionLayout(c.page_size, v_dims, c.element, ScalesOf(c.element)),
                            n_pages, static_cast<uint8_t>(0xA5 + i))});
    Target& target = targets.back();
    target.k_column = 3 + int64_t{i} * kv_dim;
    target.v_column = column;
    column += std::accumulate(v_dims.begin(), v_dims.end(), int64_t{0});
    if (!c.zack) continue;
    int64_t at = 0;
    for (int g = 0; g < c.n_kv_heads; ++g) {
      target.basis_offsets.push_back(at);
      at += int64_t{k_dims[g]} * d;
    }
    target.basis.resize(at);
    for (float& x : target.basis) x = basis_dist(rng);
    target.basis_device = Upload<float>(target.basis);
    target.basis_offsets_device = Upload<int64_t>(target.basis_offsets);
  }
  const int64_t stride = column + 5;
  const std::vector<float> rows = RandomRows(rng, c.n_rows, stride);

  // Distinct (page, slot) pairs in shuffled order.
  std::vector<int> places(n_pages * c.page_size);
  std::iota(places.begin(), places.end(), 0);
  std::shuffle(places.begin(), places.end(), rng);
  std::vector<int32_t> page_ids(c.n_rows);
  std::vector<int> slots(c.n_rows);
  for (int t = 0; t < c.n_rows; ++t) {
    page_ids[t] = places[t] / c.page_size;
    slots[t] = places[t] % c.page_size;
  }

  // The CPU: the engine's store loop (core/engine/llama_engine.cc).
  std::vector<std::vector<std::vector<float>>> exact(c.n_targets), magnitude(c.n_targets);
  std::vector<float> projected(d);
  for (int i = 0; i < c.n_targets; ++i) {
    Target& target = targets[i];
    exact[i].assign(c.n_rows, std::vector<float>(kv_dim, 0.0f));
    magnitude[i].assign(c.n_rows, std::vector<float>(kv_dim, 0.0f));
    for (int t = 0; t < c.n_rows; ++t) {
      const float* row = rows.data() + t * stride;
      int64_t v_offset = target.v_column;
      for (int g = 0; g < c.n_kv_heads; ++g) {
        const float* k_row = row + target.k_column + int64_t{g} * d;
        if (c.zack) {
          ProjectRows(target.basis.data() + target.basis_offsets[g], target.k.layout.dim(g), d,
                      k_row, projected.data());
          k_row = projected.data();
          for (int r = 0; r < target.k.layout.dim(g); ++r) {
            double sum = 0.0, abs_sum = 0.0;
            for (int x = 0; x < d; ++x) {
              const double term =
                  double{target.basis[target.basis_offsets[g] + int64_t{r} * d + x]} *
                  row[target.k_column + int64_t{g} * d + x];
              sum += term;
              abs_sum += std::abs(term);
            }
            exact[i][t][int64_t{g} * d + r] = static_cast<float>(sum);
            magnitude[i][t][int64_t{g} * d + r] = static_cast<float>(abs_sum);
          }
        }
        WriteKvRow(target.k.layout, target.k.Page(page_ids[t]), g, slots[t], k_row);
        WriteKvRow(target.v.layout, target.v.Page(page_ids[t]), g, slots[t], row + v_offset);
        v_offset += target.v.layout.dim(g);
      }
    }
  }

  // The GPU.
  const DeviceBuffer<float> rows_device = Upload<float>(rows);
  const DeviceBuffer<int32_t> pages_device = Upload<int32_t>(page_ids);
  const DeviceBuffer<int> slots_device = Upload<int>(slots);
  KvStoreBatch batch;
  batch.n = c.n_targets;
  for (int i = 0; i < c.n_targets; ++i) {
    const Target& target = targets[i];
    batch.targets[i] = {.k = target.k.DeviceView(),
                        .v = target.v.DeviceView(),
                        .k_basis = c.zack ? target.basis_device.data() : nullptr,
                        .k_basis_offsets = c.zack ? target.basis_offsets_device.data() : nullptr,
                        .k_column = target.k_column,
                        .v_column = target.v_column};
  }
  const KvStoreRows store{.rows = rows_device.data(),
                          .row_stride = stride,
                          .n = c.n_rows,
                          .page_ids = pages_device.data(),
                          .slots = slots_device.data(),
                          .page_size = c.page_size,
                          .n_kv_heads = c.n_kv_heads,
                          .head_dim = d};
  StoreKv(batch, store, nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  for (int i = 0; i < c.n_targets; ++i) {
    SCOPED_TRACE(absl::StrCat("target ", i));
    const Target& target = targets[i];
    ExpectBytesEqual(Download(target.v.device), target.v.host, "V pool");
    if (c.zack) {
      ExpectProjectedClose(target.k, Download(target.k.device), exact[i], magnitude[i], c, page_ids,
                           slots);
    } else {
      ExpectBytesEqual(Download(target.k.device), target.k.host, "K pool");
    }
  }
}

std::string Describe(const Config& c) {
  return absl::StrCat(KvElementName(c.element), " page ", c.page_size, " targets ", c.n_targets,
                      c.zack ? " zack" : "", c.ragged_v ? " ragged V" : "", " head_dim ",
                      c.head_dim);
}

TEST(CudaKvStoreTest, BytesEqualTheCpuWithoutZack) {
  PDSERVE_REQUIRE_GPU();
  for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
    for (int page_size : {16, 7}) {
      for (int n_targets : {1, 3}) {
        for (bool ragged_v : {false, true}) {
          const Config c{.page_size = page_size,
                         .n_targets = n_targets,
                         .element = element,
                         .ragged_v = ragged_v,
                         .seed = static_cast<uint32_t>(page_size * 10 + n_targets)};
          SCOPED_TRACE(Describe(c));
          CheckStore(c);
        }
      }
    }
  }
}

TEST(CudaKvStoreTest, ZackProjectionCloseToTheCpu) {
  PDSERVE_REQUIRE_GPU();
  for (KvElement element : {KvElement::kF32, KvElement::kE4M3}) {
    for (int page_size : {16, 7}) {
      for (int n_targets : {1, 2}) {
        const Config c{.n_kv_heads = 3,
                       .head_dim = 128,
                       .page_size = page_size,
                       .n_rows = 40,
                       .n_targets = n_targets,
                       .element = element,
                       .zack = true,
                       .ragged_v = n_targets == 2,
                       .seed = static_cast<uint32_t>(page_size + n_targets)};
        SCOPED_TRACE(Describe(c));
        CheckStore(c);
      }
    }
  }
}

TEST(CudaKvStoreTest, ProjectQueriesMatchesProjectRows) {
  PDSERVE_REQUIRE_GPU();
  constexpr int kHeads = 8, kKvHeads = 2, kHeadDim = 128, kRows = 19;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  const std::vector<int> dims = {37, 128};
  std::vector<int64_t> basis_offsets = {0, int64_t{dims[0]} * kHeadDim};
  std::vector<float> basis((dims[0] + dims[1]) * kHeadDim);
  for (float& x : basis) x = 0.1f * dist(rng);
  std::vector<int> q_offsets(kHeads);
  int out_width = 0;
  for (int h = 0; h < kHeads; ++h) {
    q_offsets[h] = out_width;
    out_width += dims[h / (kHeads / kKvHeads)];
  }
  const int64_t q_stride = kHeads * kHeadDim + 3, out_stride = out_width + 2;
  std::vector<float> q(kRows * q_stride);
  for (float& x : q) x = dist(rng);
  std::vector<float> want(kRows * out_stride, -7.0f);
  for (int t = 0; t < kRows; ++t) {
    for (int h = 0; h < kHeads; ++h) {
      const int g = h / (kHeads / kKvHeads);
      ProjectRows(basis.data() + basis_offsets[g], dims[g], kHeadDim,
                  q.data() + t * q_stride + int64_t{h} * kHeadDim,
                  want.data() + t * out_stride + q_offsets[h]);
    }
  }
  const DeviceBuffer<float> basis_device = Upload<float>(basis), q_device = Upload<float>(q);
  const DeviceBuffer<int64_t> offsets_device = Upload<int64_t>(basis_offsets);
  const DeviceBuffer<int> dims_device = Upload<int>(dims),
                          q_offsets_device = Upload<int>(q_offsets);
  DeviceBuffer<float> out_device = Upload<float>(std::vector<float>(want.size(), -7.0f));
  const QueryProjection projection{.basis = basis_device.data(),
                                   .basis_offsets = offsets_device.data(),
                                   .dims = dims_device.data(),
                                   .q_offsets = q_offsets_device.data(),
                                   .n_heads = kHeads,
                                   .n_kv_heads = kKvHeads,
                                   .head_dim = kHeadDim};
  ProjectQueries(projection, q_device.data(), q_stride, kRows, out_device.data(), out_stride,
                 nullptr);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  const std::vector<float> got = Download(out_device);
  int bad = 0;
  double norm = 0.0;
  for (size_t i = 0; i < want.size(); ++i) {
    norm += std::abs(got[i]);
    if (std::abs(double{got[i]} - want[i]) > 1e-5 * (1.0 + std::abs(want[i])) && ++bad <= 5) {
      ADD_FAILURE() << "out[" << i << "] = " << got[i] << ", cpu " << want[i];
    }
  }
  EXPECT_EQ(bad, 0);
  EXPECT_GT(norm, 0.0);
}

}  // namespace
}  // namespace pdserve::kernels::cuda
