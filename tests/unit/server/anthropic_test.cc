// Anthropic's Messages API without a model or sockets: the request into the ChatRequest the
// handlers serve, refusals, the reply's deltas into Anthropic's content blocks, stop reasons and
// named events, and Anthropic's error shape. The shapes are those of Anthropic's API reference.
#include "infer/server/anthropic.h"

#include <gtest/gtest.h>

#include "infer/server/openai_request.h"
#include "step_output_util.h"
#include "unit/tokenizer/tokenizer_test_util.h"

namespace infer::server {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;

json Plain(const ordered_json& value) { return json::parse(value.dump()); }

// The chat a Messages body asks for (the model's defaults: none).
ChatRequest Parse(const std::string& body, bool count_tokens = false) {
  return ParseAnthropicRequest(body, count_tokens, "m", {});
}

// The status a body is refused with (200 when accepted).
int Refusal(const std::string& body, bool count_tokens = false) {
  try {
    Parse(body, count_tokens);
  } catch (const RequestError& e) {
    return e.status();
  }
  return 200;
}

TEST(AnthropicRequest, ReadsEveryFieldIntoTheChatRequest) {
  const ChatRequest request = Parse(R"({
      "model": "m", "max_tokens": 64, "temperature": 0.5, "top_p": 0.9, "top_k": 20,
      "stop_sequences": ["END", "\n\n"], "stream": true, "metadata": {"user_id": "u"},
      "system": [{"type": "text", "text": "Be brief."}, {"type": "text", "text": "Be kind."}],
      "thinking": {"type": "enabled", "budget_tokens": 1024}, "unknown_field": 1,
      "tools": [{"name": "get_weather", "description": "Weather",
                 "input_schema": {"type": "object", "properties": {"z": {}, "a": {}}}}],
      "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
      "messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [
          {"type": "thinking", "thinking": "hm", "signature": ""},
          {"type": "text", "text": "Let me look."},
          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [
          {"type": "tool_result", "tool_use_id": "toolu_1",
           "content": [{"type": "text", "text": "18 C"}]},
          {"type": "text", "text": "And tomorrow?"}]}]})");
  EXPECT_EQ(request.ignored_fields, std::vector<std::string>{"unknown_field"});
  EXPECT_EQ(request.model, "m");
  EXPECT_EQ(request.max_tokens, 64);
  EXPECT_EQ(request.params.temperature, 0.5);
  EXPECT_EQ(request.params.top_p, 0.9);
  EXPECT_EQ(request.params.top_k, 20);
  EXPECT_EQ(request.params.stop, (std::vector<std::string>{"END", "\n\n"}));
  EXPECT_TRUE(request.stream);
  EXPECT_EQ(Plain(request.chat_template_kwargs), json::parse(R"({"enable_thinking": true})"));
  EXPECT_EQ(request.params.thinking_token_budget, 1024);
  ASSERT_TRUE(request.tools.has_value());
  ASSERT_EQ(request.tools->tools.size(), 1U);
  EXPECT_EQ(Plain(request.tools->tools[0].spec), json::parse(R"(
      {"type": "function", "function": {"name": "get_weather", "description": "Weather",
       "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}}})"));
  EXPECT_EQ(request.tools->choice.mode, ToolChoice::Mode::kRequired);
  EXPECT_FALSE(request.tools->parallel);
  EXPECT_EQ(Plain(TemplateMessages(request.messages)), json::parse(R"([
      {"role": "system", "content": "Be brief.\nBe kind."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Let me look.", "tool_calls": [
        {"id": "toolu_1", "type": "function",
         "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "toolu_1", "content": "18 C"},
      {"role": "user", "content": "And tomorrow?"}])"));
  // The schema keeps the client's key order (the grammar writes properties in that order).
  EXPECT_EQ(request.tools->tools[0].parameters["properties"].begin().key(), "z");
}

TEST(AnthropicRequest, ToolChoicesAndThinkingModes) {
  const auto chat_of = [](const std::string& extra) {
    return Parse(R"({"model":"m","max_tokens":4,"messages":[{"role":"user","content":"x"}],)" +
                 extra + "}");
  };
  const std::string tool = R"("tools":[{"name":"f","input_schema":{"type":"object"}}],)";
  EXPECT_EQ(chat_of(tool + R"("tool_choice":{"type":"auto"})").tools->choice.mode,
            ToolChoice::Mode::kAuto);
  EXPECT_EQ(chat_of(tool + R"("tool_choice":{"type":"none"})").tools->choice.mode,
            ToolChoice::Mode::kNone);
  const ChatRequest named = chat_of(tool + R"("tool_choice":{"type":"tool","name":"f"})");
  EXPECT_EQ(named.tools->choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(named.tools->choice.name, "f");
  EXPECT_EQ(Plain(chat_of(R"("thinking":{"type":"disabled"})").chat_template_kwargs),
            json::parse(R"({"enable_thinking":false})"));
  // A budget bounds enabled thinking only; adaptive thinking has none.
  EXPECT_FALSE(
      chat_of(R"("thinking":{"type":"disabled","budget_tokens":5})").params.thinking_token_budget);
  EXPECT_FALSE(chat_of(R"("thinking":{"type":"adaptive"})").params.thinking_token_budget);
  EXPECT_EQ(
      chat_of(R"("thinking":{"type":"enabled","budget_tokens":0})").params.thinking_token_budget,
      0);
  EXPECT_EQ(Plain(TemplateMessages(chat_of(R"("system":"S")").messages)),
            json::parse(R"([{"role":"system","content":"S"},{"role":"user","content":"x"}])"));
  // A user turn of tool results only is no user message.
  const json turns = Plain(TemplateMessages(Parse(R"({"model":"m","max_tokens":4,"messages":[
      {"role":"user","content":"x"},
      {"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"f","input":{}}]},
      {"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"42"},
                                {"type":"tool_result","tool_use_id":"t2"}]}]})")
                                                .messages));
  EXPECT_EQ(turns, json::parse(R"([{"role":"user","content":"x"},
      {"role":"assistant","content":"","tool_calls":[
        {"id":"t1","type":"function","function":{"name":"f","arguments":{}}}]},
      {"role":"tool","tool_call_id":"t1","content":"42"},
      {"role":"tool","tool_call_id":"t2","content":""}])"));
}

TEST(AnthropicRequest, CountTokensNeedsNoMaxTokensAndDropsStream) {
  const ChatRequest request = Parse(
      R"({"model":"m","stream":true,"max_tokens":9,"messages":[{"role":"user","content":"x"}]})",
      /*count_tokens=*/true);
  EXPECT_FALSE(request.max_tokens.has_value());
  EXPECT_FALSE(request.stream);
  EXPECT_EQ(Refusal(R"({"model":"m","messages":[{"role":"user","content":"x"}]})", true), 200);
}

TEST(AnthropicRequest, RefusesWhatAnthropicOrThisServerCannotServe) {
  const std::string user = R"("messages":[{"role":"user","content":"x"}])";
  EXPECT_EQ(Refusal(R"({"model":"m",)" + user + "}"), 400);     // max_tokens is required
  EXPECT_EQ(Refusal(R"({"max_tokens":4,)" + user + "}"), 400);  // so is model
  EXPECT_EQ(Refusal(R"({"model":"m","max_tokens":4})"), 400);
  EXPECT_EQ(Refusal(R"({"model":"m","max_tokens":4,"messages":[]})"), 400);
  EXPECT_EQ(Refusal("[1]"), 400);
  EXPECT_EQ(Refusal("{nope"), 400);
  for (
      const char* bad : {
          R"("messages":[{"role":"system","content":"x"}])",
          R"("messages":[{"role":"user","content":[{"type":"image","source":{}}]}])",
          R"("messages":[{"role":"user","content":7}])",
          R"("messages":[{"role":"user","content":"x"},{"role":"assistant","content":"pre"}])",
          R"("messages":[{"role":"user","content":[{"type":"tool_result"}]}])",
          R"("messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search"}])",
          R"("messages":[{"role":"user","content":"x"}],"tools":[{"name":"f"}])",
          R"("messages":[{"role":"user","content":"x"}],"tool_choice":{"type":"required"})",
          R"("messages":[{"role":"user","content":"x"}],"stop_sequences":"END")",
          R"("messages":[{"role":"user","content":"x"}],"thinking":{"type":"maybe"})",
          R"("messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled","budget_tokens":-1})",
          R"("messages":[{"role":"user","content":"x"}],"thinking":{"type":"enabled","budget_tokens":"9"})",
          R"("messages":[{"role":"user","content":"x"}],"system":[{"type":"image"}])",
      }) {
    EXPECT_EQ(Refusal(std::string(R"({"model":"m","max_tokens":4,)") + bad + "}"), 400) << bad;
  }
}

TEST(AnthropicError, ShapeAndTypeByStatus) {
  EXPECT_EQ(Plain(AnthropicErrorJson(400, "bad")),
            json::parse(R"({"type":"error","error":{"type":"invalid_request_error",
                            "message":"bad"}})"));
  EXPECT_EQ(AnthropicErrorJson(401, "")["error"]["type"], "authentication_error");
  EXPECT_EQ(AnthropicErrorJson(404, "")["error"]["type"], "not_found_error");
  EXPECT_EQ(AnthropicErrorJson(413, "")["error"]["type"], "request_too_large");
  EXPECT_EQ(AnthropicErrorJson(500, "")["error"]["type"], "api_error");
  EXPECT_EQ(AnthropicErrorJson(503, "")["error"]["type"], "overloaded_error");
}

using testing::Output;

// A stream's events as {name, data}, checking each is "event: NAME\ndata: JSON\n\n".
std::vector<std::pair<std::string, json>> Events(const std::string& stream) {
  std::vector<std::pair<std::string, json>> events;
  size_t start = 0;
  for (size_t end; (end = stream.find("\n\n", start)) != std::string::npos; start = end + 2) {
    const std::string event = stream.substr(start, end - start);
    const size_t newline = event.find('\n');
    EXPECT_EQ(event.rfind("event: ", 0), 0U) << event;
    EXPECT_EQ(event.substr(newline + 1, 6), "data: ") << event;
    const json data = json::parse(event.substr(newline + 7));
    EXPECT_EQ(data["type"], event.substr(7, newline - 7));  // the data names its event
    events.emplace_back(event.substr(7, newline - 7), data);
  }
  EXPECT_EQ(start, stream.size());
  return events;
}

// A message under assembly for `body` (Anthropic's), as the handler makes it.
struct Assembly {
  explicit Assembly(const std::string& body, ToolCallFormat format = ToolCallFormat::kHermes) {
    ChatRequest request = Parse(body);
    request.tool_format = format;
    auto reply = std::make_shared<ChatReply>(
        request, "msg_1", std::vector<ChatReply::PromptInfo>{{{1, 2}, ""}}, /*reasoning=*/true);
    message = std::make_unique<AnthropicMessage>(reply, "msg_1", "m", 2);
  }
  std::string id = OpenAiResponse::ChoiceRequestId("msg_1", 0);
  std::unique_ptr<AnthropicMessage> message;
};

TEST(AnthropicMessage, ThinkingAndTextBlocksStreamAsNamedEvents) {
  Assembly a(R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":"Hi"}]})");
  // One of the 2 prompt tokens came from the prefix cache: Anthropic's usage splits it off.
  const auto cached = [](StepOutput output) {
    output.cached_tokens = 1;
    return output;
  };
  std::string stream = a.message->Start();
  stream += a.message->Add(cached(Output(a.id, 5, "<think>hm", 1)));
  stream += a.message->Add(cached(Output(a.id, 6, "m</think>Hel", 2)));
  stream += a.message->Add(cached(Output(a.id, 7, "lo", 3, FinishReason::kEos)));
  ASSERT_TRUE(a.message->finished());
  stream += a.message->End();
  const auto events = Events(stream);
  std::vector<std::string> names;
  for (const auto& [name, data] : events) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{
                       "message_start", "ping", "content_block_start", "content_block_delta",
                       "content_block_delta", "content_block_stop", "content_block_start",
                       "content_block_delta", "content_block_delta", "content_block_stop",
                       "message_delta", "message_stop"}));
  EXPECT_EQ(events[0].second["message"], json::parse(R"({"id":"msg_1","type":"message",
      "role":"assistant","model":"m","content":[],"stop_reason":null,"stop_sequence":null,
      "usage":{"input_tokens":2,"output_tokens":0}})"));
  EXPECT_EQ(events[2].second, json::parse(R"({"type":"content_block_start","index":0,
      "content_block":{"type":"thinking","thinking":"","signature":""}})"));
  EXPECT_EQ(events[3].second["delta"], json::parse(R"({"type":"thinking_delta","thinking":"hm"})"));
  EXPECT_EQ(events[6].second["content_block"], json::parse(R"({"type":"text","text":""})"));
  EXPECT_EQ(events[7].second, json::parse(R"({"type":"content_block_delta","index":1,
      "delta":{"type":"text_delta","text":"Hel"}})"));
  EXPECT_EQ(events[9].second, json::parse(R"({"type":"content_block_stop","index":1})"));
  EXPECT_EQ(events[10].second, json::parse(R"({"type":"message_delta",
      "delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"input_tokens":1,
      "cache_creation_input_tokens":0,"cache_read_input_tokens":1,"output_tokens":3}})"));
  EXPECT_EQ(Plain(a.message->Final()), json::parse(R"({"id":"msg_1","type":"message",
      "role":"assistant","model":"m","content":[
        {"type":"thinking","thinking":"hmm","signature":""},{"type":"text","text":"Hello"}],
      "stop_reason":"end_turn","stop_sequence":null,
      "usage":{"input_tokens":1,"cache_creation_input_tokens":0,"cache_read_input_tokens":1,
      "output_tokens":3}})"));
}

TEST(AnthropicMessage, ToolCallsBecomeToolUseBlocks) {
  Assembly a(R"({"model":"m","max_tokens":99,"messages":[{"role":"user","content":"Weather?"}],
      "tools":[{"name":"get_weather","input_schema":{"type":"object"}}]})");
  std::string stream = a.message->Start();
  stream += a.message->Add(Output(a.id, 5, "Sure. <tool_", 1));
  stream +=
      a.message->Add(Output(a.id, 6, "call>\n{\"name\": \"get_weather\", \"arguments\": ", 2));
  stream += a.message->Add(
      Output(a.id, 7, "{\"city\": \"Paris\"}}\n</tool_call>", 3, FinishReason::kStop));
  stream += a.message->End();
  const auto events = Events(stream);
  ASSERT_EQ(events.size(), 10U);
  // The text before the call streams at once; the call is held and sent whole at the end.
  EXPECT_EQ(events[3].second["delta"], json::parse(R"({"type":"text_delta","text":"Sure. "})"));
  EXPECT_EQ(events[4].first, "content_block_stop");
  EXPECT_EQ(events[5].second["index"], 1);
  const json& start = events[5].second["content_block"];
  EXPECT_EQ(start["type"], "tool_use");
  EXPECT_EQ(start["name"], "get_weather");
  EXPECT_EQ(start["input"], json::object());
  EXPECT_EQ(start["id"].get<std::string>().rfind("toolu_", 0), 0U);
  EXPECT_EQ(events[6].second["delta"]["type"], "input_json_delta");
  EXPECT_EQ(json::parse(events[6].second["delta"]["partial_json"].get<std::string>()),
            json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(events[7].first, "content_block_stop");
  EXPECT_EQ(events[8].second["delta"]["stop_reason"], "tool_use");
  const json final = Plain(a.message->Final());
  EXPECT_EQ(final["stop_reason"], "tool_use");
  ASSERT_EQ(final["content"].size(), 2U);
  EXPECT_EQ(final["content"][0], json::parse(R"({"type":"text","text":"Sure. "})"));
  EXPECT_EQ(final["content"][1]["input"], json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(final["content"][1]["id"], start["id"]);
}

TEST(AnthropicMessage, LengthIsMaxTokensAndAFailureIsAnErrorEvent) {
  Assembly cut(R"({"model":"m","max_tokens":1,"messages":[{"role":"user","content":"Hi"}]})");
  cut.message->Add(Output(cut.id, 5, "Hi", 1, FinishReason::kLength));
  EXPECT_EQ(cut.message->Final()["stop_reason"], "max_tokens");

  Assembly failed(R"({"model":"m","max_tokens":9,"messages":[{"role":"user","content":"Hi"}]})");
  StepOutput error;
  error.request_id = failed.id;
  error.finished = true;
  error.error = "server shutting down";
  const auto events = Events(failed.message->Add(error));
  ASSERT_EQ(events.size(), 1U);
  EXPECT_EQ(events[0].second, json::parse(R"({"type":"error","error":{"type":"api_error",
      "message":"server shutting down"}})"));
  EXPECT_TRUE(failed.message->finished());
  EXPECT_EQ(failed.message->End(), "");  // no message_delta after an error
  EXPECT_EQ(failed.message->error(), "server shutting down");
}

TEST(AnthropicMessage, StopSequenceIsTheOneTheEngineCutBefore) {
  Assembly a(R"({"model":"m","max_tokens":99,"stop_sequences":["zzz","Stop"],
      "messages":[{"role":"user","content":"Hi"}]})");
  a.message->Add(Output(a.id, 7, "Hello", 1));
  StepOutput last = Output(a.id, 8, " you.", 2, FinishReason::kStop);
  last.stop_string = "Stop";
  a.message->Add(last);
  EXPECT_EQ(a.message->Final()["stop_reason"], "stop_sequence");
  EXPECT_EQ(a.message->Final()["stop_sequence"], "Stop");
  EXPECT_EQ(a.message->Final()["content"][0]["text"], "Hello you.");
  // An end the engine reports without a stop string (EOS, or a finished grammar) is end_turn.
  Assembly eos(R"({"model":"m","max_tokens":99,"stop_sequences":["zzz"],
      "messages":[{"role":"user","content":"Hi"}]})");
  eos.message->Add(Output(eos.id, 7, "Hello", 1, FinishReason::kStop));
  EXPECT_EQ(eos.message->Final()["stop_reason"], "end_turn");
  EXPECT_TRUE(eos.message->Final()["stop_sequence"].is_null());
}

}  // namespace
}  // namespace infer::server
