// What the engine gives back: the StepOutput a request's client receives each step (on its
// OutputChannel), and the GenerationOutput of a request that ended (what Generate returns), with
// the finish reasons and timings they share.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infer/engine/sampler.h"

namespace infer {

enum class FinishReason { kEos, kStop, kLength };
// "eos", "stop", "length".
std::string_view FinishReasonName(FinishReason reason);

struct GenerationTiming {
  // From the request's first step to its first token (time to first token: the prompt's
  // forward passes and the first sampling).
  double prefill_time_s = 0.0;
  // Each later token's step (forward and sampling); generated_tokens - 1 entries.
  std::vector<double> decode_times_s;

  double decode_time_s() const;
  double total_time_s() const { return prefill_time_s + decode_time_s(); }
};

// What one engine step produced for one request.
struct StepOutput {
  std::string request_id;
  std::optional<int32_t> token_id;  // the sampled id; none for error-only outputs
  std::string text_delta;           // text that became final with this step (may be empty)
  bool finished = false;
  std::optional<FinishReason> finish_reason;  // set when finished without error
  std::optional<std::string> error;           // set when the request failed
  // When finished: the stop string the text was cut before, if one was.
  std::optional<std::string> stop_string;
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;  // prompt tokens whose KV came from the prefix cache
  double time_s = 0.0;        // engine clock when the step ended
  // The sampled token's logprobs, when the request asked for them.
  std::optional<TokenLogprobs> logprobs;
};

// A finished request: what every driver returns in the end
// (Engine::Generate, Generate/GenerateBatch of generate.h, the server's final chunk).
struct GenerationOutput {
  std::string request_id;
  std::string prompt;  // the prompt text (decoded from the ids for token prompts)
  std::vector<int32_t> prompt_token_ids;
  std::string text;  // generated text, cut before a stop string
  std::vector<int32_t> token_ids;
  std::optional<FinishReason> finish_reason;  // none when failed
  std::optional<std::string> error;
  std::optional<std::string> stop_string;  // the stop string the text was cut before, if any
  int64_t total_tokens = 0;                // prompt + generated
  int64_t cached_tokens = 0;               // prompt tokens served by the prefix cache
  int64_t num_preemptions = 0;
  GenerationTiming timing;

  int64_t prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t generated_tokens() const { return static_cast<int64_t>(token_ids.size()); }
};

}  // namespace infer
