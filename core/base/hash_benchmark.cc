// Throughput of the KV page checksum (Xxh64) against the content hash (Fnv1a64) on a page-sized
// buffer: what the checksums cost on the prefill → KV store → decode path of every page.
#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

#include "core/base/hash.h"

namespace pdserve {
namespace {

std::vector<uint8_t> Bytes(int64_t n) {
  std::vector<uint8_t> bytes(static_cast<size_t>(n));
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<uint8_t>(i * 131 + 7);
  return bytes;
}

void BM_Xxh64(benchmark::State& state) {
  const std::vector<uint8_t> bytes = Bytes(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(Xxh64(bytes));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Xxh64)->Arg(1 << 10)->Arg(64 << 10)->Arg(1 << 20);

void BM_Fnv1a64(benchmark::State& state) {
  const std::vector<uint8_t> bytes = Bytes(state.range(0));
  for (auto _ : state) benchmark::DoNotOptimize(Fnv1a64(bytes));
  state.SetBytesProcessed(state.iterations() * state.range(0));
}
BENCHMARK(BM_Fnv1a64)->Arg(1 << 10)->Arg(64 << 10)->Arg(1 << 20);

}  // namespace
}  // namespace pdserve

BENCHMARK_MAIN();
