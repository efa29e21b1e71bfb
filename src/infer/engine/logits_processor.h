// The logits processors of a request's draw, run in order on its row of logits before the
// sampler (sampler.h) draws from it, as vLLM's V1 engine applies them:
//   kMask:   the grammar's mask (structured output, EOS removed before min_tokens), then the
//            thinking budget's forced token: which tokens the draw may take. The request's
//            logprobs are of the row so masked.
//   kAdjust: EOS before min_tokens, logit bias, the repetition penalty, the presence and
//            frequency penalties: the row's values, after the logprobs are taken.
// A request's list holds only the processors that change something for it. Pure: no model.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <vector>

#include "infer/engine/constraint.h"
#include "infer/engine/output_text.h"
#include "infer/engine/sampler.h"
#include "infer/engine/sampling_params.h"
#include "infer/engine/thinking_budget.h"

namespace infer {

// What a processor reads of its request at one draw.
struct DrawContext {
  std::span<const int32_t> token_ids;  // the prompt, then the tokens generated so far
  int64_t num_prompt_tokens = 0;
  int64_t num_generated() const {
    return static_cast<int64_t>(token_ids.size()) - num_prompt_tokens;
  }
};

class LogitsProcessor {
 public:
  enum class Stage { kMask, kAdjust };
  virtual ~LogitsProcessor() = default;
  virtual Stage stage() const = 0;
  // Rewrites the row for this draw: a token ruled out becomes -inf. Throws GrammarError when the
  // row is left with no token (that request fails; the others of the step go on).
  virtual void Apply(const DrawContext& context, std::span<float> logits) = 0;
};

using LogitsProcessors = std::vector<std::unique_ptr<LogitsProcessor>>;

// A request's processors, in the order above. `eos_ids` (the ones min_tokens holds back),
// `constraint`, `thinking` and `text` (the output so far, for the thinking budget's wait at a
// split character) may be empty or null; those given must outlive the processors.
LogitsProcessors MakeLogitsProcessors(const SamplingParams& params,
                                      std::span<const int32_t> eos_ids, TokenConstraint* constraint,
                                      const ThinkingBudget* thinking, const OutputText* text);

// One draw: the processors in order, the logprobs (`top_logprobs` of them, into `logprobs` when
// both are given) of the row after the kMask ones, then the sampler's draw. `raw` is scratch.
int32_t DrawToken(std::span<float> logits, const DrawContext& context,
                  const LogitsProcessors& processors, Sampler& sampler,
                  std::optional<int64_t> top_logprobs, TokenLogprobs* logprobs,
                  std::vector<float>& raw);

}  // namespace infer
