#include "infer/engine/sampling_params.h"

#include <gtest/gtest.h>

#include <string>

#include "infer/core/error.h"

namespace infer {
namespace {

// Expects Validate() to throw a message containing `field` and `range`.
void ExpectInvalid(const SamplingParams& params, const std::string& field,
                   const std::string& range) {
  try {
    params.Validate();
    ADD_FAILURE() << "no error for " << field;
  } catch (const Error& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(field), std::string::npos) << message;
    EXPECT_NE(message.find(range), std::string::npos) << message;
  }
}

TEST(SamplingParamsTest, DefaultsAreValid) {
  SamplingParams params;
  EXPECT_NO_THROW(params.Validate());
  EXPECT_EQ(params.temperature, 1.0);
  EXPECT_EQ(params.top_p, 1.0);
  EXPECT_FALSE(params.top_k.has_value());
  EXPECT_EQ(params.repetition_penalty, 1.0);
  EXPECT_EQ(params.max_new_tokens, 128);
  EXPECT_TRUE(params.stop.empty());
  EXPECT_FALSE(params.seed.has_value());
}

TEST(SamplingParamsTest, InvalidValuesNameFieldAndRange) {
  SamplingParams params;
  params.temperature = -1.0;
  ExpectInvalid(params, "temperature", ">= 0");
  params = {};
  params.top_p = 0.0;
  ExpectInvalid(params, "top_p", "(0, 1]");
  params.top_p = 1.5;
  ExpectInvalid(params, "top_p", "(0, 1]");
  params = {};
  params.top_k = 0;
  ExpectInvalid(params, "top_k", ">= 1");
  params = {};
  params.repetition_penalty = 0.0;
  ExpectInvalid(params, "repetition_penalty", "> 0");
  params = {};
  params.max_new_tokens = 0;
  ExpectInvalid(params, "max_new_tokens", ">= 1");
  params = {};
  params.stop = {""};
  ExpectInvalid(params, "stop", "non-empty");
}

TEST(SamplingParamsTest, FromGenerationConfig) {
  GenerationConfig config;
  config.temperature = 0.6;
  config.top_p = 0.9;
  config.top_k = 64;
  config.do_sample = true;
  SamplingParams params = SamplingParamsFromGenerationConfig(config);
  EXPECT_EQ(params.temperature, 0.6);
  EXPECT_EQ(params.top_p, 0.9);
  EXPECT_EQ(params.top_k, 64);
  config.do_sample = false;
  config.top_k = 0;
  params = SamplingParamsFromGenerationConfig(config);
  EXPECT_EQ(params.temperature, 0.0);
  EXPECT_FALSE(params.top_k.has_value());
  EXPECT_EQ(SamplingParamsFromGenerationConfig({}).temperature, 1.0);
}

}  // namespace
}  // namespace infer
