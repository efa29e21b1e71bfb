// How the scheduler forms each step's batch (EngineConfig::batching_mode), behind one interface
// so the scheduler's core and the engine's step carry no mode branches:
// - continuous (vLLM-style): running requests first (decode tokens, prefill chunks), then
//   waiting ones are admitted under the token budget, every step;
// - static: a batch forms once max_num_seqs wait or batch_wait_timeout_s has passed,
//   its members hold KV blocks for everything they may generate, its prompts run in one step
//   past the token budget (their first tokens are delivered together), then it decodes to
//   completion before the next one forms.
#pragma once

#include <memory>
#include <optional>

#include "infer/engine/engine_config.h"

namespace infer {

class Scheduler;
struct SchedulerOutput;

class BatchingPolicy {
 public:
  virtual ~BatchingPolicy() = default;

  // The work of the step at time `now_s`, built from the scheduler's building blocks.
  virtual void Schedule(Scheduler& scheduler, double now_s, SchedulerOutput& output) = 0;
  // Whether an admitted request takes KV blocks for prompt + max_tokens at once (so a running
  // request never runs out of blocks and is never preempted).
  virtual bool reserves_all() const = 0;
  // When an idle engine must schedule again even without new work (a forming batch's deadline).
  virtual std::optional<double> wake_deadline_s() const { return std::nullopt; }
};

std::unique_ptr<BatchingPolicy> MakeBatchingPolicy(const EngineConfig& config);

}  // namespace infer
