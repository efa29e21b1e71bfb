#include "infer/engine/runner.h"

#include "infer/core/error.h"
#include "infer/core/fault_injection.h"

namespace infer {

std::span<float> ModelRunner::Run(const SchedulerOutput& step) {
  steps_.clear();
  for (const ScheduledRequest& s : step.scheduled) {
    if (s.num_new == 0) continue;
    const Request& request = *s.request;
    const int64_t end = request.num_computed_tokens + s.num_new;
    INFER_CHECK(s.num_new > 0 && end <= request.num_tokens(),
                "runner: request {} schedules {} tokens past its {}", request.request_id, end,
                request.num_tokens());
    steps_.push_back({request.seq_id,
                      std::span<const int32_t>(request.token_ids).first(static_cast<size_t>(end)),
                      s.num_new, request.block_table.blocks, s.wants_logits,
                      1 + request.num_draft_tokens});
  }
  if (steps_.empty()) return {};
  fault::MaybeThrow("forward");  // tests only (INFER_FAULTS)
  model_.Forward(steps_, logits_);
  return logits_;
}

}  // namespace infer
