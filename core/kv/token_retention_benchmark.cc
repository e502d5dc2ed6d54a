// Token retention's selection and compaction of one cache layer (core/kv/token_retention.h,
// core/kv/kv_row_codec.h): what a retaining prompt costs per cache layer besides its scoring
// (kernels_benchmark's BM_AttentionImportance). 12 KV heads of 64, pages of 16.
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "core/kv/kv_layout.h"
#include "core/kv/kv_row_codec.h"
#include "core/kv/token_retention.h"

namespace pdserve {
namespace {

constexpr int kHeads = 12;
constexpr int kHeadDim = 64;
constexpr int kPageSize = 16;

// Args: prompt tokens, policy (0 recent, 1 SnapKV, 2 KVCrush), granularity (0 token, 1 page).
void BM_SelectRetainedTokens(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  std::vector<float> importance(static_cast<size_t>(kHeads) * n);
  std::mt19937 random(1);
  std::uniform_real_distribution<float> uniform(0.0f, 1.0f);
  for (float& x : importance) x = uniform(random);
  RetentionOptions options;
  options.fraction = 0.25;
  options.policy = static_cast<RetentionPolicy>(state.range(1));
  options.granularity = static_cast<RetentionGranularity>(state.range(2));
  for (auto _ : state) {
    std::vector<int> kept = SelectRetainedTokens(importance, kHeads, n, kPageSize, options);
    benchmark::DoNotOptimize(kept.data());
  }
}

BENCHMARK(BM_SelectRetainedTokens)
    ->ArgNames({"tokens", "policy", "page"})
    ->ArgsProduct({{1000}, {0, 1, 2}, {0, 1}})
    ->Unit(benchmark::kMicrosecond);

// One section (K or V, f32) of a 1000-token prompt compacted to every fourth token.
void BM_CompactKvRows(benchmark::State& state) {
  const int n = static_cast<int>(state.range(0));
  const KvSectionLayout layout(kPageSize, std::vector<int>(kHeads, kHeadDim), KvElement::kF32,
                               KvScaleMode::kNone);
  const int pages = (n + kPageSize - 1) / kPageSize;
  std::vector<std::vector<uint8_t>> pool(pages, std::vector<uint8_t>(layout.bytes(), 1));
  std::vector<int32_t> table(pages);
  for (int p = 0; p < pages; ++p) table[p] = p;
  std::vector<int> kept;
  for (int t = 0; t < n; t += 4) kept.push_back(t);
  for (auto _ : state) {
    CompactKvRows(layout, table, kept, [&](int32_t page) { return pool[page].data(); });
    benchmark::ClobberMemory();
  }
}

BENCHMARK(BM_CompactKvRows)->ArgName("tokens")->Arg(1000)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pdserve

BENCHMARK_MAIN();
