#include "testing/sse_client.h"

#include <httplib.h>

#include <chrono>

namespace infer::server {

CompletionResult PostCompletion(const std::string& host, int port, const std::string& body,
                                const std::function<bool(const SseEvent&)>& on_event,
                                double timeout_s, const std::string& api_key) {
  httplib::Client client(host, port);
  const auto timeout = std::chrono::duration<double>(timeout_s);
  client.set_read_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));
  client.set_write_timeout(std::chrono::duration_cast<std::chrono::microseconds>(timeout));

  CompletionResult result;
  SseParser parser;
  const auto start = std::chrono::steady_clock::now();
  httplib::Request request;
  request.method = "POST";
  request.path = "/v1/completions";
  request.body = body;
  request.set_header("Content-Type", "application/json");
  request.set_header("Accept", "text/event-stream");
  if (!api_key.empty()) request.set_header("Authorization", "Bearer " + api_key);
  request.content_receiver = [&](const char* data, size_t size, uint64_t, uint64_t) {
    result.body.append(data, size);
    for (SseEvent& event : parser.Feed(std::string_view(data, size))) {
      result.event_times_s.push_back(
          std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      result.events.push_back(std::move(event));
      if (on_event && !on_event(result.events.back())) return false;
    }
    return true;
  };
  const httplib::Result answer = client.send(request);
  if (answer) {
    result.status = answer->status;
    if (result.body.empty()) result.body = answer->body;
  } else {
    result.transport_error = httplib::to_string(answer.error());
    // A hang-up by on_event is a cancel, not a failure to reach the server.
    if (answer.error() == httplib::Error::Canceled) result.status = 200;
  }
  return result;
}

std::pair<int, std::string> HttpGet(const std::string& host, int port, const std::string& path,
                                    const std::string& api_key) {
  httplib::Client client(host, port);
  client.set_connection_timeout(std::chrono::seconds(5));
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  const httplib::Result answer = client.Get(path, headers);
  if (!answer) return {0, httplib::to_string(answer.error())};
  return {answer->status, answer->body};
}

std::pair<int, std::string> HttpPost(const std::string& host, int port, const std::string& path,
                                     const std::string& body, const std::string& api_key) {
  httplib::Client client(host, port);
  client.set_connection_timeout(std::chrono::seconds(5));
  client.set_read_timeout(std::chrono::seconds(600));
  httplib::Headers headers;
  if (!api_key.empty()) headers.emplace("Authorization", "Bearer " + api_key);
  const httplib::Result answer = client.Post(path, headers, body, "application/json");
  if (!answer) return {0, httplib::to_string(answer.error())};
  return {answer->status, answer->body};
}

}  // namespace infer::server
