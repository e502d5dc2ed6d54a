#include "core/base/logging.h"

#include "spdlog/cfg/env.h"
#include "spdlog/sinks/stdout_color_sinks.h"

namespace pdserve {

std::shared_ptr<spdlog::logger> GetLogger(const std::string& component) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (auto existing = spdlog::get(component)) {
    return existing;
  }
  auto logger = spdlog::stderr_color_mt(component);
  logger->set_pattern("[%H:%M:%S.%e] [%n] [%^%l%$] %v");
  logger->set_level(spdlog::get_level());
  return logger;
}

absl::Status SetLogLevel(const std::string& level) {
  if (level.empty()) {
    spdlog::cfg::load_env_levels();
    return absl::OkStatus();
  }
  spdlog::level::level_enum parsed = spdlog::level::from_str(level);
  if (parsed == spdlog::level::off && level != "off") {
    return absl::InvalidArgumentError("unknown log level '" + level +
                                      "' (expected trace, debug, info, warn, error or off)");
  }
  spdlog::set_level(parsed);
  spdlog::apply_all([parsed](const std::shared_ptr<spdlog::logger>& l) { l->set_level(parsed); });
  return absl::OkStatus();
}

}  // namespace pdserve
