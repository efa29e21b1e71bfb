// One completion request as the engine tracks it (prompt, sampling, state, generated ids,
// per-request RNG and output text) and the StepOutput the engine sends its client each step.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infer/engine/generate.h"
#include "infer/engine/output_text.h"
#include "infer/engine/sampler.h"
#include "infer/engine/sampling_params.h"

namespace infer {

// kWaiting -> kPrefill -> kDecode -> kFinished; any state -> kFailed (error or cancel).
enum class RequestState { kWaiting, kPrefill, kDecode, kFinished, kFailed };
std::string_view RequestStateName(RequestState state);

// What one engine step produced for one request.
struct StepOutput {
  std::string request_id;
  std::optional<int32_t> token_id;  // the sampled id; none for error-only outputs
  std::string text_delta;           // text that became final with this step (may be empty)
  bool finished = false;
  std::optional<FinishReason> finish_reason;  // set when finished without error
  std::optional<std::string> error;           // set when the request failed
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
};

class OutputChannel;

struct Request {
  // `tokenizer` (may be null) decodes the output text; it must outlive the request.
  Request(std::string id, std::vector<int32_t> prompt, SamplingParams params, double arrival_time_s,
          const Tokenizer* tokenizer = nullptr)
      : request_id(std::move(id)),
        prompt_token_ids(std::move(prompt)),
        sampling_params(std::move(params)),
        arrival_time_s(arrival_time_s),
        sampler(sampling_params),
        text(tokenizer, sampling_params.stop) {}

  bool done() const { return state == RequestState::kFinished || state == RequestState::kFailed; }
  int64_t num_prompt_tokens() const { return static_cast<int64_t>(prompt_token_ids.size()); }
  int64_t num_generated_tokens() const { return static_cast<int64_t>(generated_token_ids.size()); }

  std::string request_id;
  std::vector<int32_t> prompt_token_ids;
  SamplingParams sampling_params;
  double arrival_time_s;

  RequestState state = RequestState::kWaiting;
  std::vector<int32_t> generated_token_ids;
  std::optional<FinishReason> finish_reason;
  std::optional<std::string> error;

  Sampler sampler;                        // seeded from sampling_params.seed: the request's own RNG
  OutputText text;                        // detokenized output, stop strings, streaming hold-back
  std::shared_ptr<OutputChannel> output;  // where the engine delivers StepOutputs (may be null)
};

}  // namespace infer
