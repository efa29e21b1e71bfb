// The engine's scheduler (pure: no model, threads, clock or I/O; the caller passes the time in).
// It owns the block manager and decides, each step, which requests run and how many of their
// tokens: running requests first (decode tokens, prefill chunks), then waiting ones by policy,
// under a token budget (max_num_batched_tokens) and max_num_seqs.
// How a step's batch forms is the BatchingPolicy's (batching_policy.h: continuous or static);
// the scheduler gives it the building blocks below. Under continuous batching with preemption
// on, blocks are taken as sequences grow; when none is left the lowest-priority, latest-arrived
// running request is preempted by recompute (blocks freed, requeued at the front of its
// priority). Otherwise a request is admitted only with blocks for prompt + max_tokens.
// A waiting request whose next prefix block is being computed by a running one waits for it,
// so a shared prefix is computed once even when its requests arrive together.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "infer/cache/block_manager.h"
#include "infer/engine/batching_policy.h"
#include "infer/engine/engine_config.h"
#include "infer/engine/request.h"
#include "infer/engine/sampled_tokens.h"

namespace infer {

struct ScheduledRequest {
  std::shared_ptr<Request> request;
  int64_t num_new = 0;        // tokens whose KV this step computes
  bool wants_logits = false;  // the step reaches its last token: sample after it
  bool samples() const { return num_new > 0 && wants_logits; }
};

struct SchedulerOutput {
  std::vector<ScheduledRequest> scheduled;
  std::vector<std::shared_ptr<Request>> preempted;  // preempted in this step
  // Requests whose KV block allocation threw in this step: failed (Request::error says why),
  // their blocks freed, out of the queues. The others are scheduled as usual.
  std::vector<std::shared_ptr<Request>> failed;
  int64_t num_batched_tokens = 0;
  // A model with recurrent state and prefix caching: state slots copied before the step (from a
  // snapshot into the slot of a sequence that resumes there) and after it (snapshots taken).
  struct StateCopy {
    int64_t from_slot = 0;
    int64_t to_slot = 0;
  };
  std::vector<StateCopy> state_restores;
  std::vector<StateCapture> state_captures;
};

struct SchedulerStats {
  int64_t prompt_tokens = 0;         // of admitted requests (first admission)
  int64_t cached_prompt_tokens = 0;  // of those, served by the prefix cache
  int64_t computed_tokens = 0;       // tokens every step computed, in total
  int64_t preemptions = 0;
  // Speculative decoding (vLLM's spec_decode counters): requests that had a draft checked, its
  // tokens, and those the draws confirmed.
  int64_t spec_decode_drafts = 0;
  int64_t spec_decode_draft_tokens = 0;
  int64_t spec_decode_accepted_tokens = 0;
};

class Scheduler {
 public:
  // Throws infer::Error for an invalid config.
  Scheduler(const EngineConfig& config, int64_t num_blocks);
  ~Scheduler();

  // Whether a request needing `total_tokens` positions can ever fit the block pool.
  bool Fits(int64_t total_tokens) const;
  // Queues a request; false when max_waiting_requests are already waiting (HTTP 503).
  bool Add(std::shared_ptr<Request> request);

  // The work of the step at time `now_s` (empty: nothing to run now).
  SchedulerOutput Schedule(double now_s);
  // After the step: when it `ran`, each scheduled request's new KV is computed and the tokens the
  // token pipeline drew for it (`sampled`: one per scheduled request, in order) are appended,
  // each checked for a stop (stop_checker.h), the rest dropped once it ends; the rejected part of
  // its draft is not counted as computed, and it takes its next draft. Then requests that are
  // done (finished or failed) leave and free their blocks. Returns each scheduled request's
  // StepOutputs, in order (time_s unset): one per appended token, then an error output if the
  // pipeline failed it.
  std::vector<std::vector<StepOutput>> Update(const SchedulerOutput& output,
                                              std::span<const SampledTokens> sampled, bool ran);

  // Cancels a request: a waiting one leaves the queue, a running one is failed and frees its
  // blocks. Returns it, or null if unknown or already done.
  std::shared_ptr<Request> Abort(std::string_view request_id);
  // Removes every queued and running request (their blocks freed), e.g. at shutdown.
  std::vector<std::shared_ptr<Request>> TakeAll();

  bool HasWork() const { return !waiting_.empty() || !running_.empty(); }
  size_t num_waiting() const { return waiting_.size(); }
  size_t num_running() const { return running_.size(); }
  const std::vector<std::shared_ptr<Request>>& running() const { return running_; }
  const std::deque<std::shared_ptr<Request>>& waiting() const { return waiting_; }
  // When an idle engine must schedule again without new work: a forming static batch's
  // dispatch time if it does not fill first.
  std::optional<double> batch_wait_deadline_s() const { return policy_->wake_deadline_s(); }
  const BlockManager& block_manager() const { return blocks_; }
  const SchedulerStats& stats() const { return stats_; }

  // The building blocks of a step, for the BatchingPolicy. Schedules running requests under
  // `budget`, allocating blocks as they grow and preempting when they run out.
  void ScheduleRunning(int64_t& budget, SchedulerOutput& output);
  // Admits waiting requests in order while budget and max_num_seqs allow; a request whose next
  // prefix block a running one is computing waits a step to share it.
  void AdmitWaiting(int64_t& budget, SchedulerOutput& output);
  // Moves the first waiting request to running with its blocks reserved and nothing scheduled
  // yet; false if its blocks are not free.
  bool AdmitFirstWaiting();

 private:
  // (priority, arrival, seq_id) under the priority policy; (arrival, seq_id) under fcfs.
  bool RunsBefore(const Request& a, const Request& b) const;
  void InsertRunning(std::shared_ptr<Request> request);
  // Waiting order: by policy; a preempted request goes to the front of its priority.
  void InsertWaiting(std::shared_ptr<Request> request, bool at_front_of_priority);
  // Frees a running request's blocks and requeues it at the front of its priority (recompute).
  void Preempt(const std::shared_ptr<Request>& request);
  // Block reservation and preemption in one place: takes blocks for `request`'s first
  // num_tokens() positions (read again after its draft is dropped). While none are free it drops
  // the request's draft, then preempts the last running request while may_preempt(it) holds,
  // stopping once the request preempted itself. Returns the victims in order, whether the
  // blocks were taken and, when allocation threw (preemption off, a fault), why.
  struct Reservation {
    bool granted = false;
    std::vector<std::shared_ptr<Request>> victims;
    std::optional<std::string> error;
  };
  Reservation Reserve(const std::shared_ptr<Request>& request,
                      const std::function<int64_t()>& num_tokens,
                      const std::function<bool(const Request&)>& may_preempt);
  // Victims scheduled earlier in this step give their tokens back; all go to output.preempted.
  static void Unschedule(const std::vector<std::shared_ptr<Request>>& victims,
                         SchedulerOutput& output);
  // A request whose block allocation threw: failed, blocks freed, out of running_ and waiting_,
  // reported in the step's SchedulerOutput::failed.
  void FailRequest(std::shared_ptr<Request> request, const std::string& why);
  // Appends what the pipeline drew for `request`, into `outputs`; returns how many of the draft
  // tokens the step computed were rejected.
  int64_t AppendSampled(Request& request, const SampledTokens& sampled,
                        std::vector<StepOutput>& outputs);
  // Whether `request`'s adapter runs already or another one may join the running ones
  // (EngineConfig::max_loras); always for a base-model request.
  bool AdapterFits(const Request& request) const;
  // A model with state: restores and snapshots for the step's sequences (block_manager.h); a
  // chunk that crosses a wanted snapshot boundary ends there.
  void PlanSnapshots(SchedulerOutput& output);
  // Takes blocks for a waiting request and moves it to running; false if they are not free.
  bool Admit(const std::shared_ptr<Request>& request, int64_t budget, SchedulerOutput& output);

  EngineConfig config_;
  std::unique_ptr<BatchingPolicy> policy_;
  BlockManager blocks_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::vector<std::shared_ptr<Request>> running_;  // in RunsBefore order
  SchedulerStats stats_;
  std::vector<std::shared_ptr<Request>> failed_;  // of the step being scheduled
};

}  // namespace infer
