// The engine's core: the one step (schedule, run the model, process the logits, update the
// scheduler, deliver) over the scheduler, the model runner and the token pipeline, with the
// queue the front door feeds and the engine's metrics. Add / Cancel / the accessors from any
// thread; RunStep and WaitForWork on one thread at a time (the engine's loop).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "infer/cache/kv_cache_sizing.h"
#include "infer/engine/engine_config.h"
#include "infer/engine/language_model.h"
#include "infer/engine/metrics.h"
#include "infer/engine/output.h"
#include "infer/engine/request.h"
#include "infer/engine/runner.h"
#include "infer/engine/scheduler.h"
#include "infer/engine/token_pipeline.h"
#include "infer/tokenizer/tokenizer.h"

namespace infer {

// What a driver sees of each step: every StepOutput as it is delivered (it also goes to its
// request's channel), and every request that ended. Either may be empty.
struct StepCallbacks {
  std::function<void(const StepOutput&)> on_output;
  std::function<void(GenerationOutput)> on_end;
};

class EngineCore {
 public:
  // Everything given must outlive the core; `tokenizer` may be null. Throws infer::Error for an
  // invalid config.
  EngineCore(const EngineConfig& config, LanguageModel& model, const Tokenizer* tokenizer,
             int64_t num_blocks, std::vector<int32_t> eos_token_ids);

  // The engine clock: seconds since the core was made.
  double NowS() const;

  enum class Added { kQueued, kStopped, kFull };
  // Queues a request (its seq_id set here): kFull when max_waiting_requests already wait.
  Added Add(std::shared_ptr<Request> request);
  // Cancels a request at the next step (it leaves and frees its blocks).
  void Cancel(const std::string& request_id);
  bool HasWork() const;

  // One step, as nano-vllm's step(): schedule, run the model, process the logits, update,
  // deliver. False when there was nothing to run. An exception in the forward fails the step's
  // requests (error outputs) and the core goes on.
  bool RunStep(const StepCallbacks& callbacks);
  // Sleeps until new work, a cancel, RequestStop() or a forming static batch's deadline (at most
  // half a second). False, at once, once stopping.
  bool WaitForWork();
  // Stops taking requests and wakes WaitForWork. Returns whether it was stopping already.
  bool RequestStop();
  bool stopping() const;
  // Fails every request still queued or running with `reason` (its client gets an error output).
  void FailAll(const std::string& reason);

  SchedulerStats stats() const;
  // The counters and histograms, with the gauges (running, waiting, KV usage) read now.
  EngineMetrics metrics() const;
  // {"num_blocks", "free_blocks", ...} of the pool `kv` (see Engine::KvCacheSummaryJson).
  std::string KvCacheSummaryJson(const KvCacheInfo& kv, double max_concurrency) const;

 private:
  // The step's parts. Cancels queued by Cancel(); the step's work (nullopt when scheduling
  // failed and every request was failed); the forward and the token pipeline: what was drawn
  // for each scheduled request, or nullopt when they threw (the scheduled requests are failed,
  // their error outputs into `ready`); the scheduler's update (tokens appended, stops, blocks
  // freed), whose outputs go into `ready`, stamped, and the requests that ended. `ready` is
  // delivered after the update.
  void ApplyCancels(const StepCallbacks& callbacks);
  std::optional<SchedulerOutput> Schedule(const StepCallbacks& callbacks);
  using Ready = std::vector<std::pair<std::shared_ptr<Request>, StepOutput>>;
  std::optional<std::vector<SampledTokens>> Execute(const SchedulerOutput& step, Ready& ready);
  void Update(const SchedulerOutput& step, const std::optional<std::vector<SampledTokens>>& sampled,
              Ready& ready, const StepCallbacks& callbacks);
  // A request that ended outside a forward (cancelled, failed while scheduling): its error
  // output, metrics and GenerationOutput.
  void EndWithError(const std::shared_ptr<Request>& request, const std::string& why,
                    const StepCallbacks& callbacks, bool observe);
  GenerationOutput MakeOutput(const Request& request) const;
  static void Deliver(const Request& request, StepOutput output, const StepCallbacks& callbacks);
  // Metrics: a token just appended to `request`, and a request that ended at engine time `now`.
  void ObserveToken(const Request& request);
  void ObserveEnd(const Request& request, double now);

  const EngineConfig& config_;
  const Tokenizer* tokenizer_;
  ModelRunner runner_;
  TokenPipeline pipeline_;
  const std::chrono::steady_clock::time_point start_time_ = std::chrono::steady_clock::now();

  mutable std::mutex mutex_;  // guards scheduler_, pending_cancels_, stopping_, the counters
  std::condition_variable work_;
  std::unique_ptr<Scheduler> scheduler_;
  std::vector<std::string> pending_cancels_;
  bool stopping_ = false;
  int64_t next_seq_id_ = 0;
  int64_t num_added_ = 0;             // wakes the loop
  mutable std::mutex metrics_mutex_;  // guards metrics_
  EngineMetrics metrics_;
};

}  // namespace infer
