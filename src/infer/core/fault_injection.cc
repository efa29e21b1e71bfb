#include "infer/core/fault_injection.h"

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "infer/core/error.h"

namespace infer::fault {
namespace {

struct Trigger {
  int64_t first = 0;  // 1-based pass that fails first
  int64_t count = 1;  // passes that fail from there
  int64_t passes = 0;
};

struct Faults {
  std::mutex mutex;
  std::map<std::string, Trigger, std::less<>> triggers;
};

int64_t ParseCount(const std::string& text, const std::string& spec) {
  size_t used = 0;
  int64_t value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  INFER_CHECK(used == text.size() && value > 0,
              "INFER_FAULTS: '{}' is not POINT@N or POINT@NxCOUNT with positive numbers", spec);
  return value;
}

// Every set ever armed stays alive (and reachable) for the process: a thread may still be inside
// Hit() with one that Arm() has just replaced.
Faults* NewFaults() {
  static std::mutex mutex;
  static std::vector<std::unique_ptr<Faults>> all;
  std::lock_guard lock(mutex);
  all.push_back(std::make_unique<Faults>());
  return all.back().get();
}

Faults* Parse(const char* env) {
  Faults* faults = NewFaults();
  std::string text(env);
  size_t begin = 0;
  while (begin <= text.size()) {
    size_t end = text.find(',', begin);
    if (end == std::string::npos) end = text.size();
    const std::string spec = text.substr(begin, end - begin);
    begin = end + 1;
    if (spec.empty()) continue;
    const size_t at = spec.find('@');
    INFER_CHECK(at != std::string::npos && at > 0,
                "INFER_FAULTS: '{}' is not POINT@N or POINT@NxCOUNT", spec);
    const std::string point = spec.substr(0, at);
    INFER_CHECK(point == "forward" || point == "kv_alloc",
                "INFER_FAULTS: unknown point '{}' (forward, kv_alloc)", point);
    const std::string when = spec.substr(at + 1);
    const size_t x = when.find('x');
    Trigger arm;
    arm.first = ParseCount(when.substr(0, x), spec);
    if (x != std::string::npos) arm.count = ParseCount(when.substr(x + 1), spec);
    faults->triggers[point] = arm;
  }
  return faults;
}

std::atomic<Faults*> g_armed{nullptr};
std::once_flag g_from_environment;

Faults* Armed() {
  std::call_once(g_from_environment, [] {
    const char* env = std::getenv("INFER_FAULTS");
    if (env != nullptr && *env != '\0') g_armed.store(Parse(env));
  });
  return g_armed.load(std::memory_order_acquire);
}

}  // namespace

bool Hit(std::string_view point) {
  Faults* faults = Armed();
  if (faults == nullptr) return false;
  std::lock_guard lock(faults->mutex);
  auto it = faults->triggers.find(point);
  if (it == faults->triggers.end()) return false;
  Trigger& arm = it->second;
  ++arm.passes;
  return arm.passes >= arm.first && arm.passes < arm.first + arm.count;
}

void Arm(std::string_view spec) {
  Armed();  // the environment is read first, so that it cannot override this later
  g_armed.store(spec.empty() ? nullptr : Parse(std::string(spec).c_str()),
                std::memory_order_release);
}

void MaybeThrow(std::string_view point) {
  if (Hit(point)) Fail("injected fault: {}", point);
}

}  // namespace infer::fault
