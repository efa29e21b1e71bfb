// Limits and drain of `infer serve` over loopback (issue 14, item 5): a client that stalls in the
// middle of its request is disconnected after --timeout; requests beyond --http-threads are
// answered 503 at once instead of waiting; idle connections (new ones that sent nothing, or kept
// alive between requests) hold no worker, so 500 of them and a client trickling a header leave
// /health answering, and the trickler is dropped once its headers took --timeout; SIGTERM
// with --shutdown-timeout stops admitting (503, /health "draining"), lets running requests finish,
// ends what is left with an error event, exits 0.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <future>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/loader/test_util.h"
#include "infer/server/http_server.h"
#include "infer/server/loading_server.h"
#include "serve_test_util.h"
#include "testing/llama3_vocab_model.h"
#include "testing/sanitized.h"
#include "testing/server_process.h"

namespace infer {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;
using testing::ServerProcess;

// Seconds until the server closes `fd` (recv returns 0), or -1 if it is still open after
// `limit_s`.
double SecondsUntilClosed(int fd, int limit_s) {
  timeval timeout{limit_s, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const auto start = Clock::now();
  char byte = 0;
  const ssize_t got = ::recv(fd, &byte, 1, 0);
  const double elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  return got == 0 ? elapsed : -1.0;
}

TEST(ServeLimits, StalledClientsTimeOutAndConnectionsBeyondTheCapGet503) {
  ServerProcess server({"--model", testing::FixturePath("models/llama/model").string(),
                        "--served-model-name", "tiny", "--threads", "1", "--http-threads", "2",
                        "--timeout", "2", "--timeout-keep-alive", "2"});
  ASSERT_TRUE(server.started()) << server.log();
  const auto opened = Clock::now();
  // Two clients that start a request and stall: each holds a worker.
  const int stalled_a = testing::ConnectLoopback(server.port());
  const int stalled_b = testing::ConnectLoopback(server.port());
  ASSERT_GE(stalled_a, 0);
  ASSERT_GE(stalled_b, 0);
  for (const int fd : {stalled_a, stalled_b}) {
    ASSERT_EQ(::send(fd, "GET /hea", 8, MSG_NOSIGNAL), 8);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // both hold a worker now
  // A third client is turned away at once rather than queued behind them.
  const auto asked = Clock::now();
  const auto [status, body] = server::HttpGet("127.0.0.1", server.port(), "/v1/models");
  EXPECT_EQ(status, 503) << body;
  EXPECT_NE(body.find("too many open connections"), std::string::npos) << body;
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - asked).count(), 1.5);
  // The stalled clients are dropped once they sent nothing for --timeout (2 s), which frees the
  // workers.
  const double closed_a = SecondsUntilClosed(stalled_a, 10);
  const double closed_b = SecondsUntilClosed(stalled_b, 10);
  EXPECT_GE(closed_a, 0) << "the stalled connection was never closed";
  EXPECT_GE(closed_b, 0) << "the stalled connection was never closed";
  const double held_s = std::chrono::duration<double>(Clock::now() - opened).count();
  EXPECT_GT(held_s, 1.5);
  EXPECT_LT(held_s, 8.0);
  ::close(stalled_a);
  ::close(stalled_b);
  EXPECT_EQ(server::HttpGet("127.0.0.1", server.port(), "/v1/models").first, 200);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

// Issue 14's slow-client case with the default limits: 500 connections that send nothing and one
// client that sends a header byte every 2 s. Idle connections wait in the kernel until their
// first byte (TCP_DEFER_ACCEPT; past its ~63 s they wait parked, which
// IdleKeepAliveConnectionsHoldNoWorker... covers), the trickling one holds a single worker, and
// /health keeps answering 200 within a second (before the change it did not answer within 30 s).
// Under the sanitizers, with ctest running two tests at once on two cores, a check may take 1.2 s
// (seen in CI under TSan), so the bound there is 5 s: still far below the 30 s a blocked server
// shows.
TEST(ServeLimits, IdleConnectionsAndATricklingClientLeaveHealthAnswering) {
  const double bound_s = testing::kSanitized ? 5.0 : 1.0;
  ServerProcess server({"--model", testing::FixturePath("models/llama/model").string(),
                        "--served-model-name", "tiny", "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  ASSERT_EQ(server::HttpGet("127.0.0.1", server.port(), "/health").first, 200);  // warm
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) {
    const int fd = testing::ConnectLoopback(server.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
  }
  std::atomic<bool> stop{false};
  std::thread trickler([&] {
    const int fd = testing::ConnectLoopback(server.port());
    const std::string request = "GET /health HTTP/1.1\r\nHost: x\r\nX-Slow: aaaaaaaaaaaaaaaa";
    for (size_t i = 0; i < request.size() && !stop; ++i) {
      if (::send(fd, &request[i], 1, MSG_NOSIGNAL) != 1) break;
      for (int wait = 0; wait < 20 && !stop; ++wait) {
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
      }
    }
    ::close(fd);
  });
  // 12 s: past --timeout-keep-alive (5 s), so a worker that had taken an idle connection would
  // have shown as a stall here.
  double slowest = 0;
  for (int i = 0; i < 24; ++i) {
    const auto asked = Clock::now();
    const auto [status, body] = server::HttpGet("127.0.0.1", server.port(), "/health");
    const double seconds = std::chrono::duration<double>(Clock::now() - asked).count();
    slowest = std::max(slowest, seconds);
    EXPECT_EQ(status, 200) << body;
    EXPECT_LT(seconds, bound_s) << "check " << i;
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
  }
  std::printf("[ slowest /health with 500 idle connections and a trickling client: %.1f ms ]\n",
              slowest * 1000);
  stop = true;
  trickler.join();
  for (const int fd : idle) ::close(fd);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

// Sends `request` on `fd` and reads one response to it (headers and a Content-Length body);
// returns its status, or -1 if the connection failed or closed first.
int RoundTrip(int fd, const std::string& request) {
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) !=
      static_cast<ssize_t>(request.size())) {
    return -1;
  }
  timeval timeout{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  std::string got;
  size_t head_end = std::string::npos;
  size_t length = 0;
  while (head_end == std::string::npos || got.size() < head_end + 4 + length) {
    char buffer[4096];
    const ssize_t n = ::recv(fd, buffer, sizeof(buffer), 0);
    if (n <= 0) return -1;
    got.append(buffer, static_cast<size_t>(n));
    if (head_end == std::string::npos && (head_end = got.find("\r\n\r\n")) != std::string::npos) {
      const size_t field = got.find("Content-Length: ");
      if (field != std::string::npos && field < head_end)
        length = std::stoul(got.substr(field + 16));
    }
  }
  return got.starts_with("HTTP/1.1 ") ? std::stoi(got.substr(9, 3)) : -1;
}

// Idle keep-alive connections hold no worker: with 8 workers, 500 clients each make a request
// and keep their connection open; every one is answered (before, the 9th found all 8 workers
// waiting on idle connections and got 503), /health keeps answering, and the server closes the
// idle ones after --timeout-keep-alive. A client that trickles its headers a byte every 0.5 s
// is dropped once the head took --timeout in all (before, each byte restarted the wait).
TEST(ServeLimits, IdleKeepAliveConnectionsHoldNoWorkerAndATricklerIsDropped) {
  const double bound_s = testing::kSanitized ? 5.0 : 1.0;
  ServerProcess server({"--model", testing::FixturePath("models/llama/model").string(),
                        "--served-model-name", "tiny", "--threads", "1", "--http-threads", "8",
                        "--timeout", "2", "--timeout-keep-alive", "3"});
  ASSERT_TRUE(server.started()) << server.log();
  const std::string health = "GET /health HTTP/1.1\r\nHost: x\r\n\r\n";
  std::vector<int> idle;
  for (int i = 0; i < 500; ++i) {
    const int fd = testing::ConnectLoopback(server.port());
    ASSERT_GE(fd, 0) << "connection " << i;
    idle.push_back(fd);
    ASSERT_EQ(RoundTrip(fd, health), 200) << "connection " << i;
  }
  const auto idle_since = Clock::now();
  // A second request on an idle connection is served too (it is handed back to a worker).
  EXPECT_EQ(RoundTrip(idle[0], health), 200);
  const int trickler = testing::ConnectLoopback(server.port());
  ASSERT_GE(trickler, 0);
  std::atomic<double> trickler_closed_s{-1};
  std::thread trickle([&] {
    const auto start = Clock::now();
    const std::string request = health.substr(0, health.size() - 2) + std::string(200, 'a');
    for (const char byte : request) {
      if (::send(trickler, &byte, 1, MSG_NOSIGNAL) != 1) break;
      pollfd p{trickler, POLLIN, 0};
      if (::poll(&p, 1, 500) > 0) break;  // closed by the server (or answered)
    }
    trickler_closed_s = std::chrono::duration<double>(Clock::now() - start).count();
  });
  for (int i = 0; i < 8; ++i) {
    const auto asked = Clock::now();
    const auto [status, body] = server::HttpGet("127.0.0.1", server.port(), "/health");
    EXPECT_EQ(status, 200) << body;
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - asked).count(), bound_s);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));
  }
  trickle.join();
  // The head deadline is --timeout (2 s); the trickler would otherwise go on for 100 s.
  EXPECT_GT(trickler_closed_s.load(), 1.5);
  EXPECT_LT(trickler_closed_s.load(), 2.0 + bound_s);
  ::close(trickler);
  // Every idle connection is closed by the server after --timeout-keep-alive (3 s).
  int closed = 0;
  for (const int fd : idle) closed += SecondsUntilClosed(fd, 10) >= 0 ? 1 : 0;
  EXPECT_EQ(closed, 500);
  const double idle_s = std::chrono::duration<double>(Clock::now() - idle_since).count();
  EXPECT_GT(idle_s, 2.5);
  EXPECT_LT(idle_s, 3.0 + 2 * bound_s);
  for (const int fd : idle) ::close(fd);
  EXPECT_EQ(server::HttpGet("127.0.0.1", server.port(), "/health").first, 200);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

// A long streaming request (OpenAI completions with ignore_eos, so its length is known; n
// choices make each step slower, as the tiny model alone runs thousands of tokens a second).
json LongRequest(int max_tokens, int n = 1) {
  json body = {{"model", "tiny"},
               {"prompt", {1, 2, 3, 4}},
               {"max_tokens", max_tokens},
               {"temperature", 0.7},
               {"seed", 1},
               {"n", n}};
  body["ignore_eos"] = true;
  body["stream"] = true;
  body["return_token_ids"] = true;
  return body;
}

// The number of tokens a finished OpenAI stream carried and whether every choice ended with a
// finish_reason and the stream with [DONE] (true) or it ended with an error chunk (false).
std::pair<int, bool> ReadStream(const server::CompletionResult& result) {
  int tokens = 0;
  int finished = 0;
  bool done = false;
  for (const server::SseEvent& event : result.events) {
    if (event.data == "[DONE]") {
      done = true;
      continue;
    }
    const json chunk = json::parse(event.data);
    if (chunk.contains("error")) return {tokens, false};
    for (const json& choice : chunk["choices"]) {
      tokens += static_cast<int>(choice.value("token_ids", json::array()).size());
      finished += choice["finish_reason"].is_null() ? 0 : 1;
    }
  }
  return {tokens, finished > 0 && done};
}

TEST(ServeLimits, SigtermDrainsRunningRequestsThenEndsTheRest) {
  for (const bool long_enough : {true, false}) {
    // Drain 120 s: the running request finishes. Drain 1 s: it cannot, and ends with an error.
    // The tiny Llama with the real 128k vocabulary: its output layer makes a token take about
    // a millisecond, so that these requests are still running when the signal comes.
    const int max_tokens = long_enough ? 300 : 4000;
    testing::Llama3VocabModelDir model;
    ServerProcess server({"--model", model.path(), "--load-format", "dummy", "--served-model-name",
                          "tiny", "--threads", "1", "--completions-format", "openai",
                          "--shutdown-timeout", long_enough ? "120" : "1"});
    ASSERT_TRUE(server.started()) << server.log();
    std::atomic<bool> streaming{false};
    auto running = std::async(std::launch::async, [&] {
      return server::PostCompletion("127.0.0.1", server.port(), LongRequest(max_tokens).dump(),
                                    [&](const server::SseEvent&) {
                                      streaming = true;
                                      return true;
                                    });
    });
    for (int i = 0; i < 1000 && !streaming; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    ASSERT_TRUE(streaming);
    ASSERT_EQ(::kill(server.pid(), SIGTERM), 0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    // Draining: no new work, and /health tells the balancer.
    const auto refused = server::PostCompletion("127.0.0.1", server.port(), LongRequest(4).dump());
    EXPECT_EQ(refused.status, 503) << refused.body;
    EXPECT_NE(refused.body.find("draining"), std::string::npos) << refused.body;
    const auto [health_status, health] = server::HttpGet("127.0.0.1", server.port(), "/health");
    EXPECT_EQ(health_status, 503);
    EXPECT_EQ(health, R"({"status":"draining"})");
    const auto result = running.get();
    ASSERT_EQ(result.status, 200) << result.body;
    const auto [tokens, finished] = ReadStream(result);
    if (long_enough) {
      EXPECT_TRUE(finished) << result.body.substr(result.body.size() - 300);
      EXPECT_EQ(tokens, max_tokens);
    } else {
      EXPECT_FALSE(finished);
      EXPECT_LT(tokens, max_tokens);
      EXPECT_NE(result.body.find("shutting down"), std::string::npos);
    }
    EXPECT_EQ(server.Stop(0, 150), 0) << server.log();  // exits by itself, 0
  }
}

// While the model loads, `infer serve` holds its port with a LoadingServer: every path answers
// 503 {"status":"loading"} (a balancer's health check takes the replica out instead of seeing a
// refused connection), with the replica id; Stop() frees the port for the real server.
TEST(ServeLimits, LoadingServerAnswers503UntilStopped) {
  server::LoadingServer loading("127.0.0.1", 0, "replica-7");
  const int port = loading.port();
  ASSERT_GT(port, 0);
  {
    const auto [status, body] = server::HttpGet("127.0.0.1", port, "/health");
    EXPECT_EQ(status, 503);
    EXPECT_EQ(body, R"({"status":"loading"})");
  }
  // API paths: the API's own error shape (what its clients read), and the status beside it.
  for (const char* path : {"/v1/models", "/metrics", "/v1/messages"}) {
    const auto [status, body] = server::HttpGet("127.0.0.1", port, path);
    EXPECT_EQ(status, 503) << path;
    const json reply = json::parse(body);
    EXPECT_EQ(reply["status"], "loading") << path;
    ASSERT_TRUE(reply["error"].is_object()) << body;
    EXPECT_NE(reply["error"]["message"].get<std::string>().find("loading"), std::string::npos);
    if (std::string_view(path) == "/v1/messages") {
      EXPECT_EQ(reply["type"], "error") << body;  // Anthropic's shape
    } else {
      EXPECT_TRUE(reply["error"].contains("code")) << body;  // OpenAI's shape
    }
  }
  EXPECT_EQ(server::PostCompletion("127.0.0.1", port, "{}").status, 503);
  loading.Stop();
  EXPECT_EQ(server::HttpGet("127.0.0.1", port, "/health").first, 0);  // refused: port free
  server::LoadingServer again("127.0.0.1", port, "");                 // and bindable again at once
  EXPECT_EQ(again.port(), port);
}

}  // namespace
}  // namespace infer
