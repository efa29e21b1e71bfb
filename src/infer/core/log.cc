#include "infer/core/log.h"

#include <cstdlib>

#include <spdlog/sinks/stdout_color_sinks.h>

namespace infer {

void InitLogging() {
  static const bool kInitialized = [] {
    auto logger = spdlog::stderr_color_mt("infer");
    logger->set_pattern("[%H:%M:%S.%e] [%^%l%$] %v");
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::info);
    if (const char* level = std::getenv("INFER_LOG_LEVEL")) {
      spdlog::set_level(spdlog::level::from_str(level));
    }
    return true;
  }();
  (void)kInitialized;
}

}  // namespace infer
