// Logging: spdlog to stderr; level from INFER_LOG_LEVEL (trace, debug, info, warn, error, off).
#pragma once

#include <spdlog/spdlog.h>

namespace infer {

// Idempotent; called by the CLI at start-up. Library code just calls spdlog::info(...).
void InitLogging();

}  // namespace infer
