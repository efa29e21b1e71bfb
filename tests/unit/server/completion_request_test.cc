// The completions request body: every field's type and range rule with the status the seed
// gives it (400 malformed, 422 invalid or unsupported), and the values that reach the sampler.
#include "infer/server/completion_request.h"

#include <gtest/gtest.h>

namespace infer::server {
namespace {

int StatusOf(const std::string& body) {
  try {
    ParseCompletionRequest(body, "m");
  } catch (const RequestError& e) {
    return e.status();
  }
  return 200;
}

TEST(CompletionRequest, DefaultsAndAllFields) {
  const ChatRequest plain = ParseCompletionRequest(R"({"model":"m","prompt":"Hi"})", "m");
  EXPECT_EQ(std::get<std::string>(plain.prompts.at(0)), "Hi");
  EXPECT_EQ(plain.params.max_new_tokens, 128);
  EXPECT_EQ(plain.params.temperature, 1.0);
  EXPECT_EQ(plain.params.top_p, 1.0);
  EXPECT_FALSE(plain.params.top_k.has_value());
  EXPECT_EQ(plain.params.repetition_penalty, 1.0);
  EXPECT_TRUE(plain.params.stop.empty());
  EXPECT_FALSE(plain.params.seed.has_value());
  EXPECT_TRUE(plain.stream);

  const ChatRequest full = ParseCompletionRequest(
      R"({"model":"m","prompt":[1,2,3],"max_tokens":7,"temperature":0.5,"top_p":0.9,"top_k":40,
          "repetition_penalty":1.2,"stream":false,"stop":["a","bc"],"seed":11})",
      "m");
  EXPECT_EQ(std::get<std::vector<int32_t>>(full.prompts.at(0)), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(full.params.max_new_tokens, 7);
  EXPECT_EQ(full.params.temperature, 0.5);
  EXPECT_EQ(full.params.top_p, 0.9);
  EXPECT_EQ(full.params.top_k, 40);
  EXPECT_EQ(full.params.repetition_penalty, 1.2);
  EXPECT_EQ(full.params.stop, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(full.params.seed, 11U);
  EXPECT_FALSE(full.stream);
}

TEST(CompletionRequest, StopStringNullsAndTopKOff) {
  const auto request = ParseCompletionRequest(
      R"({"model":"m","prompt":"x","stop":"END","seed":null,"top_k":-1,"max_tokens":16.0})", "m");
  EXPECT_EQ(request.params.stop, (std::vector<std::string>{"END"}));
  EXPECT_FALSE(request.params.seed.has_value());
  EXPECT_FALSE(request.params.top_k.has_value());
  EXPECT_EQ(request.params.max_new_tokens, 16);
  EXPECT_FALSE(ParseCompletionRequest(R"({"model":"m","prompt":"x","top_k":0})", "m")
                   .params.top_k.has_value());
}

TEST(CompletionRequest, MalformedIs400) {
  for (const char* body : {
           "",
           "{",
           "not json",
           "[1,2]",
           "\"text\"",
           R"({"prompt":"x"})",                               // no model
           R"({"model":"m"})",                                // no prompt
           R"({"model":7,"prompt":"x"})",                     // model not a string
           R"({"model":"m","prompt":""})",                    // empty prompt
           R"({"model":"m","prompt":[]})",                    // empty id list
           R"({"model":"m","prompt":["a","b"]})",             // list of strings
           R"({"model":"m","prompt":[1,2.5]})",               // non-integer id
           R"({"model":"m","prompt":{"a":1}})",               // object
           R"({"model":"m","prompt":"x","max_tokens":"8"})",  // wrong types...
           R"({"model":"m","prompt":"x","max_tokens":1.5})",
           R"({"model":"m","prompt":"x","temperature":"hot"})",
           R"({"model":"m","prompt":"x","temperature":true})",
           R"({"model":"m","prompt":"x","top_p":[1]})",
           R"({"model":"m","prompt":"x","top_k":2.5})",
           R"({"model":"m","prompt":"x","stream":"yes"})",
           R"({"model":"m","prompt":"x","stop":5})",
           R"({"model":"m","prompt":"x","stop":["a",1]})",
           R"({"model":"m","prompt":"x","seed":"7"})",
       }) {
    EXPECT_EQ(StatusOf(body), 400) << body;
  }
}

TEST(CompletionRequest, InvalidValuesAre422) {
  for (const char* body : {
           R"({"model":"other","prompt":"x"})",          // another model
           R"({"model":"m","prompt":"x","foo":"bar"})",  // unknown field
           R"({"model":"m","prompt":"x","n":2})",
           R"({"model":"m","prompt":"x","max_tokens":0})",
           R"({"model":"m","prompt":"x","max_tokens":-5})",
           R"({"model":"m","prompt":"x","temperature":-1.0})",
           R"({"model":"m","prompt":"x","top_p":0})",
           R"({"model":"m","prompt":"x","top_p":1.5})",
           R"({"model":"m","prompt":"x","top_k":-2})",
           R"({"model":"m","prompt":"x","repetition_penalty":0})",
           R"({"model":"m","prompt":"x","stop":[""]})",
           R"({"model":"m","prompt":"x","seed":-1})",
           R"({"model":"m","prompt":[1,-3]})",
           R"({"model":"m","prompt":[1,99999999999]})",
       }) {
    EXPECT_EQ(StatusOf(body), 422) << body;
  }
}

TEST(CompletionRequest, MessagesNameTheField) {
  try {
    ParseCompletionRequest(R"({"model":"m","prompt":"x","temperature":-1})", "m");
    FAIL() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
  try {
    ParseCompletionRequest(R"({"model":"m","prompt":"x","best_of":2})", "m");
    FAIL() << "accepted";
  } catch (const RequestError& e) {
    EXPECT_NE(std::string(e.what()).find("best_of"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace infer::server
