// A small client of the completions API for tests and the serving benchmark: posts one request
// and reads its SSE stream, timing each event.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "infer/server/sse.h"

namespace infer::server {

struct CompletionResult {
  int status = 0;               // HTTP status; 0 when no answer came (see transport_error)
  std::string transport_error;  // why the connection failed, if it did
  std::string body;             // the whole body as received (the error JSON for non-200)
  std::vector<SseEvent> events;
  std::vector<double> event_times_s;  // seconds from sending to each event
};

// `on_event` (optional) sees each event as it arrives; returning false hangs up (the way a
// client disconnects mid-stream).
// A non-empty `api_key` is sent as "Authorization: Bearer <api_key>".
CompletionResult PostCompletion(const std::string& host, int port, const std::string& body,
                                const std::function<bool(const SseEvent&)>& on_event = {},
                                double timeout_s = 600, const std::string& api_key = "");

// GET a path; {status, body} (status 0 when the server cannot be reached).
std::pair<int, std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                    const std::string& api_key = "");

// POST a JSON body to a path and read the whole answer; {status, body} (status 0 when the
// server cannot be reached).
std::pair<int, std::string> HttpPost(const std::string& host, int port, const std::string& path,
                                     const std::string& body, const std::string& api_key = "");

}  // namespace infer::server
