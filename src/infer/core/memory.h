// How much memory the machine can still give (for sizing the KV pool and for refusing a model
// that cannot fit before anything is allocated).
#pragma once

#include <cstdint>

namespace infer {

// MemAvailable from /proc/meminfo, in bytes; 0 when it cannot be read.
int64_t AvailableMemoryBytes();

}  // namespace infer
