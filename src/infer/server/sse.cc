#include "infer/server/sse.h"

#include <fmt/format.h>

namespace infer::server {

using nlohmann::json;

std::string FormatSseEvent(std::string_view event, std::string_view data) {
  return fmt::format("event: {}\ndata: {}\n\n", event, data);
}

std::string StepOutputEvents(const StepOutput& output) {
  std::string events;
  const bool eos_without_text =
      output.finish_reason == FinishReason::kEos && output.text_delta.empty();
  if (output.token_id && !output.error && !eos_without_text) {
    // Replace invalid UTF-8 rather than fail: a client must always get valid JSON.
    const json token = {{"token", output.text_delta}, {"token_id", *output.token_id}};
    events += FormatSseEvent("token", token.dump(-1, ' ', false, json::error_handler_t::replace));
  }
  if (output.error) {
    const json error = {{"error", *output.error}};
    events += FormatSseEvent("error", error.dump(-1, ' ', false, json::error_handler_t::replace));
  } else if (output.finished) {
    const json done = {{"finish_reason",
                        output.finish_reason ? FinishReasonName(*output.finish_reason) : "length"},
                       {"usage",
                        {{"prompt_tokens", output.prompt_tokens},
                         {"completion_tokens", output.completion_tokens},
                         {"total_tokens", output.prompt_tokens + output.completion_tokens}}}};
    events += FormatSseEvent("done", done.dump());
  }
  return events;
}

std::vector<SseEvent> SseParser::Feed(std::string_view bytes) {
  buffer_.append(bytes);
  std::vector<SseEvent> events;
  size_t start = 0;
  for (size_t end; (end = buffer_.find('\n', start)) != std::string::npos; start = end + 1) {
    std::string_view line(buffer_.data() + start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty()) {  // a blank line dispatches the event
      if (has_data_) {
        if (current_.event.empty()) current_.event = "message";
        events.push_back(std::move(current_));
      }
      current_ = {};
      has_data_ = false;
      continue;
    }
    if (line.front() == ':') continue;
    const size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    std::string_view value = colon == std::string_view::npos ? "" : line.substr(colon + 1);
    if (!value.empty() && value.front() == ' ') value.remove_prefix(1);
    if (name == "event") {
      current_.event = value;
    } else if (name == "data") {
      if (has_data_) current_.data += '\n';
      current_.data += value;
      has_data_ = true;
    }
  }
  buffer_.erase(0, start);
  return events;
}

}  // namespace infer::server
