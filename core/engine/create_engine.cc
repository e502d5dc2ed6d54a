#include "core/engine/create_engine.h"

#include "core/engine/llama_engine.h"
#if PDSERVE_HAVE_CUDA
#include "core/engine/cuda_engine.h"
#include "kernels/cuda/cuda_status.h"
#endif

namespace pdserve {

std::string CudaUnavailableReason() {
#if PDSERVE_HAVE_CUDA
  std::string why_not;
  if (kernels::cuda::CudaDeviceAvailable(&why_not)) return "";
  return "no CUDA device: " + why_not;
#else
  return "this pdserve was built without the CUDA backend (no CUDA toolkit at build time, or "
         "PDSERVE_CUDA=OFF)";
#endif
}

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const ModelWeights& weights,
                                                     const EngineOptions& options) {
  if (options.device == Device::kCpu) return LlamaEngine::Create(weights, options);
#if PDSERVE_HAVE_CUDA
  return CudaEngine::Create(weights, options);
#else
  return absl::FailedPreconditionError("device cuda: " + CudaUnavailableReason() +
                                       "; rebuild with the toolkit or use --device cpu");
#endif
}

}  // namespace pdserve
