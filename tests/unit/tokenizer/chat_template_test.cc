// Chat renderings must be byte-identical to transformers' apply_chat_template for every fixture
// conversation (tests/fixtures/tokenizer/chat_<model>.jsonl); error cases must raise.
#include "infer/tokenizer/chat_template.h"

#include <gtest/gtest.h>

#include "infer/tokenizer/jinja/interpreter.h"
#include "infer/tokenizer/tokenizer.h"
#include "tokenizer_test_util.h"

namespace infer {
namespace {

class TokenizerChatTest : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerChatTest, RenderingsMatchTransformers) {
  const std::string model = GetParam();
  if (!testing::RequireRealTokenizer(model)) return;
  const auto dir = testing::RealTokenizerDir(model);
  auto chat_template = ChatTemplate::FromModelDir(dir);
  auto tokenizer = Tokenizer::FromModelDir(dir);
  const auto cases = testing::ReadJsonLines(testing::TokenizerFixture("chat_" + model + ".jsonl"));
  ASSERT_GE(cases.size(), 10u);
  for (const auto& c : cases) {
    const auto options = c.contains("options") ? c["options"] : nlohmann::ordered_json::object();
    if (c.contains("error")) {
      EXPECT_THROW(chat_template->Render(c["messages"], options), Error) << c["name"];
      continue;
    }
    const std::string rendered = chat_template->Render(c["messages"], options);
    EXPECT_EQ(rendered, c["rendered"].get<std::string>()) << c["name"];
    if (c.contains("ids")) {
      EXPECT_EQ(tokenizer->Encode(rendered, false), c["ids"].get<std::vector<int32_t>>())
          << c["name"];
    }
  }
}

// Tools, tool calls, reasoning, content parts and raise_exception cases rendered by Jinja2
// (tests/fixtures/tokenizer/extra/generate_references.py).
TEST_P(TokenizerChatTest, ExtraRenderingsMatchJinja2) {
  const std::string model = GetParam();
  if (!testing::RequireRealTokenizer(model)) return;
  auto chat_template = ChatTemplate::FromModelDir(testing::RealTokenizerDir(model));
  const auto cases =
      testing::ReadJsonLines(testing::TokenizerFixture("extra/chat_extra_" + model + ".jsonl"));
  ASSERT_GE(cases.size(), 5u);
  for (const auto& c : cases) {
    SCOPED_TRACE(c["name"].get<std::string>());
    if (c.contains("error")) {
      EXPECT_THROW(chat_template->Render(c["messages"], c["options"]), Error);
      continue;
    }
    try {
      EXPECT_EQ(chat_template->Render(c["messages"], c["options"]),
                c["rendered"].get<std::string>());
    } catch (const Error& e) {
      ADD_FAILURE() << "threw: " << e.what();
    }
  }
}

TEST(TokenizerChatTemplateTest, MissingTemplateIsAOneLineError) {
  const auto dir = std::filesystem::temp_directory_path() / "infer_chat_template_missing";
  std::filesystem::create_directories(dir);
  try {
    ChatTemplate::FromModelDir(dir);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("no chat template"), std::string::npos) << e.what();
    EXPECT_EQ(std::string(e.what()).find('\n'), std::string::npos);
  }
}

INSTANTIATE_TEST_SUITE_P(Models, TokenizerChatTest, ::testing::Values("llama3", "qwen3", "gemma3"));

}  // namespace
}  // namespace infer
