// OpenAI's request bodies (fields, defaults, vLLM's extensions, refusals with the status and
// param OpenAI's clients read), the <think> splitting of vLLM's Qwen3 reasoning parser, and the
// response / chunk shapes of OpenAI's API reference, without a model or sockets.
#include "infer/server/openai_response.h"

#include <gtest/gtest.h>

#include "step_output_util.h"

namespace infer::server {
namespace {

using nlohmann::json;

// Compared as plain JSON (key order aside).
json Plain(const nlohmann::ordered_json& value) { return json::parse(value.dump()); }

ChatRequest Chat(const std::string& body, const SamplingParams& defaults = {}) {
  return ParseChatCompletionRequest(body, "m", defaults);
}

// The status and param a body is refused with ({200, ""} when accepted).
std::pair<int, std::string> Refusal(const std::string& body, bool chat = true) {
  try {
    if (chat) {
      Chat(body);
    } else {
      ParseOpenAiCompletionRequest(body, "m", {});
    }
  } catch (const RequestError& e) {
    return {e.status(), e.param()};
  }
  return {200, ""};
}

TEST(ChatRequest, ChatFieldsOverTheModelDefaults) {
  SamplingParams defaults;
  defaults.temperature = 0.6;
  defaults.top_p = 0.9;
  const ChatRequest plain = Chat(R"({"messages":[{"role":"user","content":"Hi"}]})", defaults);
  EXPECT_EQ(plain.model, "m");  // optional: the served model
  EXPECT_EQ(plain.params.temperature, 0.6);
  EXPECT_EQ(plain.params.top_p, 0.9);
  EXPECT_FALSE(plain.max_tokens.has_value());  // the rest of the context
  EXPECT_FALSE(plain.stream);
  EXPECT_EQ(plain.n, 1);
  EXPECT_FALSE(plain.params.logprobs.has_value());
  EXPECT_EQ(Plain(TemplateMessages(plain.messages)),
            json::parse(R"([{"role":"user","content":"Hi"}])"));

  const ChatRequest full = Chat(R"({"model":"m","messages":[{"role":"user","content":"Hi"}],
      "max_completion_tokens":9,"temperature":0,"top_p":0.5,"top_k":7,"repetition_penalty":1.1,
      "presence_penalty":0.5,"frequency_penalty":-0.5,"stop":"x","seed":3,"n":2,"stream":true,
      "stream_options":{"include_usage":true},"logprobs":true,"top_logprobs":4,"min_tokens":2,
      "ignore_eos":true,"logit_bias":{"17":-100},"chat_template_kwargs":{"enable_thinking":false},
      "return_token_ids":true,"priority":-3,"user":"u1","thinking_token_budget":5})");
  EXPECT_EQ(full.max_tokens, 9);
  EXPECT_EQ(full.params.temperature, 0.0);
  EXPECT_EQ(full.params.top_p, 0.5);
  EXPECT_EQ(full.params.top_k, 7);
  EXPECT_EQ(full.params.repetition_penalty, 1.1);
  EXPECT_EQ(full.params.presence_penalty, 0.5);
  EXPECT_EQ(full.params.frequency_penalty, -0.5);
  EXPECT_EQ(full.params.stop, std::vector<std::string>{"x"});
  EXPECT_EQ(full.params.seed, 3U);
  EXPECT_EQ(full.n, 2);
  EXPECT_TRUE(full.stream);
  EXPECT_TRUE(full.include_usage);
  EXPECT_EQ(full.params.logprobs, 4);
  EXPECT_EQ(full.params.min_tokens, 2);
  EXPECT_TRUE(full.params.ignore_eos);
  EXPECT_EQ(full.params.logit_bias.at(17), -100.0);
  EXPECT_EQ(full.chat_template_kwargs["enable_thinking"], false);
  EXPECT_TRUE(full.return_token_ids);
  EXPECT_EQ(full.priority, -3);
  EXPECT_EQ(full.params.thinking_token_budget, 5);
  EXPECT_TRUE(full.ignored_fields.empty());

  // A server default budget (--reasoning-budget), lifted by -1 and refused below it.
  defaults.thinking_token_budget = 64;
  EXPECT_EQ(Chat(R"({"messages":[{"role":"user","content":"Hi"}]})", defaults)
                .params.thinking_token_budget,
            64);
  EXPECT_FALSE(
      Chat(R"({"messages":[{"role":"user","content":"Hi"}],"thinking_token_budget":-1})", defaults)
          .params.thinking_token_budget.has_value());
  EXPECT_THROW(
      Chat(R"({"messages":[{"role":"user","content":"Hi"}],"thinking_token_budget":-2})", defaults),
      RequestError);
}

TEST(ChatRequest, ReasoningEffortTurnsQwen3sThinkingOnOrOff) {
  const std::string messages = R"("messages":[{"role":"user","content":"Hi"}])";
  const auto kwargs = [&](const std::string& extra) {
    return Plain(Chat("{" + messages + "," + extra + "}").chat_template_kwargs);
  };
  EXPECT_EQ(kwargs(R"("reasoning_effort":"none")"),
            json::parse(R"({"enable_thinking":false,"reasoning_effort":"none"})"));
  EXPECT_EQ(kwargs(R"("reasoning_effort":"high")"),
            json::parse(R"({"enable_thinking":true,"reasoning_effort":"high"})"));
  // The template's own variable wins.
  EXPECT_EQ(kwargs(R"("reasoning_effort":"low","chat_template_kwargs":{"enable_thinking":false})"),
            json::parse(R"({"enable_thinking":false,"reasoning_effort":"low"})"));
  EXPECT_EQ(Plain(Chat("{" + messages + R"(,"reasoning_effort":null})").chat_template_kwargs),
            json::object());
  EXPECT_THROW(Chat("{" + messages + R"(,"reasoning_effort":"max"})"), RequestError);
  EXPECT_THROW(Chat("{" + messages + R"(,"reasoning_effort":1})"), RequestError);
}

TEST(ChatRequest, MessagesContentPartsAndRoles) {
  const ChatRequest request = Chat(R"({"messages":[
      {"role":"developer","content":"Be brief."},
      {"role":"user","content":[{"type":"text","text":"a"},{"type":"text","text":"b"}],
       "name":"x"},
      {"role":"assistant","content":null},
      {"role":"user","content":"c"}]})");
  EXPECT_EQ(Plain(TemplateMessages(request.messages)),
            json::parse(R"([{"role":"system","content":"Be brief."},
      {"role":"user","content":"a\nb"},{"role":"assistant","content":""},
      {"role":"user","content":"c"}])"));
  EXPECT_EQ(Refusal(R"({"messages":[]})"), std::make_pair(400, std::string("messages")));
  EXPECT_EQ(Refusal(R"({"messages":[{"role":"user","content":[{"type":"image_url",
      "image_url":{"url":"x"}}]}]})")
                .first,
            400);
  EXPECT_EQ(Refusal(R"({"messages":[{"role":"tool","content":"1"}]})").first, 400);
  EXPECT_EQ(Refusal(R"({"messages":[{"role":"robot","content":"1"}]})").first, 400);
  EXPECT_EQ(Refusal(R"({"messages":[{"content":"1"}]})").first, 400);
}

TEST(ChatRequest, UnknownFieldsAreIgnoredAndOutputChangingOnesRefused) {
  const ChatRequest request =
      Chat(R"({"messages":[{"role":"user","content":"Hi"}],"foo":1,"bar":{"x":2},
          "response_format":{"type":"text"},"tools":[],"tool_choice":"none"})");
  EXPECT_EQ(request.ignored_fields, (std::vector<std::string>{"bar", "foo"}));
  const std::string messages = R"("messages":[{"role":"user","content":"Hi"}])";
  EXPECT_EQ(Refusal("{" + messages + R"(,"tools":[{"type":"function"}]})"),
            std::make_pair(400, std::string("tools")));
  EXPECT_EQ(Refusal("{" + messages + R"(,"response_format":{"type":"xml"}})"),
            std::make_pair(400, std::string("response_format")));
  EXPECT_EQ(Refusal("{" + messages + R"(,"guided_json":5})").first, 400);
  EXPECT_EQ(Refusal("{" + messages + R"(,"model":"other"})"),
            std::make_pair(404, std::string("model")));
  EXPECT_EQ(Refusal("{" + messages + R"(,"n":0})"), std::make_pair(400, std::string("n")));
  EXPECT_EQ(Refusal("{" + messages + R"(,"top_logprobs":2})").second, "top_logprobs");
  EXPECT_EQ(Refusal("{" + messages + R"(,"logprobs":true,"top_logprobs":21})").first, 400);
  EXPECT_EQ(Refusal("{" + messages + R"(,"logit_bias":{"a":1}})").first, 400);
  EXPECT_EQ(Refusal("{" + messages + R"(,"logit_bias":{"1":101}})").first, 400);
  EXPECT_EQ(Refusal("{" + messages + R"(,"presence_penalty":2.5})").first, 400);
  EXPECT_EQ(Refusal("{" + messages + R"(,"max_tokens":0})").second, "max_tokens");
  EXPECT_EQ(Refusal("{" + messages + R"(,"min_tokens":5,"max_tokens":4})").first, 400);
  EXPECT_EQ(Refusal("{" + messages + R"(,"stream":"yes"})").second, "stream");
  EXPECT_EQ(Refusal("[1]").first, 400);
  EXPECT_EQ(Refusal("{not json").first, 400);
}

TEST(ChatRequest, CompletionPromptsAndDefaults) {
  const auto parse = [](const std::string& body) {
    return ParseOpenAiCompletionRequest(body, "m", {});
  };
  const ChatRequest text = parse(R"({"prompt":"Hi","logprobs":2,"echo":false})");
  EXPECT_EQ(text.max_tokens, 16);  // OpenAI's completions default
  ASSERT_EQ(text.prompts.size(), 1U);
  EXPECT_EQ(std::get<std::string>(text.prompts[0]), "Hi");
  EXPECT_EQ(text.params.logprobs, 2);
  EXPECT_EQ(parse(R"({"prompt":["a","b"]})").prompts.size(), 2U);
  EXPECT_EQ(std::get<std::vector<int32_t>>(parse(R"({"prompt":[1,2]})").prompts[0]),
            (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(parse(R"({"prompt":[[1],[2,3]]})").prompts.size(), 2U);
  EXPECT_TRUE(parse(R"({"prompt":"x","echo":true})").echo);
  EXPECT_EQ(Refusal(R"({"prompt":"x","echo":true,"logprobs":1})", false).second, "echo");
  EXPECT_EQ(Refusal(R"({"prompt":""})", false).second, "prompt");
  EXPECT_EQ(Refusal(R"({"prompt":[]})", false).second, "prompt");
  EXPECT_EQ(Refusal(R"({"prompt":[-1]})", false).second, "prompt");
  EXPECT_EQ(Refusal(R"({"max_tokens":3})", false).second, "prompt");
  EXPECT_EQ(Refusal(R"({"prompt":"x","suffix":"y"})", false).second, "suffix");
}

TEST(ChatRequest, ErrorShape) {
  EXPECT_EQ(Plain(OpenAiErrorJson(400, "bad", "n")),
            json::parse(R"({"error":{"message":"bad","type":"invalid_request_error",
                "param":"n","code":400}})"));
  EXPECT_TRUE(OpenAiErrorJson(500, "x")["error"]["param"].is_null());
}

// Every way of cutting the text into two pieces gives the same split.
TEST(ReasoningSplitter, SplitsThinkTagsAcrossPieces) {
  const std::string text = "<think>\nabc < d</think>\n\nxyz";
  for (size_t cut = 0; cut <= text.size(); ++cut) {
    ReasoningSplitter splitter;
    std::string reasoning;
    std::string content;
    for (const auto& parts :
         {splitter.Feed(text.substr(0, cut)), splitter.Feed(text.substr(cut)), splitter.Finish()}) {
      reasoning += parts.reasoning;
      content += parts.content;
    }
    EXPECT_EQ(reasoning, "\nabc < d") << cut;
    EXPECT_EQ(content, "\n\nxyz") << cut;
  }
  ReasoningSplitter plain;
  EXPECT_EQ(plain.Feed("no tags <").content, "no tags ");
  EXPECT_EQ(plain.Finish().content, "<");
  ReasoningSplitter unfinished;
  EXPECT_EQ(unfinished.Feed("<think>still thinking").reasoning, "still thinking");
  EXPECT_EQ(unfinished.Finish().reasoning, "");
}

using testing::Output;

// The data lines of a stream, parsed.
std::vector<json> DataLines(const std::string& stream) {
  std::vector<json> lines;
  size_t start = 0;
  for (size_t end; (end = stream.find("\n\n", start)) != std::string::npos; start = end + 2) {
    const std::string line = stream.substr(start, end - start);
    EXPECT_EQ(line.rfind("data: ", 0), 0U) << line;
    lines.push_back(line == "data: [DONE]" ? json("[DONE]") : json::parse(line.substr(6)));
  }
  EXPECT_EQ(start, stream.size());
  return lines;
}

TEST(OpenAiResponse, ChatStreamWithTwoChoicesAndUsage) {
  ChatRequest request = Chat(R"({"messages":[{"role":"user","content":"Hi"}],"n":2,
      "stream":true,"stream_options":{"include_usage":true}})");
  OpenAiResponse response(request, "chatcmpl-7", "m", 1700000000, {{{1, 2, 3}, ""}}, nullptr,
                          /*reasoning=*/true);
  const std::string id0 = OpenAiResponse::ChoiceRequestId("chatcmpl-7", 0);
  const std::string id1 = OpenAiResponse::ChoiceRequestId("chatcmpl-7", 1);
  // Choice 0 found 2 prompt tokens in the prefix cache, choice 1 one: the prompt's usage says 1.
  const auto cached = [](StepOutput output, int64_t tokens) {
    output.cached_tokens = tokens;
    return output;
  };
  std::string stream = response.StreamStart();
  stream += response.Add(cached(Output(id1, 5, "<think>hm", 1), 1));
  stream += response.Add(cached(Output(id0, 6, "Hel", 1), 2));
  stream += response.Add(cached(Output(id0, 7, "lo", 2, FinishReason::kEos), 2));
  EXPECT_FALSE(response.finished());
  stream += response.Add(cached(Output(id1, 8, "</think>ok", 2, FinishReason::kLength), 1));
  EXPECT_TRUE(response.finished());
  stream += response.StreamEnd();
  const std::vector<json> lines = DataLines(stream);
  ASSERT_EQ(lines.size(), 2U + 4U + 2U);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(lines[i]["object"], "chat.completion.chunk");
    EXPECT_EQ(lines[i]["id"], "chatcmpl-7");
    EXPECT_EQ(lines[i]["created"], 1700000000);
    EXPECT_EQ(lines[i]["choices"][0]["index"], i);
    EXPECT_EQ(lines[i]["choices"][0]["delta"]["role"], "assistant");
  }
  EXPECT_EQ(lines[2]["choices"][0]["delta"], json::parse(R"({"reasoning_content":"hm"})"));
  EXPECT_EQ(lines[3]["choices"][0]["delta"], json::parse(R"({"content":"Hel"})"));
  EXPECT_TRUE(lines[3]["choices"][0]["finish_reason"].is_null());
  EXPECT_EQ(lines[4]["choices"][0]["finish_reason"], "stop");  // EOS is "stop"
  EXPECT_EQ(lines[5]["choices"][0]["delta"], json::parse(R"({"content":"ok"})"));
  EXPECT_EQ(lines[5]["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(lines[6]["choices"], json::array());
  EXPECT_EQ(lines[6]["usage"],
            json::parse(R"({"prompt_tokens":3,"completion_tokens":4,"total_tokens":7,
                "prompt_tokens_details":{"cached_tokens":1},
                "completion_tokens_details":{"reasoning_tokens":1}})"));
  EXPECT_EQ(lines[7], "[DONE]");

  const json final = response.Final();
  EXPECT_EQ(final["object"], "chat.completion");
  EXPECT_EQ(final["choices"][0]["message"],
            json::parse(R"({"role":"assistant","content":"Hello","reasoning_content":null})"));
  EXPECT_EQ(final["choices"][1]["message"],
            json::parse(R"({"role":"assistant","content":"ok","reasoning_content":"hm"})"));
}

TEST(OpenAiResponse, CompletionWithEchoTokenIdsAndAnError) {
  const ChatRequest request = ParseOpenAiCompletionRequest(
      R"({"prompt":"Say","echo":true,"return_token_ids":true})", "m", {});
  OpenAiResponse response(request, "cmpl-1", "m", 1, {{{9, 10}, "Say"}}, nullptr, false);
  const std::string id = OpenAiResponse::ChoiceRequestId("cmpl-1", 0);
  response.Add(Output(id, 4, " it", 1));
  response.Add(Output(id, 5, "", 2, FinishReason::kStop));
  const json final = response.Final();
  EXPECT_EQ(final["object"], "text_completion");
  EXPECT_EQ(final["choices"][0]["text"], "Say it");
  EXPECT_EQ(final["choices"][0]["token_ids"], json::parse("[4,5]"));
  EXPECT_EQ(final["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(final["prompt_token_ids"], json::parse("[9,10]"));
  EXPECT_FALSE(response.error().has_value());

  ChatRequest streaming = request;
  streaming.stream = true;
  OpenAiResponse failing(streaming, "cmpl-2", "m", 1, {{{9}, "Say"}}, nullptr, false);
  StepOutput error;
  error.request_id = OpenAiResponse::ChoiceRequestId("cmpl-2", 0);
  error.finished = true;
  error.error = "engine step failed";
  const std::vector<json> lines = DataLines(failing.Add(error));
  ASSERT_EQ(lines.size(), 1U);
  EXPECT_EQ(lines[0]["error"]["message"], "engine step failed");
  EXPECT_TRUE(failing.finished());
  EXPECT_EQ(failing.error(), "engine step failed");
  // Outputs of other requests are not this response's.
  EXPECT_EQ(failing.Add(Output("cmpl-9-0", 1, "x", 1)), "");
}

}  // namespace
}  // namespace infer::server
