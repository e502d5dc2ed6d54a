// Named spdlog loggers, one per component, all writing to stderr (stdout carries results only).
// Thread-safe: loggers are created once and shared.
#ifndef PDSERVE_CORE_BASE_LOGGING_H_
#define PDSERVE_CORE_BASE_LOGGING_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "spdlog/spdlog.h"

namespace pdserve {

// Returns the logger named `component`, creating it (stderr sink, the global level) on first use.
std::shared_ptr<spdlog::logger> GetLogger(const std::string& component);

// Sets the level of every logger: trace, debug, info, warn, error, off. Also honours the
// SPDLOG_LEVEL environment variable when `level` is empty.
absl::Status SetLogLevel(const std::string& level);

}  // namespace pdserve

#endif  // PDSERVE_CORE_BASE_LOGGING_H_
