// Helpers of the loopback server tests: request bodies, reading a finished stream.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "testing/sse_client.h"

namespace infer::testing {

// A new TCP connection to 127.0.0.1:`port`, or -1 if it cannot be made.
inline int ConnectLoopback(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

// The token events' ids and text, and the done (or error) event that ended the stream.
struct StreamSummary {
  std::vector<int32_t> token_ids;
  std::string text;
  std::vector<std::string> pieces;  // each token event's text
  int done_events = 0;
  int error_events = 0;
  nlohmann::json last;  // data of the final event
  std::string last_event;
};

inline StreamSummary Summarize(const server::CompletionResult& result) {
  StreamSummary summary;
  for (const server::SseEvent& event : result.events) {
    const nlohmann::json data = nlohmann::json::parse(event.data);
    if (event.event == "token") {
      summary.token_ids.push_back(data["token_id"].get<int32_t>());
      summary.pieces.push_back(data["token"].get<std::string>());
      summary.text += summary.pieces.back();
    } else if (event.event == "done") {
      ++summary.done_events;
    } else if (event.event == "error") {
      ++summary.error_events;
    }
    summary.last = data;
    summary.last_event = event.event;
  }
  return summary;
}

// The value of the sample `series` (name and labels as written) in Prometheus text, or -1.
inline double MetricValue(const std::string& text, const std::string& series) {
  size_t at = 0;
  while ((at = text.find(series + " ", at)) != std::string::npos) {
    if (at == 0 || text[at - 1] == '\n') {
      return std::stod(text.substr(at + series.size() + 1));
    }
    at += series.size();
  }
  return -1;
}

// The same from a live server's GET /metrics (-1 when it does not answer).
inline double ServerMetric(int port, const std::string& series) {
  const auto [status, text] = server::HttpGet("127.0.0.1", port, "/metrics");
  return status == 200 ? MetricValue(text, series) : -1;
}

inline server::CompletionResult Post(int port, const nlohmann::json& body) {
  return server::PostCompletion("127.0.0.1", port, body.dump(), {}, 300);
}

}  // namespace infer::testing
