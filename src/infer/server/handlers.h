// The routes that run generations: POST /v1/completions in the seed format, OpenAI's
// POST /v1/chat/completions and /v1/completions, Anthropic's POST /v1/messages and OpenAI's
// POST /v1/responses; and vLLM's /tokenize and /detokenize. Each parses its body once into a
// ChatRequest (its protocol's parser), serves it through the one path (Prepare: the engine's
// front door; Queue: the engine), and answers through its protocol's encoder, with one JSON
// object or a stream (stream.h). The transport around them (threads, limits, routes) is
// http_server.cc's.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "infer/engine/engine.h"
#include "infer/server/http_server.h"
#include "infer/server/openai_response.h"
#include "infer/server/responses.h"
#include "infer/server/stream.h"

namespace infer::server {

// The error shape of a route: Anthropic's on its Messages routes, OpenAI's everywhere else.
enum class ErrorShape { kOpenAi, kAnthropic };
ErrorShape ErrorShapeOf(std::string_view path);

// The error with `status`: {"error": {"message", "type", "param", "code"}} as OpenAI answers, or
// {"type": "error", "error": {"type", "message"}} as Anthropic does.
void SendError(httplib::Response& res, int status, const std::string& message,
               const std::string& param = {}, ErrorShape shape = ErrorShape::kOpenAi);

class ApiHandlers {
 public:
  // `engine`, `options` and the counters must outlive the handlers.
  ApiHandlers(Engine& engine, const ServerOptions& options, std::atomic<int>& open_streams,
              const std::atomic<bool>& shutting_down)
      : engine_(engine),
        options_(options),
        open_streams_(open_streams),
        shutting_down_(shutting_down),
        responses_(options.responses_store_entries, options.responses_store_bytes) {}

  void SeedCompletions(const httplib::Request& req, httplib::Response& res);
  void OpenAi(const httplib::Request& req, httplib::Response& res, ChatEndpoint endpoint);
  // Anthropic's POST /v1/messages (anthropic.h), or /v1/messages/count_tokens.
  void Anthropic(const httplib::Request& req, httplib::Response& res, bool count_tokens);
  // OpenAI's POST /v1/responses (responses.h), and GET / DELETE /v1/responses/{id} of a stored
  // response.
  void Responses(const httplib::Request& req, httplib::Response& res);
  void ResponseById(const httplib::Request& req, httplib::Response& res, const std::string& id);
  // GET /v1/models: the served model and each LoRA adapter (its `parent` the model it adapts).
  void ListModels(httplib::Response& res);
  // vLLM's POST /v1/load_lora_adapter {lora_name, lora_path} and /v1/unload_lora_adapter
  // {lora_name}: 400 for a bad body or an adapter that cannot be loaded (the others keep
  // serving), 404 for an unknown name.
  void LoadLoraAdapter(const httplib::Request& req, httplib::Response& res);
  void UnloadLoraAdapter(const httplib::Request& req, httplib::Response& res);
  // vLLM's POST /tokenize and POST /detokenize.
  void Tokenize(const httplib::Request& req, httplib::Response& res);
  void Detokenize(const httplib::Request& req, httplib::Response& res);

 private:
  // A request's prompts, tokenized and checked, with each prompt's sampling params.
  struct PreparedPrompts {
    std::vector<ChatReply::PromptInfo> prompts;
    std::vector<SamplingParams> params;
    std::shared_ptr<const LoraAdapter> lora;  // the adapter `model` names (null: the base)
  };
  // A response whose choices are queued on one channel.
  struct Queued {
    std::string id;
    std::shared_ptr<OutputChannel> channel;
    std::shared_ptr<ChatReply> reply;
  };
  // The names a request's `model` may give: the served model's and the loaded adapters'.
  ModelNames Models() const;
  // The tool-call format the model's chat template teaches.
  ToolCallFormat ToolFormat() const;
  // Through the engine's front door (Engine::PreparePrompt): the adapter `model` names (a
  // RequestError 404 when it was unloaded since the parse), the tools' grammar, then each
  // prompt rendered, encoded and checked. A prompt the engine refuses is a RequestError with
  // `rejected_status` (the seed protocol's 422, every other protocol's 400).
  PreparedPrompts Prepare(ChatRequest& request, int rejected_status = kBadRequest);
  // Queues every choice of a prepared request as response `id`; nullopt (and none queued) when
  // the engine refuses one.
  std::optional<Queued> Queue(const ChatRequest& request, const PreparedPrompts& prepared,
                              std::string id);
  void CancelChoices(const ChatReply& reply);
  // Streams the queued response through `encoder`, or waits for its end and answers `final()`.
  void Answer(httplib::Response& res, const Queued& queued, std::unique_ptr<StreamEncoder> encoder,
              bool stream, ErrorShape shape, const std::function<nlohmann::ordered_json()>& final);
  // The answer to a request the engine's queue refused.
  void SendRefused(httplib::Response& res, ErrorShape shape = ErrorShape::kOpenAi);

  Engine& engine_;
  const ServerOptions& options_;
  std::atomic<int>& open_streams_;
  const std::atomic<bool>& shutting_down_;
  std::atomic<uint64_t> next_id_{0};
  ResponseStore responses_;
};

}  // namespace infer::server
