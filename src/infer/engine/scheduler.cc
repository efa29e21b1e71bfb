#include "infer/engine/scheduler.h"

#include <algorithm>
#include <tuple>
#include <utility>

#include "infer/core/error.h"
#include "infer/engine/stop_checker.h"

namespace infer {

Scheduler::Scheduler(const EngineConfig& config, int64_t num_blocks)
    : config_(config),
      policy_(MakeBatchingPolicy(config)),
      blocks_(num_blocks, config.block_size, config.enable_prefix_caching && config.use_kv_cache,
              config.use_kv_cache ? config.recurrent_state_slots : 0,
              std::max<int64_t>(0, config.state_snapshot_slots)) {
  config_.Validate();
}

Scheduler::~Scheduler() = default;

bool Scheduler::Fits(int64_t total_tokens) const {
  return blocks_.BlocksFor(total_tokens) <= blocks_.num_blocks();
}

bool Scheduler::RunsBefore(const Request& a, const Request& b) const {
  const int64_t pa = config_.priority_policy() ? a.priority : 0;
  const int64_t pb = config_.priority_policy() ? b.priority : 0;
  return std::tie(pa, a.arrival_time_s, a.seq_id) < std::tie(pb, b.arrival_time_s, b.seq_id);
}

void Scheduler::InsertRunning(std::shared_ptr<Request> request) {
  const auto it =
      std::upper_bound(running_.begin(), running_.end(), request,
                       [&](const auto& a, const auto& b) { return RunsBefore(*a, *b); });
  running_.insert(it, std::move(request));
}

void Scheduler::InsertWaiting(std::shared_ptr<Request> request, bool at_front_of_priority) {
  const int64_t priority = config_.priority_policy() ? request->priority : 0;
  const auto key = [&](const auto& r) { return config_.priority_policy() ? r->priority : 0; };
  const auto it = at_front_of_priority
                      ? std::find_if(waiting_.begin(), waiting_.end(),
                                     [&](const auto& r) { return key(r) >= priority; })
                      : std::find_if(waiting_.begin(), waiting_.end(),
                                     [&](const auto& r) { return key(r) > priority; });
  waiting_.insert(it, std::move(request));
}

bool Scheduler::Add(std::shared_ptr<Request> request) {
  INFER_CHECK(request != nullptr, "scheduler: null request");
  // An invariant, not a check of the request: Engine::PreparePrompt refuses such requests.
  INFER_CHECK(Fits(request->max_total_tokens()),
              "scheduler: request {} ({} tokens) can never fit the pool of {} blocks",
              request->request_id, request->max_total_tokens(), blocks_.num_blocks());
  if (static_cast<int64_t>(waiting_.size()) >= config_.max_waiting_requests) return false;
  InsertWaiting(std::move(request), /*at_front_of_priority=*/false);
  return true;
}

void Scheduler::Preempt(const std::shared_ptr<Request>& request) {
  INFER_CHECK(config_.enable_preemption, "scheduler: out of KV blocks with preemption off");
  blocks_.Free(request->block_table);
  request->DropDraft();  // recompute covers the accepted tokens only
  request->num_computed_tokens = 0;
  request->state = RequestState::kWaiting;
  ++request->num_preemptions;
  ++stats_.preemptions;
  std::erase(running_, request);
  InsertWaiting(request, /*at_front_of_priority=*/true);
}

Scheduler::Reservation Scheduler::Reserve(const std::shared_ptr<Request>& request,
                                          const std::function<int64_t()>& num_tokens,
                                          const std::function<bool(const Request&)>& may_preempt) {
  Reservation reservation;
  try {
    // A draft's tokens get blocks but are not known tokens: no block of them is registered in
    // the prefix cache until the model confirms them (MarkComputed).
    while (!blocks_.Allocate(request->block_table, request->token_ids, num_tokens())) {
      // Out of blocks: the request's own draft goes first, then running requests from the back
      // of the run order (lowest priority, latest arrival; maybe this one).
      if (request->num_draft_tokens() > 0) {
        request->DropDraft();
        continue;
      }
      if (running_.empty() || !may_preempt(*running_.back())) return reservation;
      const std::shared_ptr<Request> victim = running_.back();
      Preempt(victim);
      reservation.victims.push_back(victim);
      if (victim == request) return reservation;
    }
  } catch (const std::exception& e) {
    reservation.error = e.what();
    return reservation;
  }
  reservation.granted = true;
  return reservation;
}

void Scheduler::Unschedule(const std::vector<std::shared_ptr<Request>>& victims,
                           SchedulerOutput& output) {
  for (const auto& victim : victims) {
    // A request preempted after it was scheduled in this step gives its tokens back.
    const auto it = std::find_if(output.scheduled.begin(), output.scheduled.end(),
                                 [&](const ScheduledRequest& s) { return s.request == victim; });
    if (it != output.scheduled.end()) {
      output.num_batched_tokens -= it->num_new;
      output.scheduled.erase(it);
    }
    output.preempted.push_back(victim);
  }
}

void Scheduler::FailRequest(std::shared_ptr<Request> request, const std::string& why) {
  blocks_.Free(request->block_table);
  request->state = RequestState::kFailed;
  request->error = why;
  std::erase(running_, request);
  std::erase(waiting_, request);
  failed_.push_back(std::move(request));
}

void Scheduler::ScheduleRunning(int64_t& budget, SchedulerOutput& output) {
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    const std::shared_ptr<Request> request = running_[i];
    // A running request always has a token to compute (its last drawn one): one without would
    // never finish, so this is a broken invariant, not a request to skip (the engine fails the
    // step's requests rather than spin).
    INFER_CHECK(request->num_uncomputed() > 0,
                "scheduler: running request {} has no token to compute ({} of {} computed)",
                request->request_id, request->num_computed_tokens, request->num_tokens());
    // A speculative draft is optional: what does not fit the budget is dropped, so that the
    // step still reaches the request's last token.
    if (request->num_uncomputed() > budget) request->DropDraft(request->num_uncomputed() - budget);
    const Reservation reservation = Reserve(
        request,
        [&] { return request->num_computed_tokens + std::min(request->num_uncomputed(), budget); },
        [](const Request&) { return true; });
    Unschedule(reservation.victims, output);
    if (reservation.error) {
      FailRequest(request, *reservation.error);  // it leaves running_: i is now the next one
      continue;
    }
    if (!reservation.granted) break;  // it preempted itself, after everything behind it
    const int64_t num_new = std::min(request->num_uncomputed(), budget);
    output.scheduled.push_back({request, num_new, num_new == request->num_uncomputed()});
    output.num_batched_tokens += num_new;
    budget -= num_new;
    ++i;
  }
}

bool Scheduler::Admit(const std::shared_ptr<Request>& request, int64_t budget,
                      SchedulerOutput& output) {
  const PrefixMatch match = blocks_.Match(request->token_ids, request->block_table.salt);
  const int64_t cached = match.num_blocks * blocks_.block_size();
  const int64_t num_new = std::min(request->num_tokens() - cached, budget);
  // With preemption off (and in static mode) a request holds blocks for everything it may
  // generate, so a running request never runs out.
  const bool reserve_all = policy_->reserves_all();
  const int64_t reserve =
      reserve_all ? std::max(request->max_total_tokens(), request->num_tokens()) : cached + num_new;
  // Under the priority policy a more urgent request may take the blocks of a less urgent
  // running one.
  const auto less_urgent = [&](const Request& running) {
    return config_.enable_preemption && config_.priority_policy() &&
           RunsBefore(*request, running) && request->priority < running.priority;
  };
  const Reservation reservation = Reserve(
      request, [&] { return reserve; }, less_urgent);
  Unschedule(reservation.victims, output);
  if (reservation.error) {
    FailRequest(request, *reservation.error);  // it leaves waiting_; admission stops this step
    return false;
  }
  if (!reservation.granted) return false;
  request->num_computed_tokens = request->block_table.num_cached_tokens;
  if (request->num_preemptions == 0) {
    request->num_cached_prompt_tokens = request->num_computed_tokens;
    stats_.prompt_tokens += request->num_prompt_tokens();
    stats_.cached_prompt_tokens += request->num_computed_tokens;
  }
  request->state = RequestState::kPrefill;
  const int64_t run = std::min(request->num_uncomputed(), budget);
  output.scheduled.push_back({request, run, run == request->num_uncomputed()});
  output.num_batched_tokens += run;
  InsertRunning(request);
  return true;
}

bool Scheduler::AdapterFits(const Request& request) const {
  if (!request.lora) return true;
  std::vector<const LoraAdapter*> running;
  for (const auto& r : running_) {
    if (r->lora && std::find(running.begin(), running.end(), r->lora.get()) == running.end()) {
      if (r->lora == request.lora) return true;
      running.push_back(r->lora.get());
    }
  }
  return static_cast<int64_t>(running.size()) < config_.max_loras;
}

void Scheduler::AdmitWaiting(int64_t& budget, SchedulerOutput& output) {
  for (auto it = waiting_.begin(); it != waiting_.end() && budget > 0 &&
                                   static_cast<int64_t>(running_.size()) < config_.max_num_seqs;) {
    const std::shared_ptr<Request> request = *it;
    // (A model with state: the sequence computing the prefix it shares takes a snapshot at its
    // end on the way.)
    blocks_.WantSnapshot(request->token_ids, request->block_table.salt);
    if (blocks_.Match(request->token_ids, request->block_table.salt).next_pending) {
      ++it;  // its next prefix block is being computed: share it next step
      continue;
    }
    if (!AdapterFits(*request)) {
      ++it;  // max_loras other adapters run: it waits, the requests behind it may go
      continue;
    }
    const int64_t before = output.num_batched_tokens;
    if (!Admit(request, budget, output)) break;  // in order: no overtaking for blocks
    budget -= output.num_batched_tokens - before;
    it = waiting_.erase(std::find(waiting_.begin(), waiting_.end(), request));
    if (!output.preempted.empty()) break;  // memory is short: admit no more this step
  }
}

bool Scheduler::AdmitFirstWaiting() {
  SchedulerOutput unused;  // a budget of 0 schedules nothing
  if (waiting_.empty() || !AdapterFits(*waiting_.front()) || !Admit(waiting_.front(), 0, unused)) {
    return false;
  }
  waiting_.pop_front();
  return true;
}

SchedulerOutput Scheduler::Schedule(double now_s) {
  SchedulerOutput output;
  policy_->Schedule(*this, now_s, output);
  if (blocks_.snapshots()) PlanSnapshots(output);
  output.failed = std::move(failed_);
  failed_.clear();
  return output;
}

void Scheduler::PlanSnapshots(SchedulerOutput& output) {
  for (ScheduledRequest& s : output.scheduled) {
    if (s.num_new == 0) continue;
    Request& request = *s.request;
    BlockTable& table = request.block_table;
    if (const int64_t slot = blocks_.TakeRestore(table); slot >= 0) {
      output.state_restores.push_back({slot, table.state_slot});
    }
    // A draft's check is not cut, and its state is not final until the draw keeps it.
    if (request.num_draft_tokens() > 0) continue;
    const int64_t from = request.num_computed_tokens;
    const int64_t to = from + s.num_new;
    const bool decoding = request.state == RequestState::kDecode;
    const std::optional<int64_t> boundary =
        blocks_.NextCapture(table, request.token_ids, from, to, decoding);
    if (!boundary) continue;
    const std::optional<StateCapture> capture =
        blocks_.BeginCapture(table, request.token_ids, *boundary, decoding);
    if (!capture) continue;
    // The chunk ends at the snapshot's boundary; the rest runs next step.
    output.num_batched_tokens -= to - *boundary;
    s.num_new = *boundary - from;
    s.wants_logits = s.wants_logits && *boundary == to;
    output.state_captures.push_back(*capture);
  }
}

namespace {

// Appends `token` to the request and ends it where the stop checker says.
StepOutput AppendToken(Request& request, const SampledToken& token) {
  request.token_ids.push_back(token.id);
  request.generated_token_ids.push_back(token.id);
  request.state = RequestState::kDecode;
  const std::optional<FinishReason> reason = CheckStop(request, token);
  StepOutput output = OutputOf(request);
  output.token_id = token.id;
  output.text_delta = request.text.TakeStable();
  output.logprobs = token.logprobs;
  if (reason) {
    request.state = RequestState::kFinished;
    request.finish_reason = reason;
    output.finished = true;
    output.finish_reason = reason;
    if (request.text.stopped()) output.stop_string = request.text.stop_string();
  }
  return output;
}

}  // namespace

int64_t Scheduler::AppendSampled(Request& request, const SampledTokens& sampled,
                                 std::vector<StepOutput>& outputs) {
  const int64_t drafted = request.num_draft_tokens();
  request.draft_token_ids.clear();
  int64_t appended = 0;
  for (const SampledToken& token : sampled.tokens) {
    outputs.push_back(AppendToken(request, token));
    ++appended;
    if (request.done()) break;  // what the pipeline drew after the end is dropped
  }
  // A draft token counts as confirmed only where it was appended.
  const int64_t accepted = std::min(sampled.num_accepted_draft, appended);
  if (drafted > 0) {
    ++stats_.spec_decode_drafts;
    stats_.spec_decode_draft_tokens += drafted;
    stats_.spec_decode_accepted_tokens += accepted;
  }
  if (!request.done()) {
    if (sampled.error) {
      request.state = RequestState::kFailed;
      request.error = sampled.error;
      outputs.push_back(ErrorOutputOf(request, *sampled.error));
    } else {
      request.draft_token_ids = sampled.next_draft;
    }
  }
  return drafted - accepted;
}

std::vector<std::vector<StepOutput>> Scheduler::Update(const SchedulerOutput& output,
                                                       std::span<const SampledTokens> sampled,
                                                       bool ran) {
  std::vector<std::vector<StepOutput>> outputs(output.scheduled.size());
  if (ran) {
    INFER_CHECK(sampled.size() == output.scheduled.size(),
                "scheduler: {} sampled entries for {} scheduled requests", sampled.size(),
                output.scheduled.size());
    for (size_t i = 0; i < output.scheduled.size(); ++i) {
      const ScheduledRequest& s = output.scheduled[i];
      Request& request = *s.request;
      // A rejected draft's KV was computed but belongs to no token of the request.
      const int64_t rejected = s.samples() ? AppendSampled(request, sampled[i], outputs[i]) : 0;
      request.num_computed_tokens += s.num_new - rejected;
      stats_.computed_tokens += s.num_new;
      if (!request.done()) {
        blocks_.MarkComputed(request.block_table, request.token_ids, request.num_computed_tokens);
      }
    }
  }
  for (auto it = running_.begin(); it != running_.end();) {
    if (!(*it)->done()) {
      ++it;
      continue;
    }
    // A finished request's computed blocks stay in the prefix cache (a chat's next turn).
    if ((*it)->state == RequestState::kFinished) {
      blocks_.MarkComputed((*it)->block_table, (*it)->token_ids, (*it)->num_computed_tokens);
    }
    blocks_.Free((*it)->block_table);
    it = running_.erase(it);
  }
  // After the blocks are registered: a snapshot is kept while its block is cached.
  for (const StateCapture& capture : output.state_captures) blocks_.EndCapture(capture.hash, ran);
  return outputs;
}

std::shared_ptr<Request> Scheduler::Abort(std::string_view request_id) {
  const auto matches = [&](const auto& r) { return r->request_id == request_id; };
  std::shared_ptr<Request> request;
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), matches); it != waiting_.end()) {
    request = *it;
    waiting_.erase(it);
  } else if (auto run = std::find_if(running_.begin(), running_.end(), matches);
             run != running_.end() && !(*run)->done()) {
    request = *run;
    running_.erase(run);
  } else {
    return nullptr;
  }
  blocks_.Free(request->block_table);
  request->state = RequestState::kFailed;
  request->error = "request cancelled";
  return request;
}

std::vector<std::shared_ptr<Request>> Scheduler::TakeAll() {
  std::vector<std::shared_ptr<Request>> all(running_.begin(), running_.end());
  all.insert(all.end(), waiting_.begin(), waiting_.end());
  for (const auto& request : all) blocks_.Free(request->block_table);
  running_.clear();
  waiting_.clear();
  return all;
}

}  // namespace infer
