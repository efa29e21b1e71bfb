#include "infer/server/handlers.h"

#include <chrono>
#include <ctime>

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "infer/core/error.h"
#include "infer/server/anthropic.h"
#include "infer/server/completion_request.h"
#include "infer/server/stream.h"

namespace infer::server {

namespace {
constexpr int kServiceUnavailable = 503;
}  // namespace

ErrorShape ErrorShapeOf(std::string_view path) {
  return path == "/v1/messages" || path.starts_with("/v1/messages/") ? ErrorShape::kAnthropic
                                                                     : ErrorShape::kOpenAi;
}

void SendError(httplib::Response& res, int status, const std::string& message,
               const std::string& param, ErrorShape shape) {
  res.status = status;
  const auto body = shape == ErrorShape::kAnthropic ? AnthropicErrorJson(status, message)
                                                    : OpenAiErrorJson(status, message, param);
  res.set_content(body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

void ApiHandlers::SendRefused(httplib::Response& res, ErrorShape shape) {
  SendError(res, kServiceUnavailable,
            shutting_down_ ? "server shutting down"
                           : fmt::format("server overloaded: {} requests already waiting",
                                         engine_.config().max_waiting_requests),
            {}, shape);
}

void ApiHandlers::SeedCompletions(const httplib::Request& req, httplib::Response& res) {
  ChatRequest request;
  PreparedPrompts prepared;
  try {
    request = ParseCompletionRequest(req.body, Models());
    prepared = Prepare(request, kUnprocessable);
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what());  // the seed's errors name no param
  }
  const auto queued = Queue(request, prepared, fmt::format("cmpl-{}", next_id_++));
  if (!queued) return SendRefused(res);
  // Its events are per token (token id and text), so they are made from the StepOutputs.
  Answer(res, *queued, std::make_unique<SeedEventEncoder>(), /*stream=*/true, ErrorShape::kOpenAi,
         {});
}

namespace {

// The prompts of an OpenAI request, for the engine's front door. With tools, the chat carries
// them as the template's `tools` variable, or in the generic scheme's system message.
std::vector<Prompt> Prompts(const ChatRequest& request) {
  if (request.endpoint == ChatEndpoint::kChatCompletions) {
    ChatPrompt chat{
        TemplateMessages(request.tools ? MessagesForTemplate(request.messages, *request.tools,
                                                             request.tool_format)
                                       : request.messages),
        request.chat_template_kwargs, request.add_generation_prompt};
    if (request.tools) {
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

// Fields the request's parser did not know, at debug level.
void LogIgnored(const httplib::Request& req, const ChatRequest& request) {
  if (!request.ignored_fields.empty()) {
    spdlog::debug("{} {}: ignoring unknown fields {}", req.method, req.path,
                  fmt::join(request.ignored_fields, ", "));
  }
}

}  // namespace

ModelNames ApiHandlers::Models() const {
  if (!options_.lora_adapters) return ModelNames(engine_.config().model);
  return ModelNames(engine_.config().model,
                    [adapters = options_.lora_adapters](std::string_view name) {
                      return adapters->Find(name) != nullptr;
                    });
}

ToolCallFormat ApiHandlers::ToolFormat() const {
  const ChatTemplate* chat_template = engine_.chat_template();
  return DetectToolCallFormat(chat_template ? chat_template->source() : "");
}

ApiHandlers::PreparedPrompts ApiHandlers::Prepare(ChatRequest& request, int rejected_status) {
  const bool chat = request.endpoint == ChatEndpoint::kChatCompletions;
  if (request.tools) {
    request.tool_format = ToolFormat();
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
  PreparedPrompts prepared;
  if (request.model != engine_.config().model && options_.lora_adapters) {
    prepared.lora = options_.lora_adapters->Find(request.model);
    if (!prepared.lora) {
      throw RequestError(kNotFound, fmt::format("The model `{}` does not exist.", request.model),
                         "model");
    }
  }
  for (const Prompt& prompt : Prompts(request)) {
    SamplingParams params = request.params;
    if (request.max_tokens) params.max_new_tokens = *request.max_tokens;
    ChatReply::PromptInfo info;
    try {
      // max_tokens unset: the rest of the context, as vLLM.
      info.ids = engine_.PreparePrompt(prompt, params, /*fill_context=*/!request.max_tokens);
    } catch (const RequestRejected& e) {
      throw RequestError(rejected_status, e.what(),
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

void ApiHandlers::CancelChoices(const ChatReply& reply) {
  for (int64_t i = 0; i < reply.num_choices(); ++i) {
    engine_.Cancel(ChatReply::ChoiceRequestId(reply.id(), i));
  }
}

std::optional<ApiHandlers::Queued> ApiHandlers::Queue(const ChatRequest& request,
                                                      const PreparedPrompts& prepared,
                                                      std::string id) {
  Queued queued{std::move(id), std::make_shared<OutputChannel>(), nullptr};
  queued.reply = std::make_shared<ChatReply>(request, queued.id, prepared.prompts,
                                             options_.reasoning_parser == ReasoningParser::kQwen3);
  const ChatReply& reply = *queued.reply;
  for (int64_t choice = 0; choice < reply.num_choices(); ++choice) {
    const auto prompt = static_cast<size_t>(choice / request.n);
    SamplingParams p = prepared.params[prompt];
    // Each choice its own stream of random numbers; with a seed, choice i uses seed + i (vLLM).
    if (p.seed && choice > 0) p.seed = *p.seed + static_cast<uint64_t>(choice);
    if (!engine_.AddRequest(ChatReply::ChoiceRequestId(reply.id(), choice),
                            prepared.prompts[prompt].ids, p, request.priority, queued.channel,
                            prepared.lora)) {
      CancelChoices(reply);
      return std::nullopt;
    }
  }
  spdlog::debug("{}: queued {} choice(s), {} prompt tokens", reply.id(), reply.num_choices(),
                prepared.prompts.front().ids.size());
  return queued;
}

void ApiHandlers::Answer(httplib::Response& res, const Queued& queued,
                         std::unique_ptr<StreamEncoder> encoder, bool stream, ErrorShape shape,
                         const std::function<nlohmann::ordered_json()>& final) {
  res.set_header("X-Request-Id", queued.id);
  if (stream) {
    std::vector<std::string> request_ids;
    for (int64_t i = 0; i < queued.reply->num_choices(); ++i) {
      request_ids.push_back(ChatReply::ChoiceRequestId(queued.id, i));
    }
    return StreamResponse(res, queued.channel, std::move(encoder), queued.id,
                          std::move(request_ids), {&engine_, &open_streams_, options_.heartbeat_s});
  }
  // Wait for every choice (a client that leaves is noticed only when the answer is written).
  while (!encoder->finished()) {
    if (auto output = queued.channel->Pop(std::chrono::milliseconds(100))) encoder->Add(*output);
  }
  if (const auto& error = queued.reply->error()) {
    return SendError(res, shutting_down_ ? kServiceUnavailable : 500, *error, {}, shape);
  }
  res.set_content(final().dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

void ApiHandlers::OpenAi(const httplib::Request& req, httplib::Response& res,
                         ChatEndpoint endpoint) {
  const bool chat = endpoint == ChatEndpoint::kChatCompletions;
  ChatRequest request;
  PreparedPrompts prepared;
  try {
    const ModelNames models = Models();
    request = chat ? ParseChatCompletionRequest(req.body, models, options_.default_sampling)
                   : ParseOpenAiCompletionRequest(req.body, models, options_.default_sampling);
    LogIgnored(req, request);
    prepared = Prepare(request);
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  }
  auto queued =
      Queue(request, prepared, fmt::format("{}-{}", chat ? "chatcmpl" : "cmpl", next_id_++));
  if (!queued) return SendRefused(res);
  auto response = std::make_shared<OpenAiResponse>(request, queued->reply, request.model,
                                                   static_cast<int64_t>(std::time(nullptr)),
                                                   engine_.tokenizer());
  Answer(res, *queued, std::make_unique<OpenAiChunkEncoder>(response), request.stream,
         ErrorShape::kOpenAi, [response] { return response->Final(); });
}

void ApiHandlers::Anthropic(const httplib::Request& req, httplib::Response& res,
                            bool count_tokens) {
  ChatRequest request;
  PreparedPrompts prepared;
  try {
    request = ParseAnthropicRequest(req.body, count_tokens, Models(), options_.default_sampling);
    LogIgnored(req, request);
    prepared = Prepare(request);
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), {}, ErrorShape::kAnthropic);
  }
  const auto input_tokens = std::ssize(prepared.prompts.front().ids);
  if (count_tokens) {
    res.set_content(nlohmann::ordered_json{{"input_tokens", input_tokens}}.dump(),
                    "application/json");
    return;
  }
  auto queued = Queue(request, prepared, fmt::format("msg_{:024x}", next_id_++));
  if (!queued) return SendRefused(res, ErrorShape::kAnthropic);
  auto message =
      std::make_unique<AnthropicMessage>(queued->reply, queued->id, request.model, input_tokens);
  const AnthropicMessage* reply = message.get();
  Answer(res, *queued, std::move(message), request.stream, ErrorShape::kAnthropic,
         [reply] { return reply->Final(); });
}

void ApiHandlers::Responses(const httplib::Request& req, httplib::Response& res) {
  ResponsesRequest responses;
  ChatRequest request;
  PreparedPrompts prepared;
  try {
    responses = ParseResponsesRequest(req.body, responses_, Models(), options_.default_sampling);
    LogIgnored(req, responses.chat);
    request = responses.chat;
    prepared = Prepare(request);
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  }
  // The sampling the response ran with (the model's defaults where the request gave none).
  responses.echo["temperature"] = request.params.temperature;
  responses.echo["top_p"] = request.params.top_p;
  const bool stream = responses.stream;
  auto queued = Queue(request, prepared, NewResponseId());
  if (!queued) return SendRefused(res);
  auto reply = std::make_unique<ResponsesReply>(
      queued->reply, queued->id, request.model, static_cast<int64_t>(std::time(nullptr)),
      std::ssize(prepared.prompts.front().ids), std::move(responses), &responses_);
  const ResponsesReply* final = reply.get();
  Answer(res, *queued, std::move(reply), stream, ErrorShape::kOpenAi,
         [final] { return final->Final(); });
}

void ApiHandlers::ResponseById(const httplib::Request& req, httplib::Response& res,
                               const std::string& id) {
  const auto stored = responses_.Get(id);
  if (stored == nullptr || (req.method == "DELETE" && !responses_.Erase(id))) {
    return SendError(res, kNotFound, fmt::format("Response with id '{}' not found.", id));
  }
  const nlohmann::ordered_json reply =
      req.method == "DELETE"
          ? nlohmann::ordered_json{{"id", id}, {"object", "response"}, {"deleted", true}}
          : stored->response;
  res.set_content(reply.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

void ApiHandlers::Tokenize(const httplib::Request& req, httplib::Response& res) {
  std::vector<int32_t> ids;
  TokenizeRequest request;
  try {
    request = ParseTokenizeRequest(req.body, Models(), options_.default_sampling);
    try {
      if (request.chat) {
        // The chat as the chat path renders it (tools too), through the engine's encoder.
        if (request.chat->tools) request.chat->tool_format = ToolFormat();
        auto prompt = std::get<ChatPrompt>(Prompts(*request.chat).front());
        prompt.add_special_tokens = request.add_special_tokens;
        ids = engine_.Tokenize(prompt);
      } else if (request.add_special_tokens) {
        ids = engine_.Tokenize(request.prompt);
      } else if (engine_.tokenizer() != nullptr) {
        ids = engine_.tokenizer()->Encode(request.prompt, /*add_special_tokens=*/false);
      } else {
        throw RequestError(kBadRequest, "this model has no tokenizer", "prompt");
      }
    } catch (const Error& e) {  // no tokenizer or template, a failed template, invalid UTF-8
      throw RequestError(kBadRequest, e.what(), request.chat ? "messages" : "prompt");
    }
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  }
  nlohmann::ordered_json reply = {
      {"count", ids.size()}, {"max_model_len", engine_.max_model_len()}, {"tokens", ids}};
  if (request.return_token_strs) {
    nlohmann::ordered_json strs = nlohmann::ordered_json::array();
    for (const int32_t id : ids) strs.push_back(engine_.tokenizer()->IdToToken(id).value_or(""));
    reply["token_strs"] = std::move(strs);
  }
  res.set_content(reply.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

void ApiHandlers::Detokenize(const httplib::Request& req, httplib::Response& res) {
  std::vector<int32_t> ids;
  try {
    ids = ParseDetokenizeRequest(req.body, Models());
    const Tokenizer* tokenizer = engine_.tokenizer();
    if (tokenizer == nullptr) throw RequestError(kBadRequest, "this model has no tokenizer");
    for (const int32_t id : ids) {
      if (id >= tokenizer->VocabSize()) {
        throw RequestError(
            kBadRequest,
            fmt::format("token id {} is outside the vocab [0, {})", id, tokenizer->VocabSize()),
            "tokens");
      }
    }
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  }
  const nlohmann::ordered_json reply = {
      {"prompt", engine_.tokenizer()->Decode(ids, /*skip_special_tokens=*/false)}};
  res.set_content(reply.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
                  "application/json");
}

}  // namespace infer::server

namespace infer::server {

void ApiHandlers::ListModels(httplib::Response& res) {
  const auto created = static_cast<int64_t>(std::time(nullptr));
  nlohmann::ordered_json data = nlohmann::ordered_json::array();
  data.push_back({{"id", engine_.config().model},
                  {"object", "model"},
                  {"created", created},
                  {"owned_by", "infer"},
                  {"root", engine_.config().model},
                  {"parent", nullptr},
                  {"max_model_len", engine_.max_model_len()}});
  if (options_.lora_adapters) {
    for (const LoraAdapters::Entry& entry : options_.lora_adapters->List()) {
      data.push_back({{"id", entry.adapter->name},
                      {"object", "model"},
                      {"created", created},
                      {"owned_by", "infer"},
                      {"root", entry.adapter->path},
                      {"parent", entry.parent},
                      {"max_model_len", engine_.max_model_len()}});
    }
  }
  res.set_content(nlohmann::ordered_json{{"object", "list"}, {"data", std::move(data)}}.dump(),
                  "application/json");
}

namespace {

// A string field of a LoRA route's JSON body; RequestError 400 when absent or not a string.
std::string LoraField(const nlohmann::ordered_json& body, const char* name) {
  const auto it = body.find(name);
  if (it == body.end() || !it->is_string() || it->get<std::string>().empty()) {
    throw RequestError(kBadRequest, fmt::format("'{}' must be a non-empty string", name), name);
  }
  return it->get<std::string>();
}

}  // namespace

void ApiHandlers::LoadLoraAdapter(const httplib::Request& req, httplib::Response& res) {
  std::string name;
  try {
    const nlohmann::ordered_json body = ParseJsonObject(req.body);
    name = LoraField(body, "lora_name");
    options_.lora_adapters->Load({name, LoraField(body, "lora_path"), ""});
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  } catch (const Error& e) {
    spdlog::warn("load_lora_adapter: {}", e.what());
    return SendError(res, kBadRequest, e.what());
  }
  spdlog::info("LoRA adapter '{}' loaded", name);
  res.set_content(fmt::format("Success: LoRA adapter '{}' added successfully.", name),
                  "text/plain");
}

void ApiHandlers::UnloadLoraAdapter(const httplib::Request& req, httplib::Response& res) {
  std::string name;
  try {
    name = LoraField(ParseJsonObject(req.body), "lora_name");
  } catch (const RequestError& e) {
    return SendError(res, e.status(), e.what(), e.param());
  }
  if (!options_.lora_adapters->Unload(name)) {
    return SendError(res, kNotFound, fmt::format("The lora adapter '{}' cannot be found.", name),
                     "lora_name");
  }
  spdlog::info("LoRA adapter '{}' unloaded", name);
  res.set_content(fmt::format("Success: LoRA adapter '{}' removed successfully.", name),
                  "text/plain");
}

}  // namespace infer::server
