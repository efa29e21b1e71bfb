#include "infer/engine/runner.h"

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
                      request.block_table.blocks, s.wants_logits, 1 + request.num_draft_tokens()});
  }
  if (steps_.empty()) return {};
  fault::MaybeThrow("forward");  // tests only (INFER_FAULTS)
  model_.Forward(steps_, logits_);
  return logits_;
}

}  // namespace infer
