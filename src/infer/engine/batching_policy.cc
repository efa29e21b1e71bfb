#include "infer/engine/batching_policy.h"

#include <limits>

#include "infer/engine/scheduler.h"

namespace infer {

namespace {

class ContinuousBatching final : public BatchingPolicy {
 public:
  explicit ContinuousBatching(const EngineConfig& config) : config_(config) {}

  void Schedule(Scheduler& scheduler, double /*now_s*/, SchedulerOutput& output) override {
    int64_t budget = config_.max_num_batched_tokens;
    scheduler.ScheduleRunning(budget, output);
    // As vLLM: no admission in a step that had to preempt (memory is short).
    if (output.preempted.empty()) scheduler.AdmitWaiting(budget, output);
  }
  // With preemption off a request is admitted only with blocks for everything it may need.
  bool reserves_all() const override { return !config_.enable_preemption; }

 private:
  const EngineConfig config_;
};

class StaticBatching final : public BatchingPolicy {
 public:
  explicit StaticBatching(const EngineConfig& config) : config_(config) {}

  void Schedule(Scheduler& scheduler, double now_s, SchedulerOutput& output) override {
    if (scheduler.num_running() == 0) {
      if (scheduler.num_waiting() == 0) {
        deadline_s_.reset();
        return;
      }
      if (!deadline_s_) deadline_s_ = now_s + config_.batch_wait_timeout_s;
      const bool full = static_cast<int64_t>(scheduler.num_waiting()) >= config_.max_num_seqs;
      if (!full && now_s < *deadline_s_) return;
      deadline_s_.reset();
      // Form the batch: blocks for every member, and all their prompts in this one step (the
      // runner splits it into forwards of at most max_num_batched_tokens), so that their first
      // tokens come together.
      while (scheduler.num_waiting() > 0 &&
             static_cast<int64_t>(scheduler.num_running()) < config_.max_num_seqs) {
        if (!scheduler.AdmitFirstWaiting()) break;
      }
      int64_t unbounded = std::numeric_limits<int64_t>::max();
      scheduler.ScheduleRunning(unbounded, output);
      return;
    }
    // Then one token per member a step.
    int64_t budget = config_.max_num_batched_tokens;
    scheduler.ScheduleRunning(budget, output);
  }
  bool reserves_all() const override { return true; }
  std::optional<double> wake_deadline_s() const override { return deadline_s_; }

 private:
  const EngineConfig config_;
  std::optional<double> deadline_s_;
};

}  // namespace

std::unique_ptr<BatchingPolicy> MakeBatchingPolicy(const EngineConfig& config) {
  if (config.batching_mode == BatchingMode::kStatic)
    return std::make_unique<StaticBatching>(config);
  return std::make_unique<ContinuousBatching>(config);
}

}  // namespace infer
