// The engine: the runner with scripted models (EOS, length, errors, cancel, token budget), the
// engine thread, the seed-004 request API, and on the fixture models bit-identical outputs
// whether a request runs alone, in a batch, split into prefill chunks, after a prefix-cache hit
// or after being preempted and recomputed, in both matmul precisions and both KV dtypes.
#include "infer/engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include "infer/core/error.h"
#include "infer/engine/decoder_model.h"
#include "infer/engine/generate.h"
#include "infer/engine/runner.h"
#include "infer/engine/structured.h"
#include "infer/grammar/structured_output.h"
#include "infer/kernels/cpu/isa.h"
#include "mock_model.h"
#include "testing/paths.h"

namespace infer {
namespace {

using std::chrono::milliseconds;

EngineConfig TestConfig(int64_t max_num_seqs = 8) {
  EngineConfig config;
  config.max_num_seqs = max_num_seqs;
  config.batch_wait_timeout_s = 0.0;
  return config;
}

SamplingParams Params(int64_t max_new_tokens, double temperature = 0.0) {
  SamplingParams params;
  params.max_new_tokens = max_new_tokens;
  params.temperature = temperature;
  return params;
}

// Every output of a request until it finishes (bounded wait).
std::vector<StepOutput> Drain(OutputChannel& channel) {
  std::vector<StepOutput> outputs;
  while (outputs.empty() || !outputs.back().finished) {
    auto output = channel.Pop(milliseconds(20000));
    if (!output) {
      ADD_FAILURE() << "timed out waiting for an output";
      break;
    }
    outputs.push_back(std::move(*output));
  }
  return outputs;
}

std::vector<int32_t> TokenIds(const std::vector<StepOutput>& outputs) {
  std::vector<int32_t> ids;
  for (const StepOutput& output : outputs) {
    if (output.token_id) ids.push_back(*output.token_id);
  }
  return ids;
}

// A model whose batched call fails on demand.
class FailingModel : public testing::ScriptedModel {
 public:
  FailingModel() : ScriptedModel(32, {5, 6, 7, 8}) {}
  void Forward(std::span<const SequenceStep> steps, std::vector<float>& logits) override {
    if (fail_next) {
      fail_next = false;
      throw Error("out of memory allocating the KV cache");
    }
    ScriptedModel::Forward(steps, logits);
  }
  bool fail_next = false;
};

TEST(EngineTest, StepsABatchToCompletionWithEosAndLength) {
  testing::ScriptedModel model(32, {5, 6, 9, 7});
  Engine engine(TestConfig(), model, nullptr, {9});
  auto eos = engine.AddRequest("eos", {1, 2, 3}, Params(10));
  auto length = engine.AddRequest("length", {1, 2, 3, 4, 5}, Params(2));
  ASSERT_TRUE(eos && length);
  int steps = 0;
  std::vector<std::string> ended;
  for (; engine.HasWork() && steps < 100; ++steps) {
    for (const GenerationOutput& output : engine.Step()) ended.push_back(output.request_id);
  }
  EXPECT_EQ(steps, 3);  // prefill + 2 decodes
  EXPECT_EQ(ended, (std::vector<std::string>{"length", "eos"}));
  const auto eos_out = Drain(*eos);
  EXPECT_EQ(TokenIds(eos_out), (std::vector<int32_t>{5, 6, 9}));
  EXPECT_EQ(eos_out.back().finish_reason, FinishReason::kEos);
  EXPECT_EQ(eos_out.back().prompt_tokens, 3);
  EXPECT_EQ(eos_out.back().completion_tokens, 3);
  const auto length_out = Drain(*length);
  EXPECT_EQ(TokenIds(length_out), (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(length_out.back().finish_reason, FinishReason::kLength);
}

// vLLM's min_tokens (EOS cannot be sampled before it) and ignore_eos (EOS does not end the
// request), and requests sharing one output channel (the n choices of an OpenAI request).
TEST(EngineTest, MinTokensIgnoreEosAndASharedChannel) {
  testing::ScriptedModel model(32, {9, 9, 5, 9});
  Engine engine(TestConfig(), model, nullptr, {9});
  auto channel = std::make_shared<OutputChannel>();
  SamplingParams min_tokens = Params(10);
  min_tokens.min_tokens = 2;
  SamplingParams ignore_eos = Params(4);
  ignore_eos.ignore_eos = true;
  ASSERT_EQ(engine.AddRequest("min", {1, 2}, min_tokens, 0, channel), channel);
  ASSERT_EQ(engine.AddRequest("ignore", {1, 2, 3}, ignore_eos, 0, channel), channel);
  for (int steps = 0; engine.HasWork() && steps < 100; ++steps) engine.Step();
  std::map<std::string, std::vector<StepOutput>> by_request;
  while (auto output = channel->Pop(milliseconds(0))) {
    by_request[output->request_id].push_back(std::move(*output));
  }
  // EOS (certain in the script) is masked for the first two tokens: the argmax of the rest is
  // token 0; then the script's 5, then its EOS ends the request.
  EXPECT_EQ(TokenIds(by_request["min"]), (std::vector<int32_t>{0, 0, 5, 9}));
  EXPECT_EQ(by_request["min"].back().finish_reason, FinishReason::kEos);
  EXPECT_EQ(TokenIds(by_request["ignore"]), (std::vector<int32_t>{9, 9, 5, 9}));
  EXPECT_EQ(by_request["ignore"].back().finish_reason, FinishReason::kLength);
}

TEST(EngineTest, RejectsPastTheQueueBoundAndInvalidPrompts) {
  testing::ScriptedModel model(32, {5});
  EngineConfig config = TestConfig();
  config.max_waiting_requests = 1;
  config.max_model_len = 8;
  Engine engine(config, model, nullptr, {});
  EXPECT_NE(engine.AddRequest("a", {1}, Params(1)), nullptr);
  EXPECT_EQ(engine.AddRequest("b", {1}, Params(1)), nullptr);
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{1, 2, 3}, Params(6)), Error);
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{}, Params(1)), Error);
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{99}, Params(1)), Error);
  EXPECT_THROW(engine.PreparePrompt(std::string("hi"), Params(1)), Error);  // no tokenizer
  EXPECT_THROW(engine.PreparePrompt(std::vector<int32_t>{1}, Params(1, -1.0)), Error);
  EXPECT_EQ(engine.PreparePrompt(std::vector<int32_t>{1, 2}, Params(6)),
            (std::vector<int32_t>{1, 2}));
}

TEST(EngineTest, AFailedStepFailsItsRequestsAndTheEngineGoesOn) {
  FailingModel model;
  Engine engine(TestConfig(), model, nullptr, {});
  auto first = engine.AddRequest("a", {1, 2}, Params(3));
  model.fail_next = true;
  while (engine.HasWork()) engine.Step();
  const auto failed = Drain(*first);
  ASSERT_TRUE(failed.back().error.has_value());
  EXPECT_NE(failed.back().error->find("out of memory"), std::string::npos);
  auto second = engine.AddRequest("b", {1, 2}, Params(3));
  while (engine.HasWork()) engine.Step();
  EXPECT_EQ(TokenIds(Drain(*second)), (std::vector<int32_t>{5, 6, 7}));
}

TEST(EngineTest, CancelFreesTheSlotAtTheNextStep) {
  testing::ScriptedModel model(32, {5});
  Engine engine(TestConfig(), model, nullptr, {});
  auto kept = engine.AddRequest("kept", {1}, Params(3));
  auto gone = engine.AddRequest("gone", {1}, Params(1000));
  engine.Step();  // prefill
  engine.Cancel("gone");
  while (engine.HasWork()) engine.Step();
  EXPECT_EQ(TokenIds(Drain(*kept)).size(), 3U);
  const auto cancelled = Drain(*gone);
  EXPECT_EQ(TokenIds(cancelled).size(), 1U);  // only the prefill token was generated
  EXPECT_TRUE(cancelled.back().error.has_value());
}

TEST(EngineTest, EngineThreadServesAndStopFailsInFlightRequests) {
  testing::ScriptedModel model(32, {5}, 1 << 22);
  EngineConfig config = TestConfig(2);
  config.max_model_len = 1 << 21;
  Engine engine(config, model, nullptr, {});
  engine.Start();
  auto quick = engine.AddRequest("quick", {1}, Params(4));
  EXPECT_EQ(TokenIds(Drain(*quick)).size(), 4U);
  auto endless = engine.AddRequest("endless", {1}, Params(1'000'000));
  ASSERT_TRUE(endless->Pop(milliseconds(20000)).has_value());  // it is running
  engine.Stop();
  const auto rest = Drain(*endless);
  ASSERT_TRUE(rest.back().error.has_value());
  EXPECT_EQ(*rest.back().error, "server shutting down");
  EXPECT_EQ(engine.AddRequest("late", {1}, Params(1)), nullptr);
}

TEST(EngineTest, StepsRunAtMostMaxNumBatchedTokensMixingDecodeAndPrefill) {
  testing::ScriptedModel model(32, {5});
  EngineConfig config = TestConfig();
  config.max_num_batched_tokens = 4;
  Engine engine(config, model, nullptr, {});
  const std::vector<std::vector<int32_t>> prompts = {
      {1, 2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}, {1}, {1, 2, 3, 4, 5}};
  std::vector<std::shared_ptr<OutputChannel>> outputs;
  for (size_t i = 0; i < prompts.size(); ++i) {
    outputs.push_back(engine.AddRequest(std::to_string(i), prompts[i], Params(2)));
  }
  while (engine.HasWork()) engine.Step();
  for (const auto& output : outputs) EXPECT_EQ(TokenIds(Drain(*output)).size(), 2U);
  int64_t total = 0;
  bool mixed = false;
  for (const auto& call : model.calls()) {
    int64_t tokens = 0;
    bool decode = false, prefill = false;
    for (const auto& [seq_id, num_new] : call) {
      tokens += num_new;
      (num_new == 1 ? decode : prefill) = true;
    }
    EXPECT_LE(tokens, 4);
    total += tokens;
    mixed = mixed || (decode && prefill);
  }
  EXPECT_EQ(total, 3 + 9 + 1 + 5 + 4);  // every prompt token once, then one decode each
  EXPECT_TRUE(mixed);                   // a decode token rode along a prefill chunk
  // The first step: the 3-token prompt and the first token of the 9-token one.
  EXPECT_EQ(model.calls().front(), (std::vector<std::pair<int64_t, int64_t>>{{0, 3}, {1, 1}}));
}

// Speculative decoding with a scripted model whose output repeats: n-gram drafts are checked
// in one step each, and every kept token is the model's own. The counts below follow from the
// script by hand (see the comments).
TEST(EngineTest, SpeculativeDecodingChecksNgramDraftsInOneStep) {
  const std::vector<int32_t> prompt = {1, 2, 3, 5, 6, 7, 8};
  const std::vector<int32_t> script = {5, 6, 7, 8, 5, 6, 4, 9};
  EngineConfig config = TestConfig();
  config.speculative = {3, 1, 2};
  {
    testing::ScriptedModel model(32, script);
    Engine engine(config, model, nullptr, {9});
    auto channel = engine.AddRequest("r", prompt, Params(20));
    while (engine.HasWork()) engine.Step();
    const auto outputs = Drain(*channel);
    EXPECT_EQ(TokenIds(outputs), (std::vector<int32_t>{5, 6, 7, 8, 5, 6, 4, 9}));
    EXPECT_EQ(outputs.back().finish_reason, FinishReason::kEos);
    EXPECT_EQ(outputs.back().completion_tokens, 8);
    // Prefill draws 5; "5" occurred after 3, so 6 7 8 is the draft. Its check (4 tokens) keeps
    // all three and draws 5; "8 5" occurred before, the draft is 6 7 8 again: 6 stands, the
    // draw after it is 4, so 7 8 are refused. Nothing repeats "6 4": one token, then EOS.
    EXPECT_EQ(model.num_new_calls(), (std::vector<int64_t>{7, 4, 4, 1}));
    const EngineMetrics metrics = engine.metrics();
    EXPECT_EQ(metrics.spec_decode_num_drafts, 2);
    EXPECT_EQ(metrics.spec_decode_num_draft_tokens, 6);
    EXPECT_EQ(metrics.spec_decode_num_accepted_tokens, 4);
    EXPECT_EQ(metrics.generation_tokens, 8);
  }
  {
    // max_tokens bounds the draft: after 5 of 6 tokens there is no room for one.
    testing::ScriptedModel model(32, script);
    Engine engine(config, model, nullptr, {9});
    auto channel = engine.AddRequest("r", prompt, Params(6));
    while (engine.HasWork()) engine.Step();
    const auto outputs = Drain(*channel);
    EXPECT_EQ(TokenIds(outputs), (std::vector<int32_t>{5, 6, 7, 8, 5, 6}));
    EXPECT_EQ(outputs.back().finish_reason, FinishReason::kLength);
    EXPECT_EQ(model.num_new_calls(), (std::vector<int64_t>{7, 4, 1}));
  }
  {
    // A token budget of 2 per step leaves room for one draft token only.
    EngineConfig tight = config;
    tight.max_num_batched_tokens = 2;
    testing::ScriptedModel model(32, script);
    Engine engine(tight, model, nullptr, {9});
    auto channel = engine.AddRequest("r", prompt, Params(20));
    while (engine.HasWork()) engine.Step();
    EXPECT_EQ(TokenIds(Drain(*channel)), (std::vector<int32_t>{5, 6, 7, 8, 5, 6, 4, 9}));
    for (const int64_t num_new : model.num_new_calls()) EXPECT_LE(num_new, 2);
    EXPECT_GT(engine.metrics().spec_decode_num_accepted_tokens, 0);
  }
}

TEST(EngineTest, StaticBatchPrefillsAsOneUnitAndDeliversFirstTokensTogether) {
  testing::ScriptedModel model(32, {5, 6});
  EngineConfig config = TestConfig();
  config.batching_mode = BatchingMode::kStatic;
  config.max_num_batched_tokens = 4;
  Engine engine(config, model, nullptr, {});
  auto short_one = engine.AddRequest("short", {1, 2, 3}, Params(2));
  auto long_one = engine.AddRequest("long", {1, 2, 3, 4, 5, 6, 7, 8, 9}, Params(2));
  engine.Step();
  // Three calls of at most 4 tokens ran the 12 prompt tokens; both first tokens came at once.
  EXPECT_EQ(model.calls().size(), 3U);
  EXPECT_TRUE(short_one->Pop(milliseconds(0)).has_value());
  EXPECT_TRUE(long_one->Pop(milliseconds(0)).has_value());
  engine.Step();  // one decode step for the batch
  EXPECT_EQ(model.calls().back(), (std::vector<std::pair<int64_t, int64_t>>{{0, 1}, {1, 1}}));
  EXPECT_FALSE(engine.HasWork());
}

// A step over the runner's call size: consecutive calls, each sequence split in position order,
// the rows a sequence wants (a draft's check wants several) kept in one call, the same logits.
TEST(EngineTest, RunnerSplitsALongStepIntoCallsKeepingEachSequencesRowsTogether) {
  const auto make = [](const std::string& id, int64_t seq_id, int64_t prompt, int64_t computed,
                       std::vector<int32_t> draft) {
    auto request =
        std::make_shared<Request>(id, std::vector<int32_t>(prompt, 3), Params(4), 0.0, nullptr, 0);
    request->seq_id = seq_id;
    request->num_computed_tokens = computed;
    request->draft_token_ids = std::move(draft);
    return request;
  };
  SchedulerOutput step;
  step.scheduled.push_back({make("a", 0, 3, 0, {}), 3, true});
  step.scheduled.push_back({make("b", 1, 6, 5, {4, 5, 6}), 4, true});  // 1 + 3 draft rows
  step.scheduled.push_back({make("c", 2, 9, 0, {}), 9, true});
  step.scheduled.push_back({make("d", 3, 8, 0, {}), 3, false});  // a prompt chunk, no rows
  testing::ScriptedModel whole_model(32, {5, 6});
  testing::ScriptedModel split_model(32, {5, 6});
  ModelRunner whole(whole_model, 100);
  ModelRunner split(split_model, 4);
  const std::span<float> want = whole.Run(step);
  const std::vector<float> expected(want.begin(), want.end());
  const std::span<float> got = split.Run(step);
  EXPECT_EQ(expected.size(), 32U * 6);
  EXPECT_EQ(std::vector<float>(got.begin(), got.end()), expected);
  EXPECT_EQ(whole_model.calls().size(), 1U);
  using Call = std::vector<std::pair<int64_t, int64_t>>;
  EXPECT_EQ(split_model.calls(),
            (std::vector<Call>{{{0, 3}}, {{1, 4}}, {{2, 4}}, {{2, 4}}, {{2, 1}, {3, 3}}}));
}

TEST(EngineTest, BuilderRequestsAndGenerate) {
  testing::ScriptedModel model(32, {5, 6, 7});
  EngineConfig config = TestConfig();
  config.scheduler_policy = SchedulerPolicy::kPriority;
  config.max_num_seqs = 1;
  Engine engine(config, model, nullptr, {7});
  const std::string low = engine.AddRequest(GenerationRequest(std::vector<int32_t>{1, 2})
                                                .max_tokens(10)
                                                .temperature(0.7)
                                                .top_k(5)
                                                .top_p(0.9)
                                                .seed(3)
                                                .priority(5));
  const std::string high =
      engine.AddRequest(GenerationRequest(std::vector<int32_t>{3}).max_tokens(2).priority(0));
  const std::vector<GenerationOutput> outputs = engine.Generate();
  ASSERT_EQ(outputs.size(), 2U);
  EXPECT_EQ(outputs[0].request_id, high);  // priority 0 runs first, one sequence at a time
  EXPECT_EQ(outputs[0].token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(outputs[0].finish_reason, FinishReason::kLength);
  EXPECT_EQ(outputs[1].request_id, low);
  EXPECT_EQ(outputs[1].token_ids, (std::vector<int32_t>{5, 6, 7}));
  EXPECT_EQ(outputs[1].finish_reason, FinishReason::kEos);
  EXPECT_EQ(outputs[1].prompt_token_ids, (std::vector<int32_t>{1, 2}));
  EXPECT_EQ(outputs[1].total_tokens, 5);
  EXPECT_THROW(engine.AddRequest(GenerationRequest(std::vector<int32_t>{}).max_tokens(1)), Error);
}

// The fixture models (bf16 weights) in both matmul precisions: in bf16 a last-bit difference
// between batched and single rows would flip roundings, so equality there shows the kernels
// are batch-invariant, not merely close.
using FixtureParam = std::tuple<std::string, kernels::MatMulPrecision, DType>;

class EngineFixtureTest : public ::testing::TestWithParam<FixtureParam> {
 protected:
  void SetUp() override {
    const auto& [arch, precision, kv_dtype] = GetParam();
    const std::string dir = std::string(::infer::testing::FixturesDir()) + "/models/" + arch;
    loaded_ = std::make_unique<LoadedModel>(LoadModel(dir + "/model", LoadOptions{}));
    model_ = MakeDecoderModel(*loaded_, pool_, precision);
  }

  EngineConfig Config(int64_t max_num_seqs) const {
    EngineConfig config = TestConfig(max_num_seqs);
    config.kv_cache_dtype = std::get<2>(GetParam());
    config.num_blocks = 64;
    return config;
  }

  // Adds every request, steps the engine until all end, returns every request's tokens.
  static std::vector<std::vector<int32_t>> RunAll(Engine& engine,
                                                  const std::vector<std::vector<int32_t>>& prompts,
                                                  const std::vector<SamplingParams>& params) {
    std::vector<std::shared_ptr<OutputChannel>> outputs;
    for (size_t i = 0; i < prompts.size(); ++i) {
      outputs.push_back(engine.AddRequest(std::to_string(i), prompts[i], params[i]));
    }
    while (engine.HasWork()) engine.Step();
    std::vector<std::vector<int32_t>> tokens;
    for (const auto& output : outputs) tokens.push_back(TokenIds(Drain(*output)));
    return tokens;
  }

  std::vector<std::vector<int32_t>> Run(const EngineConfig& config,
                                        const std::vector<std::vector<int32_t>>& prompts,
                                        const std::vector<SamplingParams>& params) {
    Engine engine(config, *model_, nullptr, {});
    return RunAll(engine, prompts, params);
  }

  ThreadPool pool_{2};
  std::unique_ptr<LoadedModel> loaded_;
  std::unique_ptr<LanguageModel> model_;
};

std::vector<int32_t> Range(int32_t first, int32_t count) {
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < count; ++i) ids.push_back(first + i * 7 % 200);
  return ids;
}

TEST_P(EngineFixtureTest, OutputIsTheSameAloneBatchedChunkedCachedAndPreempted) {
  std::vector<std::vector<int32_t>> prompts = {
      {1, 17, 42}, {3, 9, 100, 200, 7, 8, 11, 300, 12}, {5}, Range(250, 37), Range(20, 33)};
  prompts[4].insert(prompts[4].begin(), prompts[3].begin(), prompts[3].begin() + 32);
  std::vector<SamplingParams> params = {Params(6), Params(9, 0.8), Params(4), Params(7, 1.0),
                                        Params(12)};
  params[1].seed = 11;
  params[1].top_k = 20;
  params[3].seed = 12;
  params[3].top_p = 0.9;
  std::vector<std::vector<int32_t>> single;
  for (size_t i = 0; i < prompts.size(); ++i) {
    single.push_back(Run(Config(1), {prompts[i]}, {params[i]}).front());
    EXPECT_EQ(single[i].size(), static_cast<size_t>(params[i].max_new_tokens));
  }
  EXPECT_EQ(Run(Config(8), prompts, params), single) << "batched";
  EngineConfig static_batch = Config(8);
  static_batch.batching_mode = BatchingMode::kStatic;
  EXPECT_EQ(Run(static_batch, prompts, params), single) << "static batch";
  EngineConfig chunked = Config(8);
  chunked.max_num_batched_tokens = 4;  // short prompts share a step, long ones are split
  EXPECT_EQ(Run(chunked, prompts, params), single) << "chunked";
  static_batch.max_num_batched_tokens = 4;  // the batch's prompts in one step of several calls
  EXPECT_EQ(Run(static_batch, prompts, params), single) << "static batch in calls";
  {
    // The same requests again on a warm engine: full blocks come from the prefix cache.
    Engine engine(Config(8), *model_, nullptr, {});
    EXPECT_EQ(RunAll(engine, prompts, params), single) << "cold";
    const int64_t cached_before = engine.stats().cached_prompt_tokens;
    EXPECT_GT(cached_before, 0);  // prompt 4 shares prompt 3's first two blocks
    EXPECT_EQ(RunAll(engine, prompts, params), single) << "prefix-cache hits";
    EXPECT_GE(engine.stats().cached_prompt_tokens - cached_before, 32 + 32);
  }
  {
    // Few blocks and preemption on: requests are preempted and recomputed.
    EngineConfig tight = Config(8);
    tight.num_blocks = 6;
    tight.enable_preemption = true;
    Engine engine(tight, *model_, nullptr, {});
    EXPECT_EQ(RunAll(engine, prompts, params), single) << "preempted";
    EXPECT_GT(engine.stats().preemptions, 0);
  }
  for (size_t i = 0; i < prompts.size(); ++i) {
    GenerateOptions options;
    options.kv_cache_dtype = std::get<2>(GetParam());
    EXPECT_EQ(Generate(*model_, nullptr, prompts[i], params[i], options).token_ids, single[i])
        << "generate() " << i;
  }
}

// A 512-token vocabulary for the fixtures (whose tokenizers are not real ones): id 1 ends
// generation, 2-127 are those ASCII bytes, 128 and 129 the two bytes of "é" apart, then pieces
// of JSON, "é" whole, the digit pairs and letter pairs.
std::shared_ptr<const grammar::VocabularyIndex> FixtureVocabulary() {
  grammar::Vocabulary vocabulary;
  vocabulary.token_bytes.resize(512);
  for (int b = 2; b < 128; ++b) vocabulary.token_bytes[b] = std::string(1, static_cast<char>(b));
  std::vector<std::string> pieces = {"\xC3",  "\xA9",   "{\"",   "\":",  "\": ", ", \"",
                                     "\"}",   "true",   "false", "name", "tags", "ok",
                                     "\"x\"", "\"yy\"", "[\"",   "\"]",  "], ",  "\xC3\xA9"};
  for (int i = 0; i < 100; ++i) pieces.push_back(fmt::format("{:02}", i));
  for (char a = 'a'; pieces.size() < 512 - 128; ++a) {
    for (char b = 'a'; b <= 'z' && pieces.size() < 512 - 128; ++b) pieces.push_back({a, b});
  }
  for (size_t i = 0; i < pieces.size(); ++i) vocabulary.token_bytes[128 + i] = pieces[i];
  vocabulary.end_ids = {1};
  return std::make_shared<const grammar::VocabularyIndex>(std::move(vocabulary));
}

// Greedy longest match over the vocabulary's regular tokens (jump-forward's encoder here).
std::vector<int32_t> EncodeGreedy(const grammar::Vocabulary& vocabulary, std::string_view text) {
  std::vector<int32_t> ids;
  while (!text.empty()) {
    int32_t best = -1;
    for (int32_t id = 2; id < static_cast<int32_t>(vocabulary.token_bytes.size()); ++id) {
      const std::string& bytes = vocabulary.token_bytes[static_cast<size_t>(id)];
      if (!bytes.empty() && text.starts_with(bytes) &&
          (best < 0 || bytes.size() > vocabulary.token_bytes[static_cast<size_t>(best)].size())) {
        best = id;
      }
    }
    if (best < 0) break;
    ids.push_back(best);
    text.remove_prefix(vocabulary.token_bytes[static_cast<size_t>(best)].size());
  }
  return ids;
}

TEST_P(EngineFixtureTest, ConstrainedOutputIsTheSameAloneBatchedChunkedCachedAndPreempted) {
  // The real grammar engine (with jump-forward) on the fixture model: seeded and greedy
  // constrained requests beside a free one give the same tokens however they are run, and
  // every constrained output is a valid object.
  const auto vocabulary = FixtureVocabulary();
  const StructuredOutput spec{StructuredOutput::Kind::kJsonSchema,
                              R"({"type": "object",
      "properties": {"name": {"type": "string", "maxLength": 6},
                     "n": {"type": "integer", "minimum": 0, "maximum": 500},
                     "tags": {"type": "array", "items": {"enum": ["x", "yy"]}, "maxItems": 3},
                     "ok": {"type": "boolean"}},
      "required": ["name", "n", "tags", "ok"], "additionalProperties": false})",
                              {}};
  const auto compiled =
      grammar::CompiledGrammar::FromGbnf(StructuredOutputToGbnf(spec), vocabulary);
  const auto factory = [&](const StructuredOutput&) {
    return MakeGrammarConstraint(compiled, [&](std::string_view text) {
      return EncodeGreedy(vocabulary->vocabulary(), text);
    });
  };
  std::vector<std::vector<int32_t>> prompts = {{5, 17, 42}, Range(250, 37), {3, 9, 100}, {7}};
  prompts[1].insert(prompts[1].begin(), prompts[0].begin(), prompts[0].end());
  std::vector<SamplingParams> params = {Params(80, 1.0), Params(80, 1.0), Params(80), Params(9)};
  for (size_t i = 0; i < 3; ++i) params[i].structured_output = spec;
  params[0].seed = 21;
  params[1].seed = 22;
  params[1].top_p = 0.9;
  const auto run = [&](const EngineConfig& config, int passes = 1) {
    Engine engine(config, *model_, nullptr, {1});
    engine.SetConstraintFactory(factory);
    std::vector<std::vector<int32_t>> tokens;
    for (int pass = 0; pass < passes; ++pass) tokens = RunAll(engine, prompts, params);
    return std::make_pair(tokens, engine.stats());
  };
  std::vector<std::vector<int32_t>> single;
  for (size_t i = 0; i < prompts.size(); ++i) {
    Engine engine(Config(1), *model_, nullptr, {1});
    engine.SetConstraintFactory(factory);
    single.push_back(RunAll(engine, {prompts[i]}, {params[i]}).front());
  }
  for (size_t i = 0; i < 3; ++i) {
    std::string text;
    for (const int32_t id : single[i]) text += vocabulary->vocabulary().token_bytes[id];
    const auto object = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    ASSERT_TRUE(object.is_object()) << text;
    EXPECT_EQ(object.size(), 4U) << text;
    EXPECT_LE(object["n"].get<int64_t>(), 500) << text;
  }
  EXPECT_EQ(run(Config(8)).first, single) << "batched";
  EngineConfig chunked = Config(8);
  chunked.max_num_batched_tokens = 4;
  EXPECT_EQ(run(chunked).first, single) << "chunked";
  const auto [cached, cache_stats] = run(Config(8), 2);
  EXPECT_EQ(cached, single) << "prefix-cache hits";
  EXPECT_GT(cache_stats.cached_prompt_tokens, 0);
  EngineConfig tight = Config(8);
  tight.num_blocks = 8;
  tight.enable_preemption = true;
  const auto [preempted, tight_stats] = run(tight);
  EXPECT_EQ(preempted, single) << "preempted";
  EXPECT_GT(tight_stats.preemptions, 0);
  // n-gram drafts checked through the grammar's masks and jump-forward's forced tokens.
  EngineConfig speculative = Config(8);
  speculative.speculative = {4, 1, 3};
  EXPECT_EQ(run(speculative).first, single) << "speculative";
}

// Speculative decoding on the fixture models: a kept draft token is the model's own draw from
// the same logits (the kernels are batch-invariant: a row computed in a draft's check equals the
// row of a one-token step), so greedy and seeded outputs are those of plain decoding, however
// the requests are batched, chunked, cached or preempted. The small models repeat themselves,
// so drafts are made, and both kept and refused.
TEST_P(EngineFixtureTest, SpeculativeDecodingGivesTheSameOutput) {
  std::vector<std::vector<int32_t>> prompts = {
      {1, 17, 42, 17, 42}, {3, 9, 100, 200, 7, 8, 11, 300, 12}, Range(250, 37), Range(20, 20)};
  prompts[3].insert(prompts[3].begin(), prompts[2].begin(), prompts[2].begin() + 32);
  std::vector<SamplingParams> params = {Params(40), Params(30, 0.8), Params(25), Params(30, 1.0)};
  params[1].seed = 31;
  params[1].top_k = 20;
  params[3].seed = 32;
  params[3].top_p = 0.9;
  params[3].repetition_penalty = 1.1;
  std::vector<std::vector<int32_t>> plain;
  for (size_t i = 0; i < prompts.size(); ++i) {
    plain.push_back(Run(Config(1), {prompts[i]}, {params[i]}).front());
  }
  int64_t drafted = 0, accepted = 0;
  const auto check = [&](EngineConfig config, const std::string& what, int passes = 1) {
    config.speculative = {4, 1, 3};
    Engine engine(config, *model_, nullptr, {});
    for (int pass = 0; pass < passes; ++pass) {
      EXPECT_EQ(RunAll(engine, prompts, params), plain) << what << ", pass " << pass;
    }
    drafted += engine.metrics().spec_decode_num_draft_tokens;
    accepted += engine.metrics().spec_decode_num_accepted_tokens;
    return engine.stats();
  };
  check(Config(1), "alone");
  check(Config(8), "batched");
  EngineConfig chunked = Config(8);
  chunked.max_num_batched_tokens = 6;  // drafts cut to the budget, prompts split
  check(chunked, "chunked");
  // A second pass reads the blocks the first one registered: a refused draft's KV never is.
  EXPECT_GT(check(Config(8), "prefix-cache hits", 2).cached_prompt_tokens, 0);
  EngineConfig tight = Config(8);
  tight.num_blocks = 10;
  tight.enable_preemption = true;
  EXPECT_GT(check(tight, "preempted").preemptions, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_LT(accepted, drafted);
  {
    // A chat's next turn (prompt, reply, one more token): every full block of the first turn
    // is found in the prefix cache, under the tokens it holds, drafts or not. The first turn
    // computed the KV of all its tokens but the last drawn one.
    std::vector<std::vector<int32_t>> next = prompts;
    int64_t expected = 0;
    for (size_t i = 0; i < next.size(); ++i) {
      next[i].insert(next[i].end(), plain[i].begin(), plain[i].end());
      expected += (static_cast<int64_t>(next[i].size()) - 1) / 16 * 16;
      next[i].push_back(7);
    }
    const std::vector<SamplingParams> short_params(next.size(), Params(5));
    // (Before the engine below: an engine takes the model's KV pool for itself.)
    const auto cold = Run(Config(8), next, short_params);
    EngineConfig config = Config(8);
    config.speculative = {24, 1, 3};  // drafts longer than a block
    Engine engine(config, *model_, nullptr, {});
    ASSERT_EQ(RunAll(engine, prompts, params), plain);
    const int64_t before = engine.stats().cached_prompt_tokens;
    EXPECT_EQ(RunAll(engine, next, short_params), cold);
    EXPECT_EQ(engine.stats().cached_prompt_tokens - before, expected);
  }
}

// Each token of a request with its logprob and top-5 logprobs, as they were computed: equal
// traces mean equal logits bits (to the softmax), not only the same draws.
std::vector<std::vector<float>> Trace(const std::vector<StepOutput>& outputs) {
  std::vector<std::vector<float>> trace;
  for (const StepOutput& output : outputs) {
    if (!output.logprobs) continue;
    std::vector<float> step = {static_cast<float>(output.logprobs->token_id),
                               output.logprobs->logprob};
    for (const auto& [id, logprob] : output.logprobs->top) {
      step.push_back(static_cast<float>(id));
      step.push_back(logprob);
    }
    trace.push_back(std::move(step));
  }
  return trace;
}

// The batch-invariance workload of the tests below: 8 requests with different prompts (the last
// two sharing 32 tokens), greedy and seeded in turn (seeds from `seed`), each with logprobs.
struct EightRequests {
  std::vector<std::vector<int32_t>> prompts;
  std::vector<SamplingParams> params;
};

EightRequests MakeEightRequests(uint64_t seed) {
  EightRequests requests;
  for (int32_t i = 0; i < 8; ++i) requests.prompts.push_back(Range(3 + 29 * i, 5 + 9 * i));
  std::vector<int32_t>& last = requests.prompts[7];
  last.insert(last.begin(), requests.prompts[6].begin(), requests.prompts[6].begin() + 32);
  for (uint64_t i = 0; i < 8; ++i) {
    requests.params.push_back(Params(5 + static_cast<int64_t>(i % 4), i % 2 == 0 ? 0.0 : 0.9));
    requests.params.back().seed = seed + i;
    requests.params.back().logprobs = 5;
  }
  return requests;
}

using Traces = std::vector<std::vector<std::vector<float>>>;

// All of `requests` on one engine, `rounds` times: the last round's traces and the stats.
std::pair<Traces, SchedulerStats> RunTraced(LanguageModel& model, const EngineConfig& config,
                                            const EightRequests& requests, int rounds) {
  Engine engine(config, model, nullptr, {});
  Traces traces;
  for (int round = 0; round < rounds; ++round) {
    std::vector<std::shared_ptr<OutputChannel>> outputs;
    for (size_t i = 0; i < requests.prompts.size(); ++i) {
      outputs.push_back(
          engine.AddRequest(std::to_string(i), requests.prompts[i], requests.params[i]));
    }
    while (engine.HasWork()) engine.Step();
    traces.clear();
    for (const auto& output : outputs) traces.push_back(Trace(Drain(*output)));
  }
  return {traces, engine.stats()};
}

// Each request alone on an engine of its own, each running to its max_new_tokens.
Traces AloneTraced(LanguageModel& model, const EightRequests& requests) {
  EngineConfig one = TestConfig(1);
  one.num_blocks = 64;
  Traces alone;
  for (size_t i = 0; i < requests.prompts.size(); ++i) {
    Engine engine(one, model, nullptr, {});
    auto output = engine.AddRequest("0", requests.prompts[i], requests.params[i]);
    while (engine.HasWork()) engine.Step();
    alone.push_back(Trace(Drain(*output)));
    EXPECT_EQ(alone.back().size(), static_cast<size_t>(requests.params[i].max_new_tokens));
  }
  return alone;
}

// `requests` on `config` squeezed to 8 blocks with preemption on: some are preempted, and each
// still gives `alone`'s bits.
void ExpectPreemptedAsAlone(LanguageModel& model, EngineConfig config,
                            const EightRequests& requests, const Traces& alone) {
  config.num_blocks = 8;
  config.enable_preemption = true;
  const auto [preempted, stats] = RunTraced(model, config, requests, 1);
  EXPECT_EQ(preempted, alone) << "preempted";
  EXPECT_GT(stats.preemptions, 0);
}

// fn(model) for the fixture model in `dir` with float and with int8 weights, at every SIMD level
// the CPU runs (the scalar reference first); the active level is restored after.
void AtEveryLevel(const std::string& dir, const std::function<void(LanguageModel&)>& fn) {
  std::vector<kernels::Isa> isas = {kernels::Isa::kScalar};
  for (const kernels::Isa isa : {kernels::Isa::kAvx2, kernels::Isa::kAvxVnni, kernels::Isa::kAvx512,
                                 kernels::Isa::kAvx512Bf16, kernels::Isa::kAvx512Amx}) {
    if (kernels::IsaSupported(isa)) isas.push_back(isa);
  }
  const kernels::Isa active = kernels::ActiveIsa();
  for (const auto quantization : {kernels::Quantization::kNone, kernels::Quantization::kInt8}) {
    LoadOptions options;
    options.quantization = quantization;
    const LoadedModel loaded = LoadModel(dir, options);
    ThreadPool pool(2);
    const auto model = MakeDecoderModel(loaded, pool, kernels::MatMulPrecision::kF32);
    for (const kernels::Isa isa : isas) {
      kernels::SetActiveIsa(isa);
      SCOPED_TRACE(
          fmt::format("{} {}", kernels::IsaName(isa), kernels::QuantizationName(quantization)));
      fn(*model);
    }
  }
  kernels::SetActiveIsa(active);
}

// A mixture of experts at every SIMD level the CPU runs (and the scalar reference), float and
// int8 experts: 8 requests with different prompts (two sharing a prefix) give each request's
// tokens and logprobs, bit for bit, alone, batched with chunks of 16 tokens, from the prefix
// cache and preempted.
TEST(EngineMoeTest, EightRequestsAreTheirOwnAtEveryLevel) {
  const std::string dir = std::string(::infer::testing::FixturesDir()) + "/models/qwen3_moe/model";
  const EightRequests requests = MakeEightRequests(40);
  AtEveryLevel(dir, [&](LanguageModel& model) {
    const Traces alone = AloneTraced(model, requests);
    EngineConfig batched = TestConfig(8);
    batched.num_blocks = 64;
    batched.max_num_batched_tokens = 16;
    const auto [cached, cached_stats] = RunTraced(model, batched, requests, 2);
    EXPECT_GT(cached_stats.cached_prompt_tokens, 0);
    EXPECT_EQ(cached, alone) << "batched, chunked, prefix-cached";
    ExpectPreemptedAsAlone(model, batched, requests, alone);
  });
}

// A hybrid model (Gated DeltaNet layers beside attention: a recurrent state per sequence, in a
// slot the block manager hands out with its blocks) at every SIMD level the CPU runs, float and
// int8 weights: 8 requests with different prompts give each request's tokens and logprobs, bit
// for bit, alone, batched with chunks of 1, 7 and 16 tokens (a prompt's state carried from
// chunk to chunk), from the prefix cache (a second round resumes from state snapshots), with
// n-gram drafts (a check's rejected tokens undone from a state checkpoint), and preempted
// (recomputed from a fresh state).
class EngineHybridTest : public ::testing::TestWithParam<std::string> {};

TEST_P(EngineHybridTest, EightRequestsAreTheirOwnAtEveryLevel) {
  const std::string dir =
      std::string(::infer::testing::FixturesDir()) + "/models/" + GetParam() + "/model";
  const EightRequests requests = MakeEightRequests(60);
  AtEveryLevel(dir, [&](LanguageModel& model) {
    EXPECT_GT(model.recurrent_state_bytes(), 0);
    const Traces alone = AloneTraced(model, requests);
    EngineConfig batched = TestConfig(8);
    batched.num_blocks = 64;
    batched.enable_prefix_caching = true;
    for (const int64_t chunk : {1, 7, 16}) {
      batched.max_num_batched_tokens = chunk;
      const auto [traces, stats] = RunTraced(model, batched, requests, 2);
      // The second round resumes every prompt from a snapshot at its last full block.
      EXPECT_GT(stats.cached_prompt_tokens, 0);
      EXPECT_EQ(traces, alone) << "batched, chunks of " << chunk << ", prefix-cached";
    }
    // Drafts of any last token seen before: many, mostly rejected, some kept in part.
    EngineConfig drafting = batched;
    drafting.max_num_batched_tokens = 64;
    drafting.speculative = {4, 1, 3};
    const auto [drafted, draft_stats] = RunTraced(model, drafting, requests, 1);
    EXPECT_EQ(drafted, alone) << "with drafts";
    EXPECT_GT(draft_stats.spec_decode_draft_tokens, draft_stats.spec_decode_accepted_tokens);
    EXPECT_GT(draft_stats.spec_decode_drafts, 0);
    ExpectPreemptedAsAlone(model, batched, requests, alone);
  });
}

// Prefix hits at every block boundary: requests sharing the first 8, 16, ..., 80 tokens of one
// prompt (blocks of 16), sent together and then again, each give their tokens and logprobs bit for
// bit as alone; the first round already shares (a request waiting for a prefix another one
// computes has it snapshotted on the way), the second resumes mostly from snapshots. A multi-turn
// follow-up (a prompt extended by its own output) resumes past its first turn's prompt.
TEST_P(EngineHybridTest, PrefixHitsAtEveryBoundaryAreExact) {
  const std::string dir =
      std::string(::infer::testing::FixturesDir()) + "/models/" + GetParam() + "/model";
  const LoadedModel loaded = LoadModel(dir, {});
  ThreadPool pool(2);
  const auto model = MakeDecoderModel(loaded, pool, kernels::MatMulPrecision::kF32);
  const std::vector<int32_t> base = Range(11, 88);
  EightRequests requests;
  for (int32_t shared = 8; shared <= 80; shared += 8) {
    std::vector<int32_t> prompt(base.begin(), base.begin() + shared);
    const std::vector<int32_t> tail = Range(300 + shared, 1 + shared % 7);
    prompt.insert(prompt.end(), tail.begin(), tail.end());
    requests.prompts.push_back(prompt);
    requests.params.push_back(Params(4, shared % 16 == 0 ? 0.0 : 0.9));
    requests.params.back().seed = static_cast<uint64_t>(shared);
    requests.params.back().logprobs = 3;
  }
  const Traces alone = AloneTraced(*model, requests);
  EngineConfig config = TestConfig(10);
  config.num_blocks = 128;
  config.enable_prefix_caching = true;
  config.max_num_batched_tokens = 24;
  for (const int rounds : {1, 2}) {
    const auto [traces, stats] = RunTraced(*model, config, requests, rounds);
    EXPECT_EQ(traces, alone) << rounds << " rounds";
    EXPECT_GT(stats.cached_prompt_tokens, 0) << rounds << " rounds";
  }
  // A conversation's second turn: the first turn's prompt and output, then new tokens.
  Engine engine(config, *model, nullptr, {});
  SamplingParams params = Params(12);
  params.logprobs = 3;
  const std::vector<int32_t> turn1 = requests.prompts[5];
  auto first = engine.AddRequest("1", turn1, params);
  while (engine.HasWork()) engine.Step();
  std::vector<int32_t> turn2 = turn1;
  for (const StepOutput& output : Drain(*first)) {
    if (output.token_id) turn2.push_back(*output.token_id);
  }
  const std::vector<int32_t> more = Range(400, 6);
  turn2.insert(turn2.end(), more.begin(), more.end());
  const int64_t cached_before = engine.stats().cached_prompt_tokens;
  auto second = engine.AddRequest("2", turn2, params);
  while (engine.HasWork()) engine.Step();
  const int64_t resumed = engine.stats().cached_prompt_tokens - cached_before;
  EXPECT_GT(resumed, static_cast<int64_t>(turn1.size()));  // past the first turn's prompt
  EngineConfig one = TestConfig(1);
  one.num_blocks = 64;
  Engine fresh(one, *model, nullptr, {});
  auto reference = fresh.AddRequest("2", turn2, params);
  while (fresh.HasWork()) fresh.Step();
  EXPECT_EQ(Trace(Drain(*second)), Trace(Drain(*reference)));
}

INSTANTIATE_TEST_SUITE_P(Models, EngineHybridTest, ::testing::Values("qwen3_5", "qwen3_5_moe"));

TEST_P(EngineFixtureTest, KvPoolHoldsTheConfiguredBlocks) {
  // Bytes of the pool from config.json's shapes: 2 (K, V) x layers x kv heads x head_dim x
  // dtype size per token.
  const std::string dir =
      std::string(::infer::testing::FixturesDir()) + "/models/" + std::get<0>(GetParam());
  std::ifstream file(dir + "/model/config.json");
  const auto json = nlohmann::json::parse(file);
  const int64_t head_dim =
      json.contains("head_dim")
          ? json["head_dim"].get<int64_t>()
          : json["hidden_size"].get<int64_t>() / json["num_attention_heads"].get<int64_t>();
  const int64_t per_token = 2 * json["num_hidden_layers"].get<int64_t>() *
                            json["num_key_value_heads"].get<int64_t>() * head_dim *
                            (std::get<2>(GetParam()) == DType::kBF16 ? 2 : 4);
  Engine engine(Config(8), *model_, nullptr, {});
  EXPECT_EQ(model_->kv_cache_bytes(), 64 * 16 * per_token);
  EXPECT_EQ(engine.kv_cache().bytes, 64 * 16 * per_token);
}

INSTANTIATE_TEST_SUITE_P(
    Models, EngineFixtureTest,
    ::testing::Combine(::testing::Values("llama", "qwen3", "qwen3_moe", "gemma3"),
                       ::testing::Values(kernels::MatMulPrecision::kF32,
                                         kernels::MatMulPrecision::kBf16),
                       ::testing::Values(DType::kF32, DType::kBF16)),
    [](const auto& info) {
      return std::get<0>(info.param) + "_" +
             std::string(kernels::MatMulPrecisionName(std::get<1>(info.param))) + "_kv" +
             std::string(DTypeName(std::get<2>(info.param)));
    });

}  // namespace
}  // namespace infer
