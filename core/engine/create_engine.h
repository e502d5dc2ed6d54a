// CreateEngine: the engine for EngineOptions::device — LlamaEngine on the CPU, CudaEngine on a GPU.
// A binary built without the CUDA toolkit answers device cuda with FailedPrecondition saying so.
#ifndef PDSERVE_CORE_ENGINE_CREATE_ENGINE_H_
#define PDSERVE_CORE_ENGINE_CREATE_ENGINE_H_

#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "core/engine/engine.h"
#include "core/model/model_weights.h"

namespace pdserve {

absl::StatusOr<std::unique_ptr<Engine>> CreateEngine(const ModelWeights& weights,
                                                     const EngineOptions& options);

// Why device cuda cannot be used by this binary on this machine (built without the backend, or
// no device), or empty when it can.
std::string CudaUnavailableReason();

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_CREATE_ENGINE_H_
