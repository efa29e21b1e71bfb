// One request as the engine tracks it: prompt, sampling, priority, state, generated ids, its KV
// blocks and how many of its tokens are computed, per-request RNG and output text.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infer/cache/block_manager.h"
#include "infer/engine/constraint.h"
#include "infer/engine/logits_processor.h"
#include "infer/engine/output.h"
#include "infer/engine/output_text.h"
#include "infer/engine/sampler.h"
#include "infer/engine/sampling_params.h"
#include "infer/engine/thinking_budget.h"
#include "infer/loader/lora.h"

namespace infer {

// kWaiting -> kPrefill -> kDecode -> kFinished; any state -> kFailed (error or cancel); a
// preempted request goes back to kWaiting and is recomputed.
enum class RequestState { kWaiting, kPrefill, kDecode, kFinished, kFailed };
std::string_view RequestStateName(RequestState state);

class OutputChannel;

struct Request {
  // `tokenizer` (may be null) decodes the output text; it must outlive the request.
  Request(std::string id, std::vector<int32_t> prompt, SamplingParams params, double arrival_time_s,
          const Tokenizer* tokenizer = nullptr, int64_t priority = 0)
      : request_id(std::move(id)),
        prompt_token_ids(std::move(prompt)),
        sampling_params(std::move(params)),
        arrival_time_s(arrival_time_s),
        priority(priority),
        token_ids(prompt_token_ids),
        sampler(sampling_params),
        text(tokenizer, sampling_params.stop) {}

  bool done() const { return state == RequestState::kFinished || state == RequestState::kFailed; }
  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_generated_tokens() const { return static_cast<int64_t>(generated_token_ids.size()); }
  int64_t num_tokens() const { return static_cast<int64_t>(token_ids.size()); }
  int64_t num_draft_tokens() const { return static_cast<int64_t>(draft_token_ids.size()); }
  // Tokens whose KV is still to compute: the prompt (rest) at prefill, the last sampled at decode,
  // and a speculative draft after them.
  int64_t num_uncomputed() const { return num_tokens() + num_draft_tokens() - num_computed_tokens; }
  // Drops the last `count` tokens of the speculative draft (all of it by default).
  void DropDraft(int64_t count = -1) {
    if (count < 0 || count > num_draft_tokens()) count = num_draft_tokens();
    draft_token_ids.resize(draft_token_ids.size() - static_cast<size_t>(count));
  }
  // Prompt + max_tokens: the most positions it can ever need.
  int64_t max_total_tokens() const { return num_prompt_tokens() + sampling_params.max_new_tokens; }

  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  double arrival_time_s;
  int64_t priority;    // lower runs first (priority policy)
  int64_t seq_id = 0;  // the engine's number for it (stable across preemption)

  RequestState state = RequestState::kWaiting;
  std::vector<int32_t> token_ids;  // prompt + generated
  std::vector<int32_t> generated_token_ids;
  std::optional<FinishReason> finish_reason;
  std::optional<std::string> error;

  // KV: the blocks it holds and how many leading tokens of token_ids have their KV there.
  BlockTable block_table;
  int64_t num_computed_tokens = 0;
  int64_t num_cached_prompt_tokens = 0;  // of the first admission's prompt, from the cache
  int64_t num_preemptions = 0;
  // Speculative decoding: tokens proposed to follow token_ids, not generated (never output, never
  // registered in the prefix cache); the step that computes them keeps the ones the model's own
  // draws confirm (Scheduler::Update).
  std::vector<int32_t> draft_token_ids;

  std::string prompt_text;            // the prompt as given, when it was text
  double first_scheduled_s = -1.0;    // engine clock of its first step
  std::vector<double> token_times_s;  // engine clock when each generated token came

  Sampler sampler;  // seeded from sampling_params.seed: the request's own RNG
  // What each draw applies before the sampler, in order (MakeLogitsProcessors; the engine makes
  // them with the request, over its constraint, thinking budget and text below).
  LogitsProcessors logits_processors;
  OutputText text;  // detokenized output, stop strings, streaming hold-back
  // Structured output: which tokens may come next (null: any). Its state follows the generated
  // tokens, which a preempted request keeps, so recompute needs no rollback.
  std::unique_ptr<TokenConstraint> constraint;
  // sampling_params.thinking_token_budget on a model with reasoning tags: what it has spent and
  // the forced end once it is spent. Follows the generated tokens, as the constraint does.
  std::optional<ThinkingBudget> thinking;
  std::shared_ptr<OutputChannel> output;  // where the engine delivers StepOutputs (may be null)
  // The LoRA adapter its forward passes add (null: the base model). Held here, so an adapter
  // unloaded meanwhile stays alive until its last request ends; block_table.salt is its id.
  std::shared_ptr<const LoraAdapter> lora;
};

// A StepOutput of `request` carrying its id and token counts so far (no token, not finished).
StepOutput OutputOf(const Request& request);
// The final output of `request`, failed with `message`.
StepOutput ErrorOutputOf(const Request& request, const std::string& message);

}  // namespace infer
