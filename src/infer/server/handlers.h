// The routes that run generations: POST /v1/completions in the seed's protocol, and OpenAI's
// POST /v1/chat/completions and /v1/completions. Each parses its body (request_fields.h and the
// protocol's parser), hands the prompt to the engine, and answers with one JSON object or a
// stream (stream.h). The transport around them (threads, limits, routes) is http_server.cc's.
#pragma once

#include <httplib.h>

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "infer/engine/engine.h"
#include "infer/server/http_server.h"
#include "infer/server/openai_response.h"

namespace infer::server {

// {"error": {"message", "type", "param", "code"}} with `status`, as OpenAI answers.
void SendError(httplib::Response& res, int status, const std::string& message,
               const std::string& param = {});

class ApiHandlers {
 public:
  // `engine`, `options` and the counters must outlive the handlers.
  ApiHandlers(Engine& engine, const ServerOptions& options, std::atomic<int>& open_streams,
              const std::atomic<bool>& shutting_down)
      : engine_(engine),
        options_(options),
        open_streams_(open_streams),
        shutting_down_(shutting_down) {}

  void SeedCompletions(const httplib::Request& req, httplib::Response& res);
  void OpenAi(const httplib::Request& req, httplib::Response& res, OpenAiEndpoint endpoint);

 private:
  // An OpenAI request's prompts, tokenized and checked, with each prompt's sampling params.
  struct OpenAiPrompts {
    std::vector<OpenAiResponse::PromptInfo> prompts;
    std::vector<SamplingParams> params;
  };
  // Through the engine's front door (Engine::PreparePrompt).
  OpenAiPrompts PrepareOpenAi(OpenAiRequest& request);
  // Queues every choice on one channel; false (and none queued) when the engine refuses one.
  bool QueueChoices(const OpenAiRequest& request, const OpenAiPrompts& prepared,
                    const OpenAiResponse& response, const std::shared_ptr<OutputChannel>& channel);
  void CancelChoices(const OpenAiResponse& response);
  // The answer to a request the engine's queue refused.
  void SendRefused(httplib::Response& res);

  Engine& engine_;
  const ServerOptions& options_;
  std::atomic<int>& open_streams_;
  const std::atomic<bool>& shutting_down_;
  std::atomic<uint64_t> next_id_{0};
};

}  // namespace infer::server
