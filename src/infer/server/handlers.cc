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
      prompt_ids = engine_.PreparePrompt(
          std::visit([](const auto& p) { return Prompt(p); }, request.prompt), request.params);
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

namespace {

// The prompts of an OpenAI request, for the engine's front door. With tools, the chat carries
// them as the template's `tools` variable, or in the generic scheme's system message.
std::vector<Prompt> Prompts(const OpenAiRequest& request) {
  if (request.endpoint == OpenAiEndpoint::kChatCompletions) {
    ChatPrompt chat{request.messages, request.chat_template_kwargs, request.add_generation_prompt};
    if (request.tools) {
      chat.messages = MessagesForTemplate(request.messages, *request.tools, request.tool_format);
      if (auto tools = ToolsVariable(*request.tools, request.tool_format); !tools.is_null()) {
        chat.variables["tools"] = std::move(tools);
      }
    }
    return {std::move(chat)};
  }
  std::vector<Prompt> prompts;
  for (const auto& prompt : request.prompts) {
    prompts.push_back(std::visit([](const auto& p) { return Prompt(p); }, prompt));
  }
  return prompts;
}

}  // namespace

ApiHandlers::OpenAiPrompts ApiHandlers::PrepareOpenAi(OpenAiRequest& request) {
  const bool chat = request.endpoint == OpenAiEndpoint::kChatCompletions;
  if (request.tools) {
    const ChatTemplate* chat_template = engine_.chat_template();
    request.tool_format = DetectToolCallFormat(chat_template ? chat_template->source() : "");
    // Every call is constrained, so it always parses (ToolCallConstraint). With auto, a
    // response format given beside the tools wins (the reply is the format's).
    const bool forced = request.tools->choice.mode == ToolChoice::Mode::kRequired ||
                        request.tools->choice.mode == ToolChoice::Mode::kNamed;
    auto constraint = ToolCallConstraint(*request.tools, request.tool_format);
    if (constraint && (forced || !request.params.structured_output)) {
      if (request.params.structured_output) {
        throw RequestError(kBadRequest,
                           "a required tool call and a response format both constrain the "
                           "output: give one",
                           "tool_choice");
      }
      request.params.structured_output = std::move(constraint);
    }
  }
  OpenAiPrompts prepared;
  for (const Prompt& prompt : Prompts(request)) {
    SamplingParams params = request.params;
    if (request.max_tokens) params.max_new_tokens = *request.max_tokens;
    OpenAiResponse::PromptInfo info;
    try {
      // max_tokens unset: the rest of the context, as vLLM.
      info.ids = engine_.PreparePrompt(prompt, params, /*fill_context=*/!request.max_tokens);
    } catch (const RequestRejected& e) {
      throw RequestError(kBadRequest, e.what(),
                         e.about_prompt() ? (chat ? "messages" : "prompt") : "");
    }
    // The prompt's text, for echo.
    if (const auto* text = std::get_if<std::string>(&prompt)) {
      info.text = *text;
    } else if (!chat && engine_.tokenizer() != nullptr) {
      info.text = engine_.tokenizer()->Decode(info.ids, false);
    }
    prepared.prompts.push_back(std::move(info));
    prepared.params.push_back(std::move(params));
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
