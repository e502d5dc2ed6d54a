// cuda::Gemm::Run at prefill shapes with bf16 weights: n = 512, 2048 and 4096 tokens through the
// Llama-7B projections (4096x4096, 11008x4096) and stories110M's (768x768, 2048x768). Each
// iteration is timed on the GPU with CUDA events (manual time), the activation conversion
// included. Counters: TFLOP/s (2·n·rows·cols per Run) and its fraction of the device's dense bf16
// tensor-core peak (cuda_status.h; absent where the peak is unknown). Without a CUDA device it
// prints why and exits 0.
#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "benchmark/benchmark.h"
#include "core/tensor/float16.h"
#include "kernels/cuda/cuda_status.h"
#include "kernels/cuda/device_buffer.h"
#include "kernels/cuda/gemm.h"

namespace pdserve::kernels::cuda {
namespace {

// Random host values (the time of a tensor-core GEMM does not depend on them much, but zeros
// would flatter it) copied to a new device buffer.
template <typename T, typename Make>
absl::StatusOr<DeviceBuffer<T>> RandomDevice(int64_t n, Make make) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  std::vector<T> host(n);
  for (T& v : host) v = make(dist(rng));
  return DeviceBuffer<T>::FromHost(host);
}

// The buffers, stream and events of one benchmark; released in reverse order.
struct Setup {
  cudaStream_t stream = nullptr;
  cudaEvent_t start = nullptr, stop = nullptr;
  DeviceBuffer<uint16_t> w;
  DeviceBuffer<float> x, y;
  std::unique_ptr<Gemm> gemm;

  ~Setup() {
    gemm.reset();
    if (start != nullptr) cudaEventDestroy(start);
    if (stop != nullptr) cudaEventDestroy(stop);
    if (stream != nullptr) cudaStreamDestroy(stream);
  }
};

absl::Status Prepare(int64_t n, int64_t rows, int64_t cols, Setup& s) {
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaStreamCreate(&s.stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&s.start));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventCreate(&s.stop));
  auto w = RandomDevice<uint16_t>(rows * cols, F32ToBF16);
  if (!w.ok()) return w.status();
  s.w = *std::move(w);
  auto x = RandomDevice<float>(n * cols, [](float v) { return v; });
  if (!x.ok()) return x.status();
  s.x = *std::move(x);
  auto y = DeviceBuffer<float>::Allocate(n * rows);
  if (!y.ok()) return y.status();
  s.y = *std::move(y);
  auto gemm = Gemm::Create(s.stream, n, cols);
  if (!gemm.ok()) return gemm.status();
  s.gemm = *std::move(gemm);
  return absl::OkStatus();
}

// One Run between two events on the stream: its GPU time in seconds.
absl::StatusOr<double> TimedRun(Setup& s, int64_t n, const DeviceMatrix& w) {
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.start, s.stream));
  if (absl::Status status = s.gemm->Run(s.x.data(), n, w, s.y.data()); !status.ok()) {
    return status;
  }
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventRecord(s.stop, s.stream));
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventSynchronize(s.stop));
  float ms = 0.0f;
  PDSERVE_CUDA_RETURN_IF_ERROR(cudaEventElapsedTime(&ms, s.start, s.stop));
  return ms * 1e-3;
}

// Args: {n, rows, cols}.
void BM_GemmBf16(benchmark::State& state) {
  const int64_t n = state.range(0), rows = state.range(1), cols = state.range(2);
  Setup s;
  if (absl::Status status = Prepare(n, rows, cols, s); !status.ok()) {
    state.SkipWithError(status.ToString().c_str());
    return;
  }
  const DeviceMatrix w = {.data = s.w.data(), .dtype = DType::kBF16, .rows = rows, .cols = cols};
  // Warm-up: cuBLAS picks and loads its kernel.
  if (absl::StatusOr<double> warm = TimedRun(s, n, w); !warm.ok()) {
    state.SkipWithError(warm.status().ToString().c_str());
    return;
  }
  double gpu_seconds = 0.0;
  for (auto _ : state) {
    const absl::StatusOr<double> seconds = TimedRun(s, n, w);
    if (!seconds.ok()) {
      state.SkipWithError(seconds.status().ToString().c_str());
      return;
    }
    state.SetIterationTime(*seconds);
    gpu_seconds += *seconds;
  }
  const double flops = 2.0 * static_cast<double>(n) * rows * cols * state.iterations();
  const double flops_per_second = flops / gpu_seconds;
  state.counters["TFLOP/s"] = flops_per_second * 1e-12;
  static const double peak = [] {
    auto info = GetDeviceInfo();
    return info.ok() ? info->peak_bf16_flops : 0.0;
  }();
  if (peak > 0) state.counters["of_bf16_peak"] = flops_per_second / peak;
}

void PrefillShapes(benchmark::internal::Benchmark* b) {
  for (int64_t n : {512, 2048, 4096}) {
    for (auto [rows, cols] :
         {std::pair<int64_t, int64_t>{4096, 4096}, {11008, 4096}, {768, 768}, {2048, 768}}) {
      b->Args({n, rows, cols});
    }
  }
}

BENCHMARK(BM_GemmBf16)
    ->ArgNames({"n", "rows", "cols"})
    ->Apply(PrefillShapes)
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pdserve::kernels::cuda

int main(int argc, char** argv) {
  std::string why_not;
  if (!pdserve::kernels::cuda::CudaDeviceAvailable(&why_not)) {
    std::printf("cuda_gemm_benchmark: no CUDA device: %s, skipped\n", why_not.c_str());
    return 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
