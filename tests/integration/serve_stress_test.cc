// Seed phase 4 stress tests against the real server over loopback: queue growth (exactly the
// excess gets 503, the rest complete), clients that disconnect mid-stream (the others complete,
// the server stays responsive), and random request bodies for a bounded time.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <future>
#include <random>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../unit/loader/test_util.h"
#include "serve_test_util.h"
#include "testing/llama3_vocab_model.h"
#include "testing/server_process.h"

namespace infer {
namespace {

using nlohmann::json;
using testing::Post;
using testing::ServerProcess;
using testing::Summarize;

size_t CountOf(const std::string& text, const std::string& needle) {
  size_t count = 0;
  for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, at + 1)) {
    ++count;
  }
  return count;
}

// Big vocabulary, tiny layers: steps are cheap, EOS (3 of 128256 ids) practically never comes.
class ServeStressTest : public ::testing::Test {
 protected:
  void Start(const std::vector<std::string>& extra) {
    if (!testing::RequireRealTokenizer("llama3")) GTEST_SKIP();
    std::vector<std::string> args = {
        "--model", model_.path(), "--load-format", "dummy", "--served-model-name", "m", "--threads",
        "1"};
    args.insert(args.end(), extra.begin(), extra.end());
    server_ = std::make_unique<ServerProcess>(args);
    ASSERT_TRUE(server_->started()) << server_->log();
  }
  json Body(int max_tokens) const {
    return {{"model", "m"},
            {"prompt", {128000, 9906, 1917}},
            {"max_tokens", max_tokens},
            {"temperature", 0}};
  }
  bool Responsive() const {
    const auto result = Post(server_->port(), Body(3));
    return result.status == 200 && Summarize(result).done_events == 1;
  }

  testing::Llama3VocabModelDir model_;
  std::unique_ptr<ServerProcess> server_;
};

TEST_F(ServeStressTest, QueueGrowthRejectsExactlyTheExcess) {
  constexpr int kMaxWaiting = 8;
  constexpr int kExcess = 10;
  Start({"--max-batch-size", "2", "--max-waiting-requests", std::to_string(kMaxWaiting)});
  // Fill the batch with two long requests first: while they run nothing leaves the queue.
  std::atomic<bool> release{false};
  std::atomic<int> streaming{0};
  std::vector<std::future<server::CompletionResult>> long_ones;
  for (int i = 0; i < 2; ++i) {
    long_ones.push_back(std::async(std::launch::async, [&] {
      bool first = true;
      return server::PostCompletion("127.0.0.1", server_->port(), Body(4000).dump(),
                                    [&](const server::SseEvent&) {
                                      if (first) ++streaming;
                                      first = false;
                                      return !release.load();  // false: hang up
                                    });
    }));
  }
  for (int i = 0; i < 3000 && streaming < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(streaming, 2);

  std::atomic<int> rejected{0};
  std::vector<std::future<server::CompletionResult>> flood;
  for (int i = 0; i < kMaxWaiting + kExcess; ++i) {
    flood.push_back(std::async(std::launch::async, [&] {
      auto result = Post(server_->port(), Body(4));
      if (result.status == 503) ++rejected;
      return result;
    }));
  }
  for (int i = 0; i < 3000 && rejected < kExcess; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(rejected, kExcess);
  release = true;  // the long requests hang up: their slots free, the queue drains
  for (auto& future : long_ones) future.get();

  int completed = 0;
  int unavailable = 0;
  for (auto& future : flood) {
    const auto result = future.get();
    if (result.status == 503) {
      ++unavailable;
      EXPECT_NE(result.body.find("overloaded"), std::string::npos) << result.body;
      continue;
    }
    const auto summary = Summarize(result);
    EXPECT_EQ(result.status, 200) << result.body << result.transport_error;
    EXPECT_EQ(summary.done_events, 1) << result.body;
    EXPECT_EQ(summary.token_ids.size(), 4U);
    completed += summary.done_events;
  }
  EXPECT_EQ(unavailable, kExcess);
  EXPECT_EQ(completed, kMaxWaiting);
  EXPECT_TRUE(Responsive());
}

TEST_F(ServeStressTest, DisconnectsDoNotStallTheRest) {
  Start({"--max-batch-size", "8"});
  std::vector<std::future<server::CompletionResult>> futures;
  for (int i = 0; i < 8; ++i) {
    const bool hang_up = i % 2 == 1;
    futures.push_back(std::async(std::launch::async, [this, hang_up] {
      int events = 0;
      return server::PostCompletion(
          "127.0.0.1", server_->port(), Body(300).dump(),
          [&](const server::SseEvent&) { return !(hang_up && ++events == 2); });
    }));
  }
  for (int i = 0; i < 8; ++i) {
    const auto result = futures[static_cast<size_t>(i)].get();
    const auto summary = Summarize(result);
    if (i % 2 == 1) {
      EXPECT_EQ(summary.done_events, 0);
      EXPECT_EQ(result.transport_error, "Canceled");
    } else {
      EXPECT_EQ(summary.done_events, 1) << result.body;
      EXPECT_EQ(summary.token_ids.size(), 300U);
    }
  }
  // The engine saw the four hang-ups (as cancels) and still serves.
  for (int i = 0; i < 500 && CountOf(server_->log(), "client disconnected") < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(CountOf(server_->log(), "client disconnected"), 4U) << server_->log();
  EXPECT_TRUE(Responsive());
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->log();
}

// A burst of new connections must not overflow the listen backlog (Debian's cpp-httplib listens
// with 5; an overflowed SYN is retried only ~1 s later, a stall of a whole batch). With the server
// stopped, nothing accepts: every connect the kernel completes sits in the accept queue.
TEST_F(ServeStressTest, ConnectionBurstFitsTheListenBacklog) {
  Start({});
  constexpr int kConnections = 64;
  ASSERT_EQ(::kill(server_->pid(), SIGSTOP), 0);
  std::vector<int> fds;
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(server_->port()));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  for (int i = 0; i < kConnections; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    ASSERT_GE(fd, 0);
    fds.push_back(fd);
    ::connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address));
  }
  // Loopback handshakes finish at once when the queue has room; give them half a second.
  int connected = 0;
  for (const int fd : fds) {
    pollfd entry{fd, POLLOUT, 0};
    int error = 0;
    socklen_t length = sizeof(error);
    if (::poll(&entry, 1, 500) == 1 &&
        ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &length) == 0 && error == 0) {
      ++connected;
    }
  }
  for (const int fd : fds) ::close(fd);
  ASSERT_EQ(::kill(server_->pid(), SIGCONT), 0);
  EXPECT_EQ(connected, kConnections);
  EXPECT_TRUE(Responsive());
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->log();
}

// Random bodies (mutated valid ones, random JSON values in every field) for a bounded time:
// every answer is 200 (a stream that ends in done or error), 400, 422 or 503; never a crash.
TEST_F(ServeStressTest, RandomBodiesForABoundedTime) {
  Start({"--max-batch-size", "4", "--max-seq-len", "64", "--batch-wait-timeout", "0"});
  const uint64_t seed = std::random_device{}();
  std::mt19937_64 rng(seed);
  SCOPED_TRACE("seed " + std::to_string(seed));
  const auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
  const std::vector<json> values = {nullptr,
                                    true,
                                    false,
                                    0,
                                    -1,
                                    1,
                                    3,
                                    65,
                                    1e300,
                                    -0.5,
                                    0.5,
                                    2.5,
                                    "",
                                    "x",
                                    "m",
                                    json::array(),
                                    json::array({1, 2}),
                                    json::array({"a"}),
                                    json::object(),
                                    4294967296LL,
                                    json::array({128000, 9906}),
                                    "Hello world"};
  const std::vector<std::string> fields = {
      "model",  "prompt", "max_tokens", "temperature", "top_p",   "top_k", "repetition_penalty",
      "stream", "stop",   "seed",       "n",           "logprobs"};
  const json valid = {{"model", "m"},    {"prompt", "Hi there"},
                      {"max_tokens", 3}, {"temperature", 0.7},
                      {"seed", 1},       {"stop", json::array({"zz"})}};
  int requests = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(4);
  while (std::chrono::steady_clock::now() < deadline) {
    json body = valid;
    for (size_t edits = 1 + pick(3); edits > 0; --edits) {
      const std::string& field = fields[pick(fields.size())];
      if (pick(4) == 0) {
        body.erase(field);
      } else {
        body[field] = values[pick(values.size())];
      }
    }
    std::string text = body.dump();
    if (pick(3) == 0) {  // byte-level damage
      const size_t at = pick(text.size());
      switch (pick(3)) {
        case 0:
          text.resize(at);
          break;
        case 1:
          text[at] = static_cast<char>(rng());
          break;
        default:
          text.insert(at, 1, "{}[]\",:\\\x00\xff"[pick(10)]);
          break;
      }
    }
    const auto result = server::PostCompletion("127.0.0.1", server_->port(), text, {}, 60);
    ++requests;
    ASSERT_TRUE(result.status == 200 || result.status == 400 || result.status == 422 ||
                result.status == 503)
        << result.status << " " << result.transport_error << " for " << text;
    if (result.status == 200) {
      const auto summary = Summarize(result);
      EXPECT_EQ(summary.done_events + summary.error_events, 1) << text << " -> " << result.body;
    } else {
      EXPECT_TRUE(json::parse(result.body, nullptr, false).contains("error")) << result.body;
    }
  }
  EXPECT_GT(requests, 20);
  EXPECT_TRUE(Responsive());
  EXPECT_EQ(server_->Stop(SIGTERM), 0) << server_->log();
}

// 200 requests at once against a KV pool that holds 20 of them: every request either completes
// with all its tokens or is refused with a clear 503; none is lost or duplicated; afterwards
// every block is free again. Once with admission-time reservation (preemption off), once with
// preemption by recompute under the priority policy.
TEST_F(ServeStressTest, OverloadWithAKvBudgetForTwentyLosesNothing) {
  constexpr int kRequests = 200;
  constexpr int kMaxTokens = 29;  // 3 prompt + 29 = 32 positions: 2 blocks of 16
  for (const bool preemption : {false, true}) {
    std::vector<std::string> flags = {"--num-kv-blocks", "40", "--max-waiting-requests", "150",
                                      "--http-threads",  "260"};
    if (preemption) {
      flags.insert(flags.end(), {"--enable-preemption", "--scheduling-policy", "priority"});
    }
    Start(flags);
    if (IsSkipped()) return;
    std::vector<std::future<server::CompletionResult>> results;
    for (int i = 0; i < kRequests; ++i) {
      json body = Body(kMaxTokens);
      body["priority"] = i % 2;
      results.push_back(std::async(std::launch::async, [this, body] {
        return server::PostCompletion("127.0.0.1", server_->port(), body.dump());
      }));
    }
    int completed = 0, refused = 0;
    for (auto& future : results) {
      const auto result = future.get();
      if (result.status == 503) {
        ++refused;
        EXPECT_NE(result.body.find("overloaded"), std::string::npos) << result.body;
        continue;
      }
      ASSERT_EQ(result.status, 200) << result.body << result.transport_error << server_->log();
      const auto summary = Summarize(result);
      EXPECT_EQ(summary.done_events, 1) << result.body;
      EXPECT_EQ(summary.error_events, 0) << result.body;
      EXPECT_EQ(summary.token_ids.size(), static_cast<size_t>(kMaxTokens)) << result.body;
      completed += summary.done_events;
    }
    EXPECT_EQ(completed + refused, kRequests);
    EXPECT_GE(completed, 150) << "at most the queue's excess may be refused";
    const auto [status, health] = server::HttpGet("127.0.0.1", server_->port(), "/health");
    ASSERT_EQ(status, 200);
    const json kv = json::parse(health)["kv_cache"];
    EXPECT_EQ(kv["num_blocks"], 40);
    EXPECT_EQ(kv["free_blocks"], 40) << health;  // every block came back
    EXPECT_EQ(kv["running"], 0);
    EXPECT_EQ(kv["waiting"], 0);
    std::printf("[ preemption %s: %d completed, %d refused, %lld preemptions ]\n",
                preemption ? "on" : "off", completed, refused,
                static_cast<long long>(kv["preemptions"].get<int64_t>()));
    server_.reset();
  }
}

}  // namespace
}  // namespace infer
