// One streamed response, whatever its protocol: a pump moves a response's StepOutputs from its
// OutputChannel to the client as they come, through an encoder (the seed format's events, OpenAI's
// chunks), writes a heartbeat comment while there is nothing to send, and cancels the response's
// engine requests when the client goes away before the end.
#pragma once

#include <httplib.h>

#include <atomic>
#include <memory>
#include <string>
#include <vector>

#include "infer/engine/engine.h"
#include "infer/engine/output_channel.h"
#include "infer/server/openai_response.h"

namespace infer::server {

// What a stream's bytes are made of.
class StreamEncoder {
 public:
  virtual ~StreamEncoder() = default;
  // What opens the stream (may be empty).
  virtual std::string Start() = 0;
  // What `output` becomes (may be empty).
  virtual std::string Add(const StepOutput& output) = 0;
  // Every engine request of the response has ended.
  virtual bool finished() const = 0;
  // What closes the stream once finished (may be empty).
  virtual std::string End() = 0;
};

// The seed protocol (sse.h): one request's `token` events, then `done` or `error`.
class SeedEventEncoder final : public StreamEncoder {
 public:
  std::string Start() override { return {}; }
  std::string Add(const StepOutput& output) override;
  bool finished() const override { return finished_; }
  std::string End() override { return {}; }

 private:
  bool finished_ = false;  // the final output was taken from the channel
};

// OpenAI's chunks (openai_response.h) of every choice of a response.
class OpenAiChunkEncoder final : public StreamEncoder {
 public:
  explicit OpenAiChunkEncoder(std::shared_ptr<OpenAiResponse> response)
      : response_(std::move(response)) {}
  std::string Start() override { return response_->StreamStart(); }
  std::string Add(const StepOutput& output) override { return response_->Add(output); }
  bool finished() const override { return response_->finished(); }
  std::string End() override { return response_->StreamEnd(); }

 private:
  std::shared_ptr<OpenAiResponse> response_;
};

// What a stream needs of its server.
struct StreamContext {
  Engine* engine = nullptr;
  std::atomic<int>* open_streams = nullptr;  // counted while the response is being written
  double heartbeat_s = 1.0;
};

// Answers `res` with a text/event-stream of `channel`'s outputs through `encoder`. `id` names the
// response in logs; `request_ids` are its engine requests, cancelled if the client leaves first.
void StreamResponse(httplib::Response& res, std::shared_ptr<OutputChannel> channel,
                    std::unique_ptr<StreamEncoder> encoder, std::string id,
                    std::vector<std::string> request_ids, const StreamContext& context);

}  // namespace infer::server
