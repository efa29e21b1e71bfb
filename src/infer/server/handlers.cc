#include "infer/server/handlers.h"

#include <chrono>
#include <ctime>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/server/completion_request.h"
#include "infer/server/stream.h"

namespace infer::server {

namespace {
constexpr int kServiceUnavailable = 503;
}  // namespace

void SendError(httplib::Response& res, int status, const std::string& message,
               const std::string& param) {
  res.status = status;
  res.set_content(OpenAiErrorJson(status, message, param)
                      .dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

void ApiHandlers::SendRefused(httplib::Response& res) {
  SendError(res, kServiceUnavailable,
            shutting_down_ ? "server shutting down"
                           : fmt::format("server overloaded: {} requests already waiting",
                                         engine_.config().max_waiting_requests));
}

void ApiHandlers::SeedCompletions(const httplib::Request& req, httplib::Response& res) {
  CompletionRequest request;
  std::vector<int32_t> prompt_ids;
  try {
    request = ParseCompletionRequest(req.body, engine_.config().model);
    try {
      prompt_ids = engine_.PreparePrompt(request.prompt, request.params);
    } catch (const Error& e) {
      throw RequestError(kUnprocessable, e.what());
    }
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what());
  }
  const std::string request_id = fmt::format("cmpl-{}", next_id_++);
  const auto num_prompt_tokens = prompt_ids.size();
  auto channel =
      engine_.AddRequest(request_id, std::move(prompt_ids), request.params, request.priority);
  if (!channel) return SendRefused(res);
  spdlog::debug("{}: queued, {} prompt tokens, max_tokens {}", request_id, num_prompt_tokens,
                request.params.max_new_tokens);
  res.set_header("X-Request-Id", request_id);
  StreamResponse(res, std::move(channel), std::make_unique<SeedEventEncoder>(), request_id,
                 {request_id}, {&engine_, &open_streams_, options_.heartbeat_s});
}

std::vector<int32_t> ApiHandlers::EncodeChat(const OpenAiRequest& request) {
  if (options_.chat_template == nullptr || engine_.tokenizer() == nullptr) {
    throw RequestError(kBadRequest,
                       "this model has no chat template (tokenizer_config.json chat_template or "
                       "chat_template.jinja): use /v1/completions");
  }
  nlohmann::ordered_json variables = request.chat_template_kwargs;
  variables["add_generation_prompt"] = request.add_generation_prompt;
  std::string prompt;
  try {
    std::lock_guard lock(template_mutex_);
    prompt = options_.chat_template->Render(request.messages, variables);
  } catch (const Error& e) {
    throw RequestError(kBadRequest, fmt::format("the chat template failed: {}", e.what()),
                       "messages");
  }
  // The template writes BOS itself.
  return engine_.tokenizer()->Encode(prompt, /*add_special_tokens=*/false);
}

namespace {

// A completions request's prompts as ids (text encoded with the special tokens) and text (for
// echo).
std::vector<OpenAiResponse::PromptInfo> EncodePrompts(const OpenAiRequest& request,
                                                      const Tokenizer* tokenizer) {
  std::vector<OpenAiResponse::PromptInfo> prompts;
  for (const auto& prompt : request.prompts) {
    OpenAiResponse::PromptInfo info;
    if (const auto* text = std::get_if<std::string>(&prompt)) {
      if (tokenizer == nullptr) {
        throw RequestError(kBadRequest, "text prompts need a tokenizer (the model folder has none)",
                           "prompt");
      }
      info.ids = tokenizer->Encode(*text, /*add_special_tokens=*/true);
      info.text = *text;
    } else {
      info.ids = std::get<std::vector<int32_t>>(prompt);
      if (tokenizer != nullptr) info.text = tokenizer->Decode(info.ids, false);
    }
    prompts.push_back(std::move(info));
  }
  return prompts;
}

}  // namespace

ApiHandlers::OpenAiPrompts ApiHandlers::PrepareOpenAi(const OpenAiRequest& request) {
  const bool chat = request.endpoint == OpenAiEndpoint::kChatCompletions;
  OpenAiPrompts prepared;
  if (chat) {
    prepared.prompts.push_back({EncodeChat(request), {}});
  } else {
    prepared.prompts = EncodePrompts(request, engine_.tokenizer());
  }
  for (const auto& prompt : prepared.prompts) {
    SamplingParams p = request.params;
    const int64_t room = engine_.max_model_len() - std::ssize(prompt.ids);
    if (!request.max_tokens && room < 1) {
      throw RequestError(kBadRequest,
                         fmt::format("the prompt ({} tokens) leaves no room to generate within "
                                     "max_model_len ({})",
                                     prompt.ids.size(), engine_.max_model_len()),
                         chat ? "messages" : "prompt");
    }
    p.max_new_tokens = request.max_tokens.value_or(room);
    try {
      engine_.PreparePrompt(prompt.ids, p);
    } catch (const Error& e) {
      throw RequestError(kBadRequest, e.what());
    }
    prepared.params.push_back(std::move(p));
  }
  return prepared;
}

void ApiHandlers::CancelChoices(const OpenAiResponse& response) {
  for (int64_t i = 0; i < response.num_choices(); ++i) {
    engine_.Cancel(OpenAiResponse::ChoiceRequestId(response.id(), i));
  }
}

bool ApiHandlers::QueueChoices(const OpenAiRequest& request, const OpenAiPrompts& prepared,
                               const OpenAiResponse& response,
                               const std::shared_ptr<OutputChannel>& channel) {
  for (int64_t choice = 0; choice < response.num_choices(); ++choice) {
    const auto prompt = static_cast<size_t>(choice / request.n);
    SamplingParams p = prepared.params[prompt];
    // Each choice its own stream of random numbers; with a seed, choice i uses seed + i (vLLM).
    if (p.seed && choice > 0) p.seed = *p.seed + static_cast<uint64_t>(choice);
    if (!engine_.AddRequest(OpenAiResponse::ChoiceRequestId(response.id(), choice),
                            prepared.prompts[prompt].ids, p, request.priority, channel)) {
      CancelChoices(response);
      return false;
    }
  }
  return true;
}

void ApiHandlers::OpenAi(const httplib::Request& req, httplib::Response& res,
                         OpenAiEndpoint endpoint) {
  const bool chat = endpoint == OpenAiEndpoint::kChatCompletions;
  OpenAiRequest request;
  OpenAiPrompts prepared;
  try {
    const std::string& model = engine_.config().model;
    request = chat ? ParseChatCompletionRequest(req.body, model, options_.default_sampling)
                   : ParseOpenAiCompletionRequest(req.body, model, options_.default_sampling);
    if (!request.ignored_fields.empty()) {
      spdlog::debug("{} {}: ignoring unknown fields {}", req.method, req.path,
                    fmt::join(request.ignored_fields, ", "));
    }
    prepared = PrepareOpenAi(request);
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  }
  const std::string id = fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++);
  auto channel = std::make_shared<OutputChannel>();
  auto response = std::make_shared<OpenAiResponse>(
      request, id, engine_.config().model, static_cast<int64_t>(std::time(nullptr)),
      prepared.prompts, engine_.tokenizer(), options_.reasoning_parser == ReasoningParser::kQwen3);
  if (!QueueChoices(request, prepared, *response, channel)) return SendRefused(res);
  spdlog::debug("{}: queued {} choice(s), {} prompt tokens", id, response->num_choices(),
                prepared.prompts.front().ids.size());
  res.set_header("X-Request-Id", id);
  if (request.stream) {
    std::vector<std::string> request_ids;
    for (int64_t i = 0; i < response->num_choices(); ++i) {
      request_ids.push_back(OpenAiResponse::ChoiceRequestId(id, i));
    }
    return StreamResponse(res, std::move(channel), std::make_unique<OpenAiChunkEncoder>(response),
                          id, std::move(request_ids),
                          {&engine_, &open_streams_, options_.heartbeat_s});
  }
  // Wait for every choice (a client that leaves is noticed only when the answer is written).
  while (!response->finished()) {
    if (auto output = channel->Pop(std::chrono::milliseconds(100))) response->Add(*output);
  }
  if (const auto& error = response->error()) {
    return SendError(res, shutting_down_ ? kServiceUnavailable : 500, *error);
  }
  res.set_content(
      response->Final().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
      "application/json");
}

}  // namespace infer::server
