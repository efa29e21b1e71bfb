// Server-sent events as the completions API's seed format writes them: `event: token`
// {token, token_id}, `event: done` {finish_reason, usage}, `event: error` {error}; and an
// incremental parser for clients (tests, the serving benchmark).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "infer/engine/request.h"

namespace infer::server {

struct SseEvent {
  std::string event;  // "message" when the event has no `event:` field
  std::string data;
};

// "event: NAME\ndata: DATA\n\n" (DATA must not contain newlines; JSON dumps never do).
std::string FormatSseEvent(std::string_view event, std::string_view data);

// The events one StepOutput becomes: a `token` event for a sampled token (for the last one too,
// unless it is an end-of-sequence token with no text), then `done` or `error` when finished.
std::string StepOutputEvents(const StepOutput& output);

// Feeds bytes as they arrive; returns the events completed so far. Comment lines (": ping")
// are skipped; multi-line data is joined with '\n' as the SSE spec says.
class SseParser {
 public:
  std::vector<SseEvent> Feed(std::string_view bytes);

 private:
  std::string buffer_;
  SseEvent current_;
  bool has_data_ = false;
};

}  // namespace infer::server
