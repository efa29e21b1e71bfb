// Tool calling and structured-output fields without a model: the fields of every dialect
// (OpenAI's response_format, vLLM's structured_outputs and guided_*, llama.cpp's json_schema and
// grammar) and their refusals; tools, tool_choice and the conversation's tool turns; replies in
// the call format each chat template teaches (Qwen3's <tool_call> tags and Llama 3.x's JSON, as
// their templates' own instructions write them) parsed into tool calls; the response's
// message.tool_calls and finish_reason, whole and streamed.
#include "infer/server/tool_calls.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "infer/grammar/gbnf.h"
#include "infer/grammar/pushdown_matcher.h"
#include "infer/server/openai_request.h"
#include "infer/server/openai_response.h"

namespace infer::server {
namespace {

using nlohmann::json;
using Kind = StructuredOutput::Kind;

const std::string kMessages = R"("messages":[{"role":"user","content":"Weather in Paris?"}])";
const std::string kWeather = R"({"type":"function","function":{"name":"get_weather",
    "description":"Current weather","parameters":{"type":"object","properties":{
    "city":{"type":"string"},"unit":{"enum":["c","f"]}},"required":["city"]}}})";

ChatRequest Chat(const std::string& fields) {
  return ParseChatCompletionRequest("{" + kMessages + fields + "}", "m", {});
}

std::pair<int, std::string> Refusal(const std::string& fields) {
  try {
    Chat(fields);
  } catch (const RequestError& e) {
    return {e.status(), e.param()};
  }
  return {200, ""};
}

TEST(StructuredFields, EveryDialectGivesTheSameSpec) {
  const std::string schema = R"({"type":"object","properties":{"b":{"type":"integer"},"a":{}}})";
  for (const std::string& fields :
       {R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)" + schema +
            "}}",
        R"(,"structured_outputs":{"json":)" + schema + "}", R"(,"guided_json":)" + schema,
        R"(,"json_schema":)" + schema,
        R"(,"guided_json":")" +
            std::string(
                R"({\"type\":\"object\",\"properties\":{\"b\":{\"type\":\"integer\"},\"a\":{}}})") +
            "\"",
        R"(,"response_format":{"type":"json_object","schema":)" + schema + "}"}) {
    const ChatRequest request = Chat(fields);
    ASSERT_TRUE(request.params.structured_output) << fields;
    EXPECT_EQ(request.params.structured_output->kind, Kind::kJsonSchema);
    // The client's key order is kept: "b" before "a".
    EXPECT_EQ(request.params.structured_output->source, schema) << fields;
  }
  EXPECT_EQ(Chat(R"(,"response_format":{"type":"json_object"})").params.structured_output->kind,
            Kind::kJsonObject);
  EXPECT_FALSE(Chat(R"(,"response_format":{"type":"text"})").params.structured_output);
  const auto regex = Chat(R"(,"structured_outputs":{"regex":"[a-z]+"})").params.structured_output;
  EXPECT_EQ(regex->kind, Kind::kRegex);
  EXPECT_EQ(regex->source, "[a-z]+");
  EXPECT_EQ(Chat(R"(,"guided_regex":"\\d+")").params.structured_output->source, "\\d+");
  const auto choice = Chat(R"(,"guided_choice":["yes","no"])").params.structured_output;
  EXPECT_EQ(choice->kind, Kind::kChoice);
  EXPECT_EQ(choice->choices, (std::vector<std::string>{"yes", "no"}));
  EXPECT_EQ(Chat(R"(,"structured_outputs":{"choice":["a"]})").params.structured_output->choices,
            (std::vector<std::string>{"a"}));
  for (const std::string& fields :
       {std::string(R"(,"grammar":"root ::= \"x\"")"),
        std::string(R"(,"guided_grammar":"root ::= \"x\"")"),
        std::string(R"(,"structured_outputs":{"grammar":"root ::= \"x\""})")}) {
    const auto grammar = Chat(fields).params.structured_output;
    EXPECT_EQ(grammar->kind, Kind::kGrammar) << fields;
    EXPECT_EQ(grammar->source, "root ::= \"x\"");
  }
}

TEST(StructuredFields, MalformedOrConflictingFieldsAre400) {
  EXPECT_EQ(Refusal(R"(,"response_format":{"type":"json_schema"})").second, "response_format");
  EXPECT_EQ(
      Refusal(R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}})").second,
      "response_format");
  EXPECT_EQ(Refusal(R"(,"guided_json":"{not json")").second, "guided_json");
  EXPECT_EQ(Refusal(R"(,"guided_choice":[])").second, "guided_choice");
  EXPECT_EQ(Refusal(R"(,"guided_choice":["a",1])").second, "guided_choice");
  EXPECT_EQ(Refusal(R"(,"guided_regex":"")").second, "guided_regex");
  EXPECT_EQ(Refusal(R"(,"structured_outputs":{"regex":"a","choice":["a"]})").second,
            "structured_outputs");
  EXPECT_EQ(Refusal(R"(,"structured_outputs":{"xml":"a"})").second, "structured_outputs");
  EXPECT_EQ(Refusal(R"(,"guided_regex":"a","json_schema":{})").second, "guided_regex");
  EXPECT_EQ(Refusal(R"(,"response_format":{"type":"json_object"},"guided_choice":["a"])").first,
            400);
}

TEST(Tools, ToolsChoiceAndTurnsAreParsed) {
  const ChatRequest request = Chat(R"(,"tools":[)" + kWeather +
                                   R"(],"tool_choice":{"type":"function","function":{"name":
                                     "get_weather"}},"parallel_tool_calls":false)");
  ASSERT_TRUE(request.tools);
  ASSERT_EQ(request.tools->tools.size(), 1U);
  EXPECT_EQ(request.tools->tools[0].name, "get_weather");
  // The parameters keep their order: city before unit.
  EXPECT_EQ(request.tools->tools[0].parameters["properties"].begin().key(), "city");
  EXPECT_EQ(request.tools->choice.mode, ToolChoice::Mode::kNamed);
  EXPECT_FALSE(request.tools->parallel);
  EXPECT_FALSE(Chat(R"(,"tools":[],"tool_choice":"none")").tools);
  EXPECT_EQ(Refusal(R"(,"tool_choice":"required")").second, "tool_choice");
  EXPECT_EQ(Refusal(R"(,"tools":[)" + kWeather +
                    R"(],"tool_choice":{"type":"function","function":{"name":"other"}})")
                .second,
            "tool_choice");
  EXPECT_EQ(Refusal(R"(,"tools":[)" + kWeather + "," + kWeather + "]").second, "tools");
  EXPECT_EQ(Refusal(R"(,"tools":[{"type":"function","function":{"name":"a b"}}])").second, "tools");
  EXPECT_EQ(Refusal(R"(,"tool_choice":"sometimes")").second, "tool_choice");

  // A whole round: the assistant's call (arguments as JSON text) and the tool's result.
  const ChatRequest round = ParseChatCompletionRequest(
      R"({"messages":[{"role":"user","content":"Weather?"},
          {"role":"assistant","content":null,"tool_calls":[{"id":"call_1","type":"function",
           "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
          {"role":"tool","tool_call_id":"call_1","content":"18 C"}],"tools":[)" +
          kWeather + "]}",
      "m", {});
  const nlohmann::ordered_json turns = TemplateMessages(round.messages);
  const auto& call = turns[1]["tool_calls"][0];
  EXPECT_EQ(call["function"]["arguments"], nlohmann::ordered_json({{"city", "Paris"}}));
  EXPECT_EQ(turns[2]["tool_call_id"], "call_1");
  EXPECT_EQ(turns[2]["content"], "18 C");
  try {
    ParseChatCompletionRequest(R"({"messages":[{"role":"tool","content":"x"}]})", "m", {});
    ADD_FAILURE() << "a tool message without tool_call_id was accepted";
  } catch (const RequestError& e) {
    EXPECT_EQ(e.param(), "messages[0].tool_call_id");
  }
}

ToolsRequest Weather(ToolChoice::Mode mode = ToolChoice::Mode::kAuto) {
  const char* choice = mode == ToolChoice::Mode::kRequired ? "required"
                       : mode == ToolChoice::Mode::kNone   ? "none"
                                                           : "auto";
  return *Chat(R"(,"tools":[)" + kWeather + fmt::format(R"(],"tool_choice":"{}")", choice)).tools;
}

TEST(Tools, RepliesInEachTemplatesFormatParse) {
  const ToolsRequest tools = Weather();
  // Qwen3's template: "return a json object with function name and arguments within
  // <tool_call></tool_call> XML tags".
  ParsedReply qwen = ParseToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": "
      "{\"city\": \"Rome\", \"unit\": \"c\"}}\n</tool_call>",
      ToolCallFormat::kHermes, tools);
  ASSERT_EQ(qwen.calls.size(), 2U);
  EXPECT_EQ(qwen.content, "Let me check.");
  EXPECT_EQ(qwen.calls[0].name, "get_weather");
  EXPECT_EQ(json::parse(qwen.calls[1].arguments), json({{"city", "Rome"}, {"unit", "c"}}));
  EXPECT_NE(qwen.calls[0].id, qwen.calls[1].id);
  EXPECT_EQ(qwen.calls[0].id.rfind("call_", 0), 0U);
  ParsedReply tagged = ParseToolCalls(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"</tool_call>\"}}\n</tool_call>",
      ToolCallFormat::kHermes, tools);
  ASSERT_EQ(tagged.calls.size(), 1U);
  EXPECT_EQ(json::parse(tagged.calls[0].arguments), json({{"city", "</tool_call>"}}));
  // Llama 3.x's: 'Respond in the format {"name": function name, "parameters": dictionary of
  // argument name and its value}'.
  ParsedReply llama = ParseToolCalls(R"({"name": "get_weather", "parameters": {"city": "Paris"}})",
                                     ToolCallFormat::kLlama3Json, tools);
  ASSERT_EQ(llama.calls.size(), 1U);
  EXPECT_EQ(json::parse(llama.calls[0].arguments), json({{"city", "Paris"}}));
  EXPECT_TRUE(llama.content.empty());
  // A ';' or a brace inside an argument's string is the argument's (CI once saw a sampled
  // name ";" split the call in two); a ';' between calls separates parallel calls.
  ParsedReply odd =
      ParseToolCalls(R"({"name": "get_weather", "parameters": {"city": ";{P\"a;ris}"}} ; )"
                     R"({"name": "get_weather", "parameters": {"city": "Rome"}})",
                     ToolCallFormat::kLlama3Json, tools);
  ASSERT_EQ(odd.calls.size(), 2U);
  EXPECT_EQ(json::parse(odd.calls[0].arguments), json({{"city", ";{P\"a;ris}"}}));
  EXPECT_EQ(json::parse(odd.calls[1].arguments), json({{"city", "Rome"}}));
  ParsedReply generic =
      ParseToolCalls(R"({"tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]})",
                     ToolCallFormat::kGeneric, tools);
  ASSERT_EQ(generic.calls.size(), 1U);
  // Text, unknown tools and broken calls stay text.
  for (const auto& [text, format] : std::vector<std::pair<std::string, ToolCallFormat>>{
           {"It is sunny.", ToolCallFormat::kHermes},
           {"<tool_call>\n{\"name\": \"nope\", \"arguments\": {}}\n</tool_call>",
            ToolCallFormat::kHermes},
           {"<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\n", ToolCallFormat::kHermes},
           {"{\"name\": \"get_weather\"", ToolCallFormat::kLlama3Json},
           {R"({"name": "get_weather", "parameters": {}} and more)", ToolCallFormat::kLlama3Json},
           {R"({"name": "get_weather", "parameters": {}};)", ToolCallFormat::kLlama3Json},
           {"{\"answer\": 1}", ToolCallFormat::kGeneric}}) {
    const ParsedReply reply = ParseToolCalls(text, format, tools);
    EXPECT_TRUE(reply.calls.empty()) << text;
    EXPECT_EQ(reply.content, text);
  }
}

TEST(Tools, TheDevTemplatesFormatsAreDetected) {
  EXPECT_EQ(DetectToolCallFormat("...<tool_call>\\n{\"name\": <function-name>...{% if tools %}"),
            ToolCallFormat::kHermes);
  EXPECT_EQ(DetectToolCallFormat(
                "{%- if tools is not none %}'Respond in the format {\"name\": function name, "
                "\"parameters\": dictionary of argument name and its value}.'"),
            ToolCallFormat::kLlama3Json);
  EXPECT_EQ(DetectToolCallFormat("{{ bos_token }}{% for message in messages %}"),
            ToolCallFormat::kGeneric);
}

TEST(Tools, TheGenericSchemeMergesTurnsForAlternatingTemplates) {
  const ToolsRequest tools = Weather();
  const ChatRequest round = ParseChatCompletionRequest(
      R"({"messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"W?"},
          {"role":"assistant","tool_calls":[{"id":"c1","type":"function",
           "function":{"name":"get_weather","arguments":"{\"city\":\"Paris\"}"}}]},
          {"role":"tool","tool_call_id":"c1","content":"18 C"},
          {"role":"tool","tool_call_id":"c2","content":"20 C"}]})",
      "m", {});
  const nlohmann::ordered_json messages =
      TemplateMessages(MessagesForTemplate(round.messages, tools, ToolCallFormat::kGeneric));
  ASSERT_EQ(messages.size(), 4U);  // system (tools + "Be brief."), user, assistant, user
  EXPECT_EQ(messages[0]["role"], "system");
  EXPECT_NE(messages[0]["content"].get<std::string>().find("get_weather"), std::string::npos);
  EXPECT_NE(messages[0]["content"].get<std::string>().find("Be brief."), std::string::npos);
  EXPECT_EQ(json::parse(messages[2]["content"].get<std::string>())["tool_calls"][0]["name"],
            "get_weather");
  EXPECT_EQ(messages[3]["role"], "user");
  EXPECT_NE(messages[3]["content"].get<std::string>().find("20 C"), std::string::npos);
  EXPECT_TRUE(ToolsVariable(tools, ToolCallFormat::kGeneric).is_null());
  EXPECT_EQ(ToolsVariable(tools, ToolCallFormat::kHermes).size(), 1U);
}

// Whether the tool constraint's grammar takes `reply` whole (the grammar engine's byte matcher).
bool Takes(const StructuredOutput& spec, std::string_view reply) {
  grammar::ByteMatcher matcher(std::make_shared<const grammar::FlatGrammar>(
      grammar::ParseGbnf(StructuredOutputToGbnf(spec))));
  return matcher.AcceptString(reply) && matcher.IsComplete();
}

TEST(Tools, EveryCallIsConstrainedAndAutoTextStaysFree) {
  EXPECT_FALSE(ToolCallConstraint(Weather(ToolChoice::Mode::kNone), ToolCallFormat::kHermes));
  const auto llama =
      ToolCallConstraint(Weather(ToolChoice::Mode::kRequired), ToolCallFormat::kLlama3Json);
  ASSERT_TRUE(llama);
  EXPECT_EQ(llama->kind, Kind::kJsonSchema);
  const json schema = json::parse(llama->source);
  EXPECT_EQ(schema["properties"]["name"]["const"], "get_weather");
  EXPECT_EQ(schema["properties"]["parameters"]["required"], json({"city"}));
  const auto qwen =
      ToolCallConstraint(Weather(ToolChoice::Mode::kRequired), ToolCallFormat::kHermes);
  ASSERT_TRUE(qwen);
  EXPECT_EQ(qwen->kind, Kind::kGrammar);
  const std::string paris =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n"
      "</tool_call>";
  EXPECT_TRUE(Takes(*qwen, paris));
  EXPECT_FALSE(Takes(*qwen, "It is sunny."));  // required: a call, not text

  // auto, Qwen3: text, then maybe calls; the text never holds "<tool_call>" unless a call
  // follows it, and the call's arguments follow the schema.
  const auto qwen_auto = ToolCallConstraint(Weather(), ToolCallFormat::kHermes);
  ASSERT_TRUE(qwen_auto);
  EXPECT_TRUE(Takes(*qwen_auto, "It is sunny in <b>Paris</b> <tool"));
  EXPECT_TRUE(Takes(*qwen_auto, "Let me check.\n" + paris + "\n" + paris));
  EXPECT_TRUE(Takes(*qwen_auto, "<think>\nweather\n</think>\n\n" + paris));
  EXPECT_FALSE(Takes(*qwen_auto, "a <tool_call> b"));
  EXPECT_FALSE(Takes(*qwen_auto,
                     "<tool_call>\n{\"name\": \"get_time\", \"arguments\": {}}\n"
                     "</tool_call>"));
  EXPECT_FALSE(Takes(*qwen_auto, paris + "\nand text after"));

  // auto, Llama 3.x and the generic scheme: the call as the whole reply, or text.
  for (const ToolCallFormat format : {ToolCallFormat::kLlama3Json, ToolCallFormat::kGeneric}) {
    const auto json_auto = ToolCallConstraint(Weather(), format);
    ASSERT_TRUE(json_auto);
    const char* key = format == ToolCallFormat::kLlama3Json ? "parameters" : "arguments";
    std::string call = fmt::format(R"({{"name": "get_weather", "{}": {{"city": "Oslo"}}}})", key);
    if (format == ToolCallFormat::kGeneric) call = R"({"tool_calls": [)" + call + "]}";
    EXPECT_TRUE(Takes(*json_auto, call));
    EXPECT_TRUE(Takes(*json_auto, "\n" + call));
    EXPECT_TRUE(Takes(*json_auto, "It is {probably} sunny."));
    EXPECT_TRUE(Takes(*json_auto, ""));
    EXPECT_FALSE(Takes(*json_auto, R"({"name": "get_weather", "args": {}})"));
    EXPECT_FALSE(Takes(*json_auto, " {not a call}"));
  }
}

OpenAiResponse ToolResponse(bool stream) {
  ChatRequest request =
      Chat(R"(,"tools":[)" + kWeather + "]" + (stream ? R"(,"stream":true)" : ""));
  request.tool_format = ToolCallFormat::kHermes;
  return OpenAiResponse(request, "chatcmpl-1", "m", 0, {{{1, 2}, ""}}, nullptr, false);
}

StepOutput Piece(std::string text, bool finished) {
  StepOutput output;
  output.request_id = OpenAiResponse::ChoiceRequestId("chatcmpl-1", 0);
  output.token_id = 7;
  output.text_delta = std::move(text);
  output.finished = finished;
  if (finished) output.finish_reason = FinishReason::kEos;
  return output;
}

TEST(Tools, TheResponseCarriesToolCallsWholeAndStreamed) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": "
      "\"Paris\"}}\n</tool_call>";
  OpenAiResponse whole = ToolResponse(false);
  whole.Add(Piece(call.substr(0, 20), false));
  whole.Add(Piece(call.substr(20), true));
  const json final = json::parse(whole.Final().dump());
  const json& choice = final["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_TRUE(choice["message"]["content"].is_null());
  const json& tool_call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(tool_call["type"], "function");
  EXPECT_EQ(tool_call["function"]["name"], "get_weather");
  EXPECT_EQ(json::parse(tool_call["function"]["arguments"].get<std::string>()),
            json({{"city", "Paris"}}));

  OpenAiResponse streamed = ToolResponse(true);
  EXPECT_EQ(streamed.Add(Piece(call.substr(0, 20), false)), "");  // held: it may be a call
  const std::string last = streamed.Add(Piece(call.substr(20), true));
  ASSERT_EQ(last.rfind("data: ", 0), 0U);
  const json chunk = json::parse(last.substr(6));
  EXPECT_EQ(chunk["choices"][0]["finish_reason"], "tool_calls");
  const json& delta = chunk["choices"][0]["delta"]["tool_calls"][0];
  EXPECT_EQ(delta["index"], 0);
  EXPECT_EQ(delta["function"]["name"], "get_weather");

  // Text that cannot start a call streams at once; from a '<' that may open one it waits.
  OpenAiResponse text = ToolResponse(true);
  const json first = json::parse(text.Add(Piece("It is <", false)).substr(6));
  EXPECT_EQ(first["choices"][0]["delta"]["content"], "It is ");
  const json plain = json::parse(text.Add(Piece("b>sunny</b>.", true)).substr(6));
  EXPECT_EQ(plain["choices"][0]["delta"]["content"], "<b>sunny</b>.");
  EXPECT_EQ(plain["choices"][0]["finish_reason"], "stop");
  // Text before a call streams; the call comes whole at the end.
  OpenAiResponse mixed = ToolResponse(true);
  const json lead =
      json::parse(mixed.Add(Piece("Checking.\n" + call.substr(0, 5), false)).substr(6));
  EXPECT_EQ(lead["choices"][0]["delta"]["content"], "Checking.\n");
  const json end = json::parse(mixed.Add(Piece(call.substr(5), true)).substr(6));
  EXPECT_FALSE(end["choices"][0]["delta"].contains("content"));
  EXPECT_EQ(end["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "get_weather");
  EXPECT_EQ(StreamableToolText("  {\"name\"", ToolCallFormat::kLlama3Json), 0U);
  EXPECT_EQ(StreamableToolText("Hello {", ToolCallFormat::kLlama3Json), 7U);
}

}  // namespace
}  // namespace infer::server
