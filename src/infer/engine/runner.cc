#include "infer/engine/runner.h"

#include <algorithm>

#include "infer/core/error.h"
#include "infer/core/fault_injection.h"

namespace infer {

std::span<float> ModelRunner::Run(const SchedulerOutput& step) {
  steps_.clear();
  size_t drafted = 0;  // of with_draft_, in use
  for (const ScheduledRequest& s : step.scheduled) {
    if (s.num_new == 0) continue;
    const Request& request = *s.request;
    const int64_t end = request.num_computed_tokens + s.num_new;
    const int64_t known = request.num_tokens() + request.num_draft_tokens();
    INFER_CHECK(s.num_new > 0 && end <= known, "runner: request {} schedules {} tokens past its {}",
                request.request_id, end, known);
    std::span<const int32_t> tokens = request.token_ids;
    if (request.num_draft_tokens() > 0) {
      // The model reads one sequence: the known tokens, then the draft to check.
      if (with_draft_.size() == drafted) with_draft_.emplace_back();
      std::vector<int32_t>& joined = with_draft_[drafted++];
      joined.assign(request.token_ids.begin(), request.token_ids.end());
      joined.insert(joined.end(), request.draft_token_ids.begin(), request.draft_token_ids.end());
      tokens = joined;
    }
    steps_.push_back({request.seq_id, tokens.first(static_cast<size_t>(end)), s.num_new,
                      request.block_table.blocks, s.wants_logits, 1 + request.num_draft_tokens(),
                      request.lora.get(), std::max<int64_t>(0, request.block_table.state_slot)});
  }
  if (steps_.empty()) return {};
  fault::MaybeThrow("forward");  // tests only (INFER_FAULTS)
  for (const auto& copy : step.state_restores) model_.CopyState(copy.from_slot, copy.to_slot);
  int64_t total = 0;
  for (const SequenceStep& s : steps_) total += s.num_new;
  if (total <= max_forward_tokens_) {
    model_.Forward(steps_, logits_);
  } else {
    ForwardInCalls();
  }
  for (const StateCapture& capture : step.state_captures) {
    model_.CopyState(capture.from_slot, capture.slot);
  }
  return logits_;
}

void ModelRunner::ForwardInCalls() {
  logits_.clear();
  int64_t room = max_forward_tokens_;
  const auto flush = [&] {
    if (call_.empty()) return;
    model_.Forward(call_, call_logits_);
    logits_.insert(logits_.end(), call_logits_.begin(), call_logits_.end());
    call_.clear();
    room = max_forward_tokens_;
  };
  for (const SequenceStep& step : steps_) {
    // The rows a sequence wants come from its last num_logits tokens: they go in one call.
    const int64_t tail = step.wants_logits ? step.num_logits : 0;
    INFER_CHECK(tail <= max_forward_tokens_, "runner: {} logits rows exceed a call of {} tokens",
                tail, max_forward_tokens_);
    int64_t done = 0;  // of step.num_new, in earlier calls
    while (done < step.num_new) {
      const int64_t left = step.num_new - done;
      // All that is left if it fits, else what fits with the tail kept whole (a fresh call
      // always takes some: left > max_forward_tokens_ >= tail).
      const int64_t take = left <= room ? left : std::min(room, left - tail);
      if (take > 0) {
        SequenceStep piece = step;
        piece.tokens = step.tokens.first(step.tokens.size() - static_cast<size_t>(left - take));
        piece.num_new = take;
        piece.wants_logits = step.wants_logits && take == left;
        call_.push_back(piece);
        done += take;
        room -= take;
      }
      if (room == 0 || done < step.num_new) flush();
    }
  }
  flush();
}

}  // namespace infer
