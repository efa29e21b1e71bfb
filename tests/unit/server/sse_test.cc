// SSE: the events a StepOutput becomes (the seed's names and JSON fields), and the client-side
// parser on streams split at arbitrary byte boundaries.
#include "infer/server/sse.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace infer::server {
namespace {

using nlohmann::json;

StepOutput Output(int32_t token, std::string text) {
  StepOutput output;
  output.request_id = std::string(1, 'r');  // not = "r": GCC 12 -Wrestrict false positive
  output.token_id = token;
  output.text_delta = std::move(text);
  output.prompt_tokens = 15;
  output.completion_tokens = 42;
  return output;
}

std::vector<SseEvent> ParseAll(const std::string& stream) {
  SseParser parser;
  return parser.Feed(stream);
}

TEST(Sse, TokenEvent) {
  EXPECT_EQ(StepOutputEvents(Output(9906, "Hello")),
            "event: token\ndata: {\"token\":\"Hello\",\"token_id\":9906}\n\n");
}

TEST(Sse, FinalTokenThenDoneWithUsage) {
  StepOutput output = Output(1917, " world");
  output.finished = true;
  output.finish_reason = FinishReason::kLength;
  const auto events = ParseAll(StepOutputEvents(output));
  ASSERT_EQ(events.size(), 2U);
  EXPECT_EQ(events[0].event, "token");
  EXPECT_EQ(json::parse(events[0].data)["token"], " world");
  EXPECT_EQ(events[1].event, "done");
  const json done = json::parse(events[1].data);
  EXPECT_EQ(done["finish_reason"], "length");
  EXPECT_EQ(done["usage"]["prompt_tokens"], 15);
  EXPECT_EQ(done["usage"]["completion_tokens"], 42);
  EXPECT_EQ(done["usage"]["total_tokens"], 57);
}

TEST(Sse, EosWithoutTextIsOnlyDone) {
  StepOutput output = Output(128009, "");
  output.finished = true;
  output.finish_reason = FinishReason::kEos;
  const auto events = ParseAll(StepOutputEvents(output));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].event, "done");
  EXPECT_EQ(json::parse(events[0].data)["finish_reason"], "eos");
}

TEST(Sse, ErrorEvent) {
  StepOutput output;
  output.finished = true;
  output.error = "server shutting down";
  const auto events = ParseAll(StepOutputEvents(output));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].event, "error");
  EXPECT_EQ(json::parse(events[0].data)["error"], "server shutting down");
}

TEST(Sse, InvalidUtf8StillGivesValidJson) {
  const auto events = ParseAll(StepOutputEvents(Output(5, "\xff\xfe")));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_NO_THROW(json::parse(events[0].data));
}

TEST(Sse, ParserHandlesAnySplitCommentsAndCrlf) {
  const std::string stream =
      ": ping\n\nevent: token\ndata: {\"a\":1}\n\nevent: done\r\ndata: x\r\ndata: y\r\n\r\n"
      "data: plain\n\nevent: partial\ndata: z";
  const std::string_view view = stream;
  for (size_t split = 0; split <= view.size(); ++split) {
    SseParser parser;
    auto events = parser.Feed(view.substr(0, split));
    for (auto& event : parser.Feed(view.substr(split))) events.push_back(std::move(event));
    ASSERT_EQ(events.size(), 3U) << split;
    EXPECT_EQ(events[0].event, "token");
    EXPECT_EQ(events[0].data, "{\"a\":1}");
    EXPECT_EQ(events[1].event, "done");
    EXPECT_EQ(events[1].data, "x\ny");
    EXPECT_EQ(events[2].event, "message");
    EXPECT_EQ(events[2].data, "plain");
  }
}

}  // namespace
}  // namespace infer::server
