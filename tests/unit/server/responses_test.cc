// OpenAI's Responses API without a model or sockets: the request (and the conversation of its
// previous_response_id) into the ChatRequest the handlers serve, refusals, the reply's deltas
// into output items and the Responses events, and the bounded store of responses. The shapes are
// those of OpenAI's API reference (the openai-node client's types).
#include "infer/server/responses.h"

#include <gtest/gtest.h>

#include <thread>

#include "infer/server/openai_request.h"
#include "infer/server/sse.h"
#include "step_output_util.h"

namespace infer::server {
namespace {

using nlohmann::json;
using ordered_json = nlohmann::ordered_json;
using testing::Output;

json Plain(const ordered_json& value) { return json::parse(value.dump()); }

// The request a body makes (the model's defaults: none).
ResponsesRequest Parse(const std::string& body, const ResponseStore& store) {
  return ParseResponsesRequest(body, store, "m", {});
}

// The status and param a body is refused with (200 when accepted).
std::pair<int, std::string> Refusal(const std::string& body, const ResponseStore& store) {
  try {
    Parse(body, store);
  } catch (const RequestError& e) {
    return {e.status(), e.param()};
  }
  return {200, ""};
}

StoredResponse Stored(const std::string& id, const std::string& text) {
  return {ordered_json{{"id", id}, {"object", "response"}},
          ordered_json::array({{{"type", "message"}, {"role", "user"}, {"content", text}}})};
}

TEST(ResponsesRequest, ReadsEveryFieldIntoTheChatRequest) {
  const ResponseStore store(4, 1 << 20);
  const ResponsesRequest request = Parse(R"({
      "model": "m", "instructions": "Be brief.", "max_output_tokens": 64, "temperature": 0.5,
      "top_p": 0.9, "stream": true, "store": false, "metadata": {"k": "v"}, "user": "u",
      "include": [], "truncation": "disabled", "unknown_field": 1, "parallel_tool_calls": false,
      "reasoning": {"effort": "none"},
      "tools": [{"type": "function", "name": "get_weather", "description": "Weather",
                 "parameters": {"type": "object", "properties": {"z": {}, "a": {}}},
                 "strict": true}],
      "tool_choice": {"type": "function", "name": "get_weather"},
      "text": {"format": {"type": "json_schema", "name": "w", "strict": true,
                          "schema": {"type": "object"}}},
      "input": [
        {"role": "user", "content": "Weather in Paris?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "role": "assistant", "id": "msg_1", "status": "completed",
         "content": [{"type": "output_text", "text": "Let me look.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_1", "name": "get_weather",
         "arguments": "{\"city\": \"Paris\"}", "status": "completed"},
        {"type": "function_call_output", "call_id": "call_1", "output": "18 C"},
        {"type": "message", "role": "developer",
         "content": [{"type": "input_text", "text": "And"}, {"type": "input_text", "text": "tomorrow?"}]}]})",
                                         store);
  const ChatRequest& chat = request.chat;
  EXPECT_EQ(chat.ignored_fields, std::vector<std::string>{"unknown_field"});
  EXPECT_TRUE(request.stream);
  EXPECT_FALSE(request.store);
  // The chat is streamed to the encoder whatever `stream` says.
  EXPECT_TRUE(chat.stream);
  EXPECT_EQ(chat.model, "m");
  EXPECT_EQ(chat.max_tokens, 64);
  EXPECT_EQ(chat.params.temperature, 0.5);
  EXPECT_EQ(chat.params.top_p, 0.9);
  ASSERT_TRUE(chat.tools.has_value());
  ASSERT_EQ(chat.tools->tools.size(), 1U);
  EXPECT_EQ(Plain(chat.tools->tools[0].spec), json::parse(R"(
      {"type": "function", "function": {"name": "get_weather", "description": "Weather",
       "parameters": {"type": "object", "properties": {"z": {}, "a": {}}}, "strict": true}})"));
  EXPECT_EQ(chat.tools->choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_EQ(chat.tools->choice.name, "get_weather");
  EXPECT_FALSE(chat.tools->parallel);
  ASSERT_TRUE(chat.params.structured_output.has_value());
  EXPECT_EQ(chat.params.structured_output->kind, StructuredOutput::Kind::kJsonSchema);
  EXPECT_EQ(json::parse(chat.params.structured_output->source),
            json::parse(R"({"type": "object"})"));
  EXPECT_EQ(Plain(chat.chat_template_kwargs), json::parse(R"({"enable_thinking": false})"));
  EXPECT_EQ(Plain(TemplateMessages(chat.messages)), json::parse(R"([
      {"role": "system", "content": "Be brief."},
      {"role": "user", "content": "Weather in Paris?"},
      {"role": "assistant", "content": "Let me look.", "tool_calls": [{"id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": {"city": "Paris"}}}]},
      {"role": "tool", "tool_call_id": "call_1", "content": "18 C", "name": "get_weather"},
      {"role": "system", "content": "And\ntomorrow?"}])"));
  // The tools keep the client's key order (the grammar writes properties in that order).
  EXPECT_EQ(chat.tools->tools[0].parameters["properties"].begin().key(), "z");
  // What the response echoes.
  EXPECT_EQ(request.echo["instructions"], "Be brief.");
  EXPECT_EQ(request.echo["max_output_tokens"], 64);
  EXPECT_EQ(request.echo["parallel_tool_calls"], false);
  EXPECT_EQ(Plain(request.echo["tool_choice"]),
            json::parse(R"({"type": "function", "name": "get_weather"})"));
  EXPECT_EQ(request.echo["text"]["format"]["name"], "w");
  EXPECT_EQ(request.echo["reasoning"]["effort"], "none");
  EXPECT_EQ(request.echo["store"], false);
  EXPECT_EQ(request.echo["user"], "u");
  EXPECT_EQ(Plain(request.echo["metadata"]), json::parse(R"({"k": "v"})"));
  // The conversation to store: the input items as given.
  EXPECT_EQ(request.conversation.size(), 6U);
}

TEST(ResponsesRequest, AStringInputIsOneUserMessageAndDefaultsAreEchoed) {
  const ResponseStore store(4, 1 << 20);
  const ResponsesRequest request = Parse(R"({"input": "Hi"})", store);
  EXPECT_EQ(Plain(TemplateMessages(request.chat.messages)),
            json::parse(R"([{"role": "user", "content": "Hi"}])"));
  EXPECT_TRUE(request.chat.stream);
  EXPECT_FALSE(request.chat.max_tokens.has_value());
  EXPECT_FALSE(request.chat.tools.has_value());
  EXPECT_FALSE(request.chat.params.structured_output.has_value());
  EXPECT_TRUE(request.chat.chat_template_kwargs.empty());
  EXPECT_FALSE(request.stream);
  EXPECT_TRUE(request.store);  // store defaults to true
  EXPECT_EQ(Plain(request.conversation), json::parse(R"([{"type": "message", "role": "user",
      "content": [{"type": "input_text", "text": "Hi"}]}])"));
  EXPECT_EQ(Plain(request.echo), json::parse(R"({"instructions": null,
      "previous_response_id": null, "max_output_tokens": null, "tools": [],
      "tool_choice": "auto", "parallel_tool_calls": true, "text": {"format": {"type": "text"}},
      "reasoning": {"effort": null, "summary": null}, "store": true, "truncation": "disabled",
      "user": null, "metadata": {}})"));
  // json_object and an effort other than none.
  const ResponsesRequest json_object = Parse(
      R"({"input": "Hi", "text": {"format": {"type": "json_object"}},
          "reasoning": {"effort": "high", "summary": "auto"}})",
      store);
  ASSERT_TRUE(json_object.chat.params.structured_output.has_value());
  EXPECT_EQ(json_object.chat.params.structured_output->kind, StructuredOutput::Kind::kJsonObject);
  EXPECT_EQ(json_object.chat.chat_template_kwargs["enable_thinking"], true);
}

TEST(ResponsesRequest, PreviousResponseIdContinuesItsConversation) {
  ResponseStore store(4, 1 << 20);
  StoredResponse previous;
  previous.response = {{"id", "resp_1"}, {"object", "response"}};
  previous.conversation = ordered_json::parse(R"([
      {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Weather?"}]},
      {"type": "function_call", "id": "fc_1", "call_id": "call_9", "name": "get_weather",
       "arguments": "{}", "status": "completed"}])");
  ASSERT_TRUE(store.Put(previous));
  const ResponsesRequest request = Parse(
      R"({"previous_response_id": "resp_1", "instructions": "New rules.",
          "input": [{"type": "function_call_output", "call_id": "call_9", "output": "sunny"}]})",
      store);
  EXPECT_EQ(Plain(TemplateMessages(request.chat.messages)), json::parse(R"([
      {"role": "system", "content": "New rules."},
      {"role": "user", "content": "Weather?"},
      {"role": "assistant", "content": "", "tool_calls": [{"id": "call_9", "type": "function",
        "function": {"name": "get_weather", "arguments": {}}}]},
      {"role": "tool", "tool_call_id": "call_9", "content": "sunny", "name": "get_weather"}])"));
  EXPECT_EQ(request.conversation.size(), 3U);
  EXPECT_EQ(request.echo["previous_response_id"], "resp_1");
  // An unknown id is a 404 naming the field.
  EXPECT_EQ(Refusal(R"({"previous_response_id": "resp_x", "input": "Hi"})", store),
            (std::pair<int, std::string>{404, "previous_response_id"}));
}

TEST(ResponsesRequest, RefusesWhatWouldChangeTheOutput) {
  const ResponseStore store(4, 1 << 20);
  const auto param = [&](const std::string& body) { return Refusal(body, store); };
  using Result = std::pair<int, std::string>;
  EXPECT_EQ(param(R"({"input": "Hi", "tools": [{"type": "web_search"}]})"), Result(400, "tools"));
  EXPECT_EQ(param(R"({"input": "Hi", "tools": [{"type": "file_search", "vector_store_ids": []}]})"),
            Result(400, "tools"));
  EXPECT_EQ(param(R"({"input": "Hi", "tools": [{"type": "mcp", "server_label": "x"}]})"),
            Result(400, "tools"));
  EXPECT_EQ(param(R"({"input": "Hi", "tool_choice": {"type": "web_search_preview"}})"),
            Result(400, "tool_choice"));
  EXPECT_EQ(param(R"({"input": "Hi", "background": true})"), Result(400, "background"));
  EXPECT_EQ(param(R"({"input": "Hi", "background": false})"), Result(200, ""));
  EXPECT_EQ(param(R"({"input": "Hi", "conversation": "conv_1"})"), Result(400, "conversation"));
  EXPECT_EQ(param(R"({"input": "Hi", "prompt": {"id": "pmpt_1"}})"), Result(400, "prompt"));
  EXPECT_EQ(param(R"({"input": "Hi", "include": ["reasoning.encrypted_content"]})"),
            Result(400, "include"));
  EXPECT_EQ(param(R"({"input": "Hi", "truncation": "auto"})"), Result(400, "truncation"));
  EXPECT_EQ(param(R"({"input": "Hi", "top_logprobs": 3})"), Result(400, "top_logprobs"));
  EXPECT_EQ(param(R"({"input": "Hi", "max_tool_calls": 2})"), Result(400, "max_tool_calls"));
  EXPECT_EQ(param(R"({"input": "Hi", "text": {"verbosity": "low"}})"), Result(400, "text"));
  EXPECT_EQ(param(R"({"input": [{"role": "user", "content": [{"type": "input_image",
      "image_url": "http://x"}]}]})"),
            Result(400, "input"));
  EXPECT_EQ(param(R"({"input": [{"role": "user", "content": [{"type": "input_file",
      "file_id": "f"}]}]})"),
            Result(400, "input"));
  EXPECT_EQ(param(R"({"input": [{"type": "item_reference", "id": "msg_1"}]})"),
            Result(400, "input"));
  // Malformed bodies.
  EXPECT_EQ(param(R"({"model": "m"})"), Result(400, "input"));
  EXPECT_EQ(param(R"({"input": []})"), Result(400, "input"));
  EXPECT_EQ(param(R"({"input": 5})"), Result(400, "input"));
  EXPECT_EQ(param(R"({"input": [{"role": "tool", "content": "x"}]})"), Result(400, "input"));
  EXPECT_EQ(param(R"({"input": [{"type": "function_call", "call_id": "c", "name": "f"}]})"),
            Result(400, "input"));
  EXPECT_EQ(param(R"({"input": "Hi", "max_output_tokens": 0})"), Result(400, "max_output_tokens"));
  EXPECT_EQ(param(R"({"input": "Hi", "stream": "yes"})"), Result(400, "stream"));
  EXPECT_EQ(param(R"({"input": "Hi", "text": {"format": {"type": "json_schema"}}})"),
            Result(400, "text"));
  EXPECT_EQ(param(R"({"input": "Hi", "reasoning": {"effort": "huge"}})"), Result(400, "reasoning"));
  EXPECT_EQ(param(R"({"input": "Hi", "previous_response_id": 7})"),
            Result(400, "previous_response_id"));
}

TEST(ResponseStore, BoundsEntriesAndBytesEvictingTheOldest) {
  ResponseStore store(3, 1 << 20);
  for (int i = 0; i < 5; ++i) ASSERT_TRUE(store.Put(Stored(fmt::format("resp_{}", i), "x")));
  EXPECT_EQ(store.size(), 3U);
  EXPECT_EQ(store.Get("resp_0"), nullptr);
  EXPECT_EQ(store.Get("resp_1"), nullptr);
  ASSERT_NE(store.Get("resp_2"), nullptr);
  EXPECT_EQ(store.Get("resp_4")->response["id"], "resp_4");
  EXPECT_TRUE(store.Erase("resp_3"));
  EXPECT_FALSE(store.Erase("resp_3"));
  EXPECT_EQ(store.size(), 2U);

  // Bytes: each entry is its response's and conversation's JSON text.
  const StoredResponse big = Stored("resp_a", std::string(1000, 'a'));
  const size_t big_bytes = big.response.dump().size() + big.conversation.dump().size();
  ResponseStore by_bytes(100, 2 * big_bytes + 10);
  ASSERT_TRUE(by_bytes.Put(Stored("resp_a", std::string(1000, 'a'))));
  ASSERT_TRUE(by_bytes.Put(Stored("resp_b", std::string(1000, 'b'))));
  EXPECT_EQ(by_bytes.bytes(), 2 * big_bytes);
  ASSERT_TRUE(by_bytes.Put(Stored("resp_c", std::string(1000, 'c'))));
  EXPECT_EQ(by_bytes.size(), 2U);
  EXPECT_EQ(by_bytes.Get("resp_a"), nullptr);
  EXPECT_NE(by_bytes.Get("resp_c"), nullptr);
  EXPECT_LE(by_bytes.bytes(), 2 * big_bytes + 10);
  // One entry over the whole budget is not stored, and evicts nothing.
  EXPECT_FALSE(by_bytes.Put(Stored("resp_huge", std::string(3 * big_bytes, 'h'))));
  EXPECT_EQ(by_bytes.size(), 2U);
  // Storing an id again replaces it.
  ASSERT_TRUE(by_bytes.Put(Stored("resp_c", "short")));
  EXPECT_EQ(by_bytes.size(), 2U);
  EXPECT_EQ(by_bytes.Get("resp_c")->conversation[0]["content"], "short");
  // No entries allowed: nothing is kept.
  ResponseStore none(0, 1 << 20);
  EXPECT_FALSE(none.Put(Stored("resp_1", "x")));
  EXPECT_EQ(none.Get("resp_1"), nullptr);
}

TEST(ResponseStore, ThreadSafeUnderConcurrentPutsGetsAndErases) {
  ResponseStore store(50, 1 << 16);
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&store, t] {
      for (int i = 0; i < 500; ++i) {
        const std::string id = fmt::format("resp_{}_{}", t, i);
        store.Put(Stored(id, std::string(static_cast<size_t>(i % 50), 'x')));
        if (const auto got = store.Get(id)) {
          EXPECT_EQ(got->response["id"].get<std::string>(), id);
        }
        if (i % 3 == 0) store.Erase(fmt::format("resp_{}_{}", t, i - 1));
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_LE(store.size(), 50U);
  EXPECT_LE(store.bytes(), size_t{1} << 16);
}

// A response under assembly for `body` (a Responses request), as the handler makes it.
struct Assembly {
  explicit Assembly(const std::string& body, ResponseStore* store = nullptr) {
    static const ResponseStore kEmpty(1, 1);
    ResponsesRequest responses = Parse(body, store ? *store : kEmpty);
    ChatRequest request = responses.chat;
    request.tool_format = ToolCallFormat::kHermes;
    responses.echo["temperature"] = request.params.temperature;
    responses.echo["top_p"] = request.params.top_p;
    auto chat = std::make_shared<ChatReply>(
        request, "resp_1", std::vector<ChatReply::PromptInfo>{{{1, 2}, ""}}, /*reasoning=*/true);
    reply =
        std::make_unique<ResponsesReply>(chat, "resp_1", "m", 42, 2, std::move(responses), store);
  }
  std::string id = OpenAiResponse::ChoiceRequestId("resp_1", 0);
  std::unique_ptr<ResponsesReply> reply;
};

// A stream's events as {name, data}, read by the SSE parser; each event's data names it and
// the sequence numbers count up from 0.
std::vector<std::pair<std::string, json>> Events(const std::string& stream) {
  std::vector<std::pair<std::string, json>> events;
  SseParser parser;
  for (const SseEvent& event : parser.Feed(stream)) {
    const json data = json::parse(event.data);
    EXPECT_EQ(data["type"], event.event);
    EXPECT_EQ(data["sequence_number"], events.size());
    events.emplace_back(event.event, data);
  }
  return events;
}

std::vector<std::string> Names(const std::vector<std::pair<std::string, json>>& events) {
  std::vector<std::string> names;
  names.reserve(events.size());
  for (const auto& [name, data] : events) names.push_back(name);
  return names;
}

TEST(ResponsesReply, ReasoningAndTextStreamAsItemsAndTheirEvents) {
  ResponseStore store(4, 1 << 20);
  Assembly a(R"({"input":"Hi","metadata":{"k":"v"}})", &store);
  std::string stream = a.reply->Start();
  // One of the two input tokens came from the prefix cache.
  for (StepOutput output : {Output(a.id, 5, "<think>hm", 1), Output(a.id, 6, "m</think>Hel", 2),
                            Output(a.id, 7, "lo", 3, FinishReason::kEos)}) {
    output.cached_tokens = 1;
    stream += a.reply->Add(output);
  }
  ASSERT_TRUE(a.reply->finished());
  stream += a.reply->End();
  const auto events = Events(stream);
  EXPECT_EQ(
      Names(events),
      (std::vector<std::string>{
          "response.created", "response.in_progress", "response.output_item.added",
          "response.content_part.added", "response.reasoning_text.delta",
          "response.reasoning_text.delta", "response.reasoning_text.done",
          "response.content_part.done", "response.output_item.done", "response.output_item.added",
          "response.content_part.added", "response.output_text.delta", "response.output_text.delta",
          "response.output_text.done", "response.content_part.done", "response.output_item.done",
          "response.completed"}));
  const json& created = events[0].second["response"];
  EXPECT_EQ(created["status"], "in_progress");
  EXPECT_EQ(created["output"], json::array());
  EXPECT_EQ(created["id"], "resp_1");
  EXPECT_EQ(created["created_at"], 42);
  const json& message_added = events[9].second;
  EXPECT_EQ(message_added["output_index"], 1);
  EXPECT_EQ(message_added["item"]["type"], "message");
  EXPECT_EQ(message_added["item"]["status"], "in_progress");
  EXPECT_EQ(events[10].second["part"], json::parse(R"({"type": "output_text",
      "annotations": [], "logprobs": [], "text": ""})"));
  const std::string message_id = message_added["item"]["id"];
  EXPECT_EQ(message_id.rfind("msg_", 0), 0U);
  EXPECT_EQ(events[11].second["delta"], "Hel");
  EXPECT_EQ(events[11].second["item_id"], message_id);
  EXPECT_EQ(events[11].second["content_index"], 0);
  EXPECT_EQ(events[13].second["text"], "Hello");
  EXPECT_EQ(events[4].second["delta"], "hm");

  const json final = Plain(a.reply->Final());
  EXPECT_EQ(events.back().second["response"], final);
  EXPECT_EQ(final["object"], "response");
  EXPECT_EQ(final["status"], "completed");
  EXPECT_EQ(final["incomplete_details"], nullptr);
  EXPECT_EQ(final["metadata"], json::parse(R"({"k": "v"})"));
  ASSERT_EQ(final["output"].size(), 2U);
  EXPECT_EQ(final["output"][0]["type"], "reasoning");
  EXPECT_EQ(final["output"][0]["content"],
            json::parse(R"([{"type": "reasoning_text", "text": "hmm"}])"));
  EXPECT_EQ(final["output"][1], json::parse(fmt::format(R"({{"id": "{}", "type": "message",
      "status": "completed", "role": "assistant", "content": [{{"type": "output_text",
      "annotations": [], "logprobs": [], "text": "Hello"}}]}})",
                                                        message_id)));
  EXPECT_EQ(final["usage"], json::parse(R"({"input_tokens": 2,
      "input_tokens_details": {"cached_tokens": 1}, "output_tokens": 3,
      "output_tokens_details": {"reasoning_tokens": 1}, "total_tokens": 5})"));
  EXPECT_EQ(final["temperature"], 1.0);
  // Stored, with the conversation it ends: the input, then the output items.
  const auto stored = store.Get("resp_1");
  ASSERT_NE(stored, nullptr);
  EXPECT_EQ(Plain(stored->response), final);
  ASSERT_EQ(stored->conversation.size(), 3U);
  EXPECT_EQ(Plain(stored->conversation[2]), final["output"][1]);
}

TEST(ResponsesReply, ToolCallsBecomeFunctionCallItems) {
  Assembly a(R"({"input":"Weather?","store":false,
      "tools":[{"type":"function","name":"get_weather","parameters":{"type":"object"}}]})");
  std::string stream = a.reply->Start();
  stream += a.reply->Add(Output(a.id, 5, "Sure. <tool_", 1));
  stream += a.reply->Add(Output(a.id, 6, "call>\n{\"name\": \"get_weather\", \"arguments\": ", 2));
  stream +=
      a.reply->Add(Output(a.id, 7, "{\"city\": \"Paris\"}}\n</tool_call>", 3, FinishReason::kStop));
  stream += a.reply->End();
  const auto events = Events(stream);
  EXPECT_EQ(
      Names(events),
      (std::vector<std::string>{
          "response.created", "response.in_progress", "response.output_item.added",
          "response.content_part.added", "response.output_text.delta", "response.output_text.done",
          "response.content_part.done", "response.output_item.done", "response.output_item.added",
          "response.function_call_arguments.delta", "response.function_call_arguments.done",
          "response.output_item.done", "response.completed"}));
  // The text before the call streams at once; the call is held and sent whole at the end.
  EXPECT_EQ(events[4].second["delta"], "Sure. ");
  const json& added = events[8].second["item"];
  EXPECT_EQ(added["type"], "function_call");
  EXPECT_EQ(added["arguments"], "");
  EXPECT_EQ(added["name"], "get_weather");
  EXPECT_EQ(added["call_id"].get<std::string>().rfind("call_", 0), 0U);
  EXPECT_EQ(json::parse(events[9].second["delta"].get<std::string>()),
            json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(events[10].second["name"], "get_weather");
  const json final = Plain(a.reply->Final());
  EXPECT_EQ(final["status"], "completed");
  ASSERT_EQ(final["output"].size(), 2U);
  EXPECT_EQ(final["output"][0]["content"][0]["text"], "Sure. ");
  const json& call = final["output"][1];
  EXPECT_EQ(call["id"], added["id"]);
  EXPECT_EQ(call["call_id"], added["call_id"]);
  EXPECT_EQ(call["status"], "completed");
  EXPECT_EQ(json::parse(call["arguments"].get<std::string>()), json::parse(R"({"city":"Paris"})"));
  EXPECT_EQ(final["tools"][0]["name"], "get_weather");
  EXPECT_EQ(final["store"], false);
}

TEST(ResponsesReply, MaxOutputTokensIsIncompleteAndAFailureIsResponseFailed) {
  ResponseStore store(4, 1 << 20);
  Assembly cut(R"({"input":"Hi","max_output_tokens":1})", &store);
  std::string cut_stream = cut.reply->Start();
  cut_stream += cut.reply->Add(Output(cut.id, 5, "Hi", 1, FinishReason::kLength));
  cut_stream += cut.reply->End();
  const auto events = Events(cut_stream);
  ASSERT_GE(events.size(), 2U);
  EXPECT_EQ(events[events.size() - 2].first, "response.output_item.done");
  EXPECT_EQ(events[events.size() - 2].second["item"]["status"], "incomplete");
  EXPECT_EQ(events.back().first, "response.incomplete");
  const json final = Plain(cut.reply->Final());
  EXPECT_EQ(final["status"], "incomplete");
  EXPECT_EQ(final["incomplete_details"], json::parse(R"({"reason": "max_output_tokens"})"));
  EXPECT_EQ(final["max_output_tokens"], 1);
  EXPECT_NE(store.Get("resp_1"), nullptr);  // an incomplete response is stored too

  ResponseStore failed_store(4, 1 << 20);
  Assembly failed(R"({"input":"Hi"})", &failed_store);
  StepOutput error;
  error.request_id = failed.id;
  error.finished = true;
  error.error = "server shutting down";
  std::string stream = failed.reply->Start();
  stream += failed.reply->Add(error);
  EXPECT_TRUE(failed.reply->finished());
  stream += failed.reply->End();
  const auto failure = Events(stream);
  ASSERT_EQ(failure.size(), 4U);
  EXPECT_EQ(failure[2].second, json::parse(R"({"type": "error", "code": "server_error",
      "message": "server shutting down", "param": null, "sequence_number": 2})"));
  EXPECT_EQ(failure[3].first, "response.failed");
  EXPECT_EQ(failure[3].second["response"]["status"], "failed");
  EXPECT_EQ(failure[3].second["response"]["error"],
            json::parse(R"({"code": "server_error", "message": "server shutting down"})"));
  EXPECT_EQ(failed_store.size(), 0U);  // a failed response is not stored
}

}  // namespace
}  // namespace infer::server
