// Device: where an engine runs its forward pass. The CPU engine is the reference and the
// fallback; the CUDA engine exists when pdserve is built with a CUDA toolkit and needs a device at
// run time.
#ifndef PDSERVE_CORE_ENGINE_DEVICE_H_
#define PDSERVE_CORE_ENGINE_DEVICE_H_

#include <cstdint>
#include <string_view>

#include "absl/status/statusor.h"

namespace pdserve {

enum class Device : uint8_t { kCpu = 0, kCuda = 1 };

// "cpu" or "cuda".
const char* DeviceName(Device device);

// Parses "cpu" or "cuda" (case-insensitive); InvalidArgument names the accepted values.
absl::StatusOr<Device> ParseDevice(std::string_view name);

}  // namespace pdserve

#endif  // PDSERVE_CORE_ENGINE_DEVICE_H_
