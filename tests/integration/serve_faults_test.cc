// Fault injection against `infer serve` over loopback (issue 16, item 5): things that "cannot
// fail" fail, and the server must end exactly the affected requests with an error event, finish
// the others, and go on serving.
// - A forward pass throws in the middle of a batch (INFER_FAULTS=forward@N).
// - A KV block allocation throws (INFER_FAULTS=kv_alloc@N): only its request fails.
// - A client resets its connection while the server is writing to it.
// - The model's files are truncated and deleted after load.
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <future>
#include <string>
#include <thread>
#include <vector>

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

// The server child inherits INFER_FAULTS from this process (each test is its own process).
class ScopedFaults {
 public:
  explicit ScopedFaults(const std::string& spec) { ::setenv("INFER_FAULTS", spec.c_str(), 1); }
  ~ScopedFaults() { ::unsetenv("INFER_FAULTS"); }
  ScopedFaults(const ScopedFaults&) = delete;
  ScopedFaults& operator=(const ScopedFaults&) = delete;
};

json Body(int max_tokens, const std::vector<int32_t>& prompt = {128000, 9906, 1917}) {
  return {{"model", "m"}, {"prompt", prompt}, {"max_tokens", max_tokens}, {"temperature", 0}};
}

constexpr char kRunning[] = R"(vllm:num_requests_running{model_name="m"})";
constexpr char kAborted[] = R"(vllm:request_success_total{model_name="m",finished_reason="abort"})";

// Four greedy requests at once under a fault that fires while they run: each ends either
// complete (the reference tokens) or with one error event naming the fault after a prefix of
// them; between `min_failed` and `max_failed` fail, none is lost, and a request afterwards is
// served in full.
void ExpectOnlyTheAffectedRequestsFail(const std::string& faults, const std::string& message,
                                       int min_failed, int max_failed) {
  testing::Llama3VocabModelDir model;
  if (!testing::RequireRealTokenizer("llama3")) GTEST_SKIP();
  ScopedFaults scoped(faults);
  ServerProcess server({"--model", model.path(), "--load-format", "dummy", "--served-model-name",
                        "m", "--threads", "1", "--max-batch-size", "2"});
  ASSERT_TRUE(server.started()) << server.log();
  constexpr int kTokens = 40;
  std::vector<std::future<server::CompletionResult>> futures;
  for (int i = 0; i < 4; ++i) {
    futures.push_back(
        std::async(std::launch::async, [&server] { return Post(server.port(), Body(kTokens)); }));
  }
  std::vector<testing::StreamSummary> summaries;
  for (auto& future : futures) {
    const auto result = future.get();
    EXPECT_EQ(result.status, 200) << result.body << result.transport_error;
    summaries.push_back(Summarize(result));
  }
  // After the fault: the same request complete, the reference of the ones that were not hit.
  const auto after = Summarize(Post(server.port(), Body(kTokens)));
  ASSERT_EQ(after.done_events, 1) << server.log();
  ASSERT_EQ(after.token_ids.size(), static_cast<size_t>(kTokens));
  int failed = 0;
  for (const auto& summary : summaries) {
    EXPECT_EQ(summary.done_events + summary.error_events, 1);  // one ending each, never both
    if (summary.error_events == 1) {
      ++failed;
      EXPECT_NE(summary.last.dump().find(message), std::string::npos) << summary.last.dump();
      ASSERT_LE(summary.token_ids.size(), after.token_ids.size());
      EXPECT_TRUE(
          std::equal(summary.token_ids.begin(), summary.token_ids.end(), after.token_ids.begin()))
          << "the tokens before the error are the reference's";
    } else {
      EXPECT_EQ(summary.token_ids, after.token_ids);
    }
  }
  EXPECT_GE(failed, min_failed) << server.log();
  EXPECT_LE(failed, max_failed);
  EXPECT_NE(server.log().find(message), std::string::npos) << server.log();
  EXPECT_EQ(testing::ServerMetric(server.port(), kRunning), 0);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

TEST(ServeFaults, AForwardPassThatThrowsEndsOnlyItsBatch) {
  // The 10th forward pass: the first two requests are decoding (prefill was pass 1 or 2).
  // Only that batch (--max-batch-size 2) fails; the two waiting requests run after it.
  ExpectOnlyTheAffectedRequestsFail("forward@10", "injected fault: forward", 1, 2);
}

TEST(ServeFaults, AKvBlockAllocationThatThrowsEndsOnlyItsRequest) {
  // The fixture's 16-token blocks: a request allocates at its prompt and every 16 tokens after;
  // the 4th allocation falls in the first batch's decoding. Only the request it was for fails.
  ExpectOnlyTheAffectedRequestsFail("kv_alloc@4", "injected fault: kv_alloc", 1, 1);
}

TEST(ServeFaults, AClientResetWhileTheServerWritesIsCancelled) {
  testing::Llama3VocabModelDir model;
  if (!testing::RequireRealTokenizer("llama3")) GTEST_SKIP();
  ServerProcess server({"--model", model.path(), "--load-format", "dummy", "--served-model-name",
                        "m", "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  for (int round = 0; round < 3; ++round) {
    const int fd = testing::ConnectLoopback(server.port());
    ASSERT_GE(fd, 0);
    const std::string body = Body(2000).dump();
    const std::string request =
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
        "application/json\r\nContent-Length: " +
        std::to_string(body.size()) + "\r\n\r\n" + body;
    ASSERT_EQ(::send(fd, request.data(), request.size(), MSG_NOSIGNAL),
              static_cast<ssize_t>(request.size()));
    // Read until the stream has carried some tokens, then reset (RST, not FIN) while the
    // server keeps writing.
    std::string received;
    char buffer[4096];
    while (received.find("event: token") == std::string::npos ||
           received.size() < 2000 * static_cast<size_t>(round + 1)) {
      const ssize_t got = ::recv(fd, buffer, sizeof(buffer), 0);
      ASSERT_GT(got, 0) << received;
      received.append(buffer, static_cast<size_t>(got));
    }
    const linger reset{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
    ::close(fd);
  }
  // The engine drops the three requests and the server goes on.
  double running = -1;
  for (int i = 0; i < 500; ++i) {
    running = testing::ServerMetric(server.port(), kRunning);
    if (running == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_EQ(running, 0) << server.log();
  EXPECT_EQ(testing::ServerMetric(server.port(), kAborted), 3) << server.log();
  const auto after = Summarize(Post(server.port(), Body(20)));
  EXPECT_EQ(after.done_events, 1);
  EXPECT_EQ(after.token_ids.size(), 20U);
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

TEST(ServeFaults, ModelFilesTruncatedAndDeletedAfterLoadChangeNothing) {
  testing::TempDir dir;
  const auto model = dir.path() / "model";
  std::filesystem::copy(testing::FixturePath("models/llama/model"), model);
  ServerProcess server({"--model", model.string(), "--served-model-name", "m", "--threads", "1"});
  ASSERT_TRUE(server.started()) << server.log();
  const auto before = Summarize(Post(server.port(), Body(12, {1, 100, 200})));
  ASSERT_EQ(before.done_events, 1) << server.log();
  // As a user replacing or cleaning a checkpoint folder does: every file emptied in place
  // (which makes any mapping of it fault on access), then the folder removed.
  for (const auto& entry : std::filesystem::directory_iterator(model)) {
    std::filesystem::resize_file(entry.path(), 0);
  }
  std::filesystem::remove_all(model);
  for (int i = 0; i < 3; ++i) {
    const auto again = Summarize(Post(server.port(), Body(12, {1, 100, 200})));
    EXPECT_EQ(again.done_events, 1) << server.log();
    EXPECT_EQ(again.token_ids, before.token_ids);
  }
  EXPECT_EQ(server.Stop(SIGTERM), 0) << server.log();
}

}  // namespace
}  // namespace infer
