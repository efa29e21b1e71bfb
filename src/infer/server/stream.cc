#include "infer/server/stream.h"

#include <chrono>

#include <spdlog/spdlog.h>

#include "infer/server/sse.h"

namespace infer::server {
namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  std::shared_ptr<OutputChannel> channel;
  std::unique_ptr<StreamEncoder> encoder;
  std::string id;
  std::vector<std::string> request_ids;
  StreamContext context;
  Clock::time_point last_write = Clock::now();
  bool started = false;
  bool ended = false;  // the closing bytes were written
};

// Called by httplib in a loop while it returns true: waits a little for the next output and
// writes what it becomes; a failed write (the client is gone) ends the response.
bool Pump(Stream& stream, httplib::DataSink& sink) {
  const auto write = [&](const std::string& text) {
    stream.last_write = Clock::now();
    return text.empty() || sink.write(text.data(), text.size());
  };
  if (!stream.started) {
    stream.started = true;
    if (!write(stream.encoder->Start())) return false;
  }
  const auto output = stream.channel->Pop(std::chrono::milliseconds(100));
  if (!output) {
    const auto heartbeat = std::chrono::duration<double>(stream.context.heartbeat_s);
    if (Clock::now() - stream.last_write < heartbeat) return true;
    return write(": ping\n\n");
  }
  if (!write(stream.encoder->Add(*output))) return false;
  if (stream.encoder->finished() && !stream.ended) {
    stream.ended = true;
    if (!write(stream.encoder->End())) return false;
    sink.done();
  }
  return true;
}

}  // namespace

std::string SeedEventEncoder::Add(const StepOutput& output) {
  finished_ = output.finished;
  return StepOutputEvents(output);
}

void StreamResponse(httplib::Response& res, std::shared_ptr<OutputChannel> channel,
                    std::unique_ptr<StreamEncoder> encoder, std::string id,
                    std::vector<std::string> request_ids, const StreamContext& context) {
  auto stream = std::make_shared<Stream>(Stream{std::move(channel), std::move(encoder),
                                                std::move(id), std::move(request_ids), context});
  ++*context.open_streams;
  res.set_header("Cache-Control", "no-cache");
  res.set_chunked_content_provider(
      "text/event-stream",
      [stream](size_t, httplib::DataSink& sink) { return Pump(*stream, sink); },
      [stream](bool) {
        // The response is over: if the client left before the end, free its requests' slots.
        if (!stream->encoder->finished()) {
          spdlog::info("{}: client disconnected, cancelling", stream->id);
          for (const std::string& request_id : stream->request_ids) {
            stream->context.engine->Cancel(request_id);
          }
        }
        --*stream->context.open_streams;
      });
}

}  // namespace infer::server
