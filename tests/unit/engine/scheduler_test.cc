// The scheduler with scripted requests and a caller-supplied clock, no model (as vLLM tests its
// scheduler): static batches (formation, FCFS, bounded wait, run to completion, the prompts in one
// step), continuous batching (admission every step, token budget and chunking, max_num_seqs,
// priority order, preemption choice, prefix hits and in-flight prefixes, eviction, cancel,
// requests that can never fit).
#include "infer/engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "infer/core/error.h"
#include "infer/core/fault_injection.h"

namespace infer {
namespace {

EngineConfig Config(const std::string& mode, int64_t max_num_seqs = 8, int64_t budget = 512,
                    int64_t num_waiting = 64) {
  EngineConfig config;
  config.batching_mode = ParseBatchingMode(mode);
  config.max_num_seqs = max_num_seqs;
  config.max_num_batched_tokens = budget;
  config.max_waiting_requests = num_waiting;
  config.batch_wait_timeout_s = 0.0;
  return config;
}

std::vector<int32_t> Tokens(int64_t n, int32_t first = 1) {
  std::vector<int32_t> tokens;
  for (int64_t i = 0; i < n; ++i) tokens.push_back(first + static_cast<int32_t>(i));
  return tokens;
}

int64_t next_seq_id = 0;

std::shared_ptr<Request> MakeRequest(const std::string& id, std::vector<int32_t> prompt,
                                     int64_t max_new_tokens = 4, int64_t priority = 0,
                                     double arrival = 0.0) {
  SamplingParams params;
  params.max_new_tokens = max_new_tokens;
  auto request =
      std::make_shared<Request>(id, std::move(prompt), params, arrival, nullptr, priority);
  request->seq_id = next_seq_id++;
  return request;
}

// What the step ran: "id:num_new" for each scheduled request, in order.
std::vector<std::string> Describe(const SchedulerOutput& output) {
  std::vector<std::string> parts;
  for (const ScheduledRequest& s : output.scheduled) {
    parts.push_back(s.request->request_id + ":" + std::to_string(s.num_new));
  }
  return parts;
}

// Plays the runner and the token pipeline: each request that reached its last token draws token
// 7 (it finishes at max_new_tokens); then the scheduler is updated.
SchedulerOutput Step(Scheduler& scheduler, double now = 0.0) {
  SchedulerOutput output = scheduler.Schedule(now);
  std::vector<SampledTokens> sampled(output.scheduled.size());
  for (size_t i = 0; i < output.scheduled.size(); ++i) {
    if (output.scheduled[i].samples()) sampled[i].tokens.push_back({.id = 7});
  }
  scheduler.Update(output, sampled, /*ran=*/true);
  return output;
}

using Strings = std::vector<std::string>;

TEST(RequestTest, StartsWaitingWithNothingGenerated) {
  const Request request("a", {5, 6}, SamplingParams{}, 1.5);
  EXPECT_EQ(request.state, RequestState::kWaiting);
  EXPECT_TRUE(request.generated_token_ids.empty());
  EXPECT_EQ(request.token_ids, (std::vector<int32_t>{5, 6}));
  EXPECT_EQ(request.num_uncomputed(), 2);
  EXPECT_FALSE(request.done());
  EXPECT_EQ(RequestStateName(RequestState::kDecode), "decode");
}

TEST(EngineConfigTest, DefaultsAndValidation) {
  const EngineConfig config;
  EXPECT_EQ(BatchingModeName(config.batching_mode), "continuous");
  EXPECT_EQ(SchedulerPolicyName(config.scheduler_policy), "fcfs");
  EXPECT_EQ(KvCacheBackendName(config.kv_cache_backend), "paged");
  EXPECT_EQ(config.block_size, 16);  // seed 004
  EXPECT_EQ(config.max_num_seqs, 256);
  EXPECT_EQ(config.kv_cache_dtype, DType::kBF16);
  EXPECT_TRUE(config.enable_prefix_caching);
  EXPECT_FALSE(config.enable_preemption);  // seed 004
  EXPECT_NO_THROW(config.Validate());
  const auto rejects = [](auto mutate) {
    EngineConfig c;
    mutate(c);
    EXPECT_THROW(c.Validate(), Error);
  };
  // The modes are parsed at the edge: unknown names are refused there.
  EXPECT_THROW(ParseBatchingMode("dynamic"), Error);
  EXPECT_THROW(ParseSchedulerPolicy("lifo"), Error);
  EXPECT_THROW(ParseKvCacheBackend("contiguous"), Error);
  EXPECT_EQ(ParseBatchingMode("static"), BatchingMode::kStatic);
  EXPECT_EQ(ParseSchedulerPolicy("priority"), SchedulerPolicy::kPriority);
  rejects([](EngineConfig& c) { c.block_size = 24; });
  rejects([](EngineConfig& c) { c.max_num_seqs = 0; });
  rejects([](EngineConfig& c) { c.max_model_len = 1; });
  rejects([](EngineConfig& c) { c.kv_cache_dtype = DType::kF16; });
}

TEST(StaticSchedulerTest, BatchRunsToCompletionBeforeTheNextForms) {
  Scheduler scheduler(Config("static", 2), 64);
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(scheduler.Add(MakeRequest(id, Tokens(3), 2)));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:3", "b:3"}));  // FCFS, max_num_seqs 2
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:1", "b:1"}));
  EXPECT_EQ(scheduler.num_running(), 0U);
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"c:3"}));
}

TEST(StaticSchedulerTest, PrefillsTheWholeBatchInOneStepBeforeDecoding) {
  Scheduler scheduler(Config("static", 4, 4), 64);
  scheduler.Add(MakeRequest("a", Tokens(3), 3));
  scheduler.Add(MakeRequest("b", Tokens(5), 3));
  // The batch's prompts are one step past the budget of 4 (the runner splits the forward).
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:3", "b:5"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:1", "b:1"}));
}

TEST(StaticSchedulerTest, PartialBatchWaitsForTheDeadline) {
  EngineConfig config = Config("static", 4);
  config.batch_wait_timeout_s = 0.01;
  Scheduler scheduler(config, 64);
  scheduler.Add(MakeRequest("a", Tokens(2)));
  EXPECT_TRUE(scheduler.Schedule(10.0).scheduled.empty());
  ASSERT_TRUE(scheduler.batch_wait_deadline_s().has_value());
  EXPECT_DOUBLE_EQ(*scheduler.batch_wait_deadline_s(), 10.01);
  scheduler.Add(MakeRequest("b", Tokens(2)));
  EXPECT_TRUE(scheduler.Schedule(10.005).scheduled.empty());
  EXPECT_EQ(Describe(Step(scheduler, 10.02)), (Strings{"a:2", "b:2"}));
}

TEST(SchedulerTest, RejectsPastMaxWaitingAndRequestsThatCanNeverFit) {
  Scheduler scheduler(Config("continuous", 8, 512, 2), 4);  // 4 blocks = 64 tokens
  EXPECT_TRUE(scheduler.Add(MakeRequest("a", Tokens(3))));
  EXPECT_TRUE(scheduler.Add(MakeRequest("b", Tokens(3))));
  EXPECT_FALSE(scheduler.Add(MakeRequest("c", Tokens(3))));
  EXPECT_THROW(scheduler.Add(MakeRequest("huge", Tokens(60), 10)), Error);  // 70 > 64
}

TEST(SchedulerTest, ContinuousAdmitsEveryStepAndMixesDecodeWithPrefill) {
  Scheduler scheduler(Config("continuous", 8, 8), 64);
  scheduler.Add(MakeRequest("a", Tokens(3), 10));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:3"}));
  scheduler.Add(MakeRequest("b", Tokens(20), 2));
  // Running first (a's decode token), then b's prompt in chunks under the budget of 8.
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:1", "b:7"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:1", "b:7"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:1", "b:6"}));
  const SchedulerOutput last = Step(scheduler);
  EXPECT_EQ(Describe(last), (Strings{"a:1", "b:1"}));
  EXPECT_EQ(scheduler.num_running(), 1U);  // b finished (2 tokens), a goes on
}

TEST(SchedulerTest, MaxNumSeqsCapsTheRunningSet) {
  Scheduler scheduler(Config("continuous", 2), 64);
  for (const char* id : {"a", "b", "c"}) scheduler.Add(MakeRequest(id, Tokens(2), 2));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:2", "b:2"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:1", "b:1"}));  // both end here
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"c:2"}));
}

TEST(SchedulerTest, MaxLorasCapsTheDistinctAdaptersRunningAndBaseRequestsPass) {
  EngineConfig config = Config("continuous");
  config.max_loras = 2;
  Scheduler scheduler(config, 64);
  auto adapter = [](int64_t id) {
    auto a = std::make_shared<LoraAdapter>();
    a->id = id;
    return std::shared_ptr<const LoraAdapter>(a);
  };
  const auto a = adapter(1), b = adapter(2), c = adapter(3);
  const std::pair<const char*, std::shared_ptr<const LoraAdapter>> requests[] = {
      {"a1", a}, {"b1", b}, {"c1", c}, {"base", nullptr}, {"a2", a}};
  for (const auto& [id, lora] : requests) {
    auto request = MakeRequest(id, Tokens(4));
    request->lora = lora;
    ASSERT_TRUE(scheduler.Add(request));
  }
  // c1 waits (a and b run); the base request and a2 (a runs already) go past it.
  EXPECT_EQ(Describe(scheduler.Schedule(0.0)),
            (std::vector<std::string>{"a1:4", "b1:4", "base:4", "a2:4"}));
  EXPECT_EQ(scheduler.num_waiting(), 1U);
  EXPECT_EQ(scheduler.waiting().front()->request_id, "c1");
}

TEST(SchedulerTest, PriorityPolicyAdmitsLowerValuesFirstAndTiesInArrivalOrder) {
  EngineConfig config = Config("continuous", 2);
  config.scheduler_policy = SchedulerPolicy::kPriority;
  Scheduler scheduler(config, 64);
  scheduler.Add(MakeRequest("late", Tokens(2), 1, 2, 0.0));
  scheduler.Add(MakeRequest("first", Tokens(2), 1, 0, 1.0));
  scheduler.Add(MakeRequest("second", Tokens(2), 1, 1, 2.0));
  scheduler.Add(MakeRequest("second-tie", Tokens(2), 1, 1, 3.0));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"first:2", "second:2"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"second-tie:2", "late:2"}));
}

TEST(SchedulerTest, PreemptionTakesTheLowestPriorityLatestArrival) {
  EngineConfig config = Config("continuous", 8, 64);
  config.scheduler_policy = SchedulerPolicy::kPriority;
  config.enable_preemption = true;
  Scheduler scheduler(config, 6);  // 6 blocks of 16
  auto a = MakeRequest("a", Tokens(16), 40, 0, 0.0);
  auto b = MakeRequest("b", Tokens(16), 40, 1, 1.0);
  auto c = MakeRequest("c", Tokens(16), 40, 1, 2.0);
  for (const auto& r : {a, b, c}) scheduler.Add(r);
  Step(scheduler);  // each holds 1 block, then a second as its first token needs one
  std::vector<std::string> preempted;
  for (int i = 0; i < 40 && preempted.empty(); ++i) {
    for (const auto& r : Step(scheduler).preempted) preempted.push_back(r->request_id);
  }
  EXPECT_EQ(preempted, (Strings{"c"}));
  EXPECT_EQ(c->state, RequestState::kWaiting);
  EXPECT_EQ(c->num_computed_tokens, 0);
  EXPECT_TRUE(c->block_table.blocks.empty());
  EXPECT_EQ(scheduler.waiting().front(), c);  // requeued at the front of its priority
  EXPECT_EQ(c->num_preemptions, 1);
  EXPECT_FALSE(c->generated_token_ids.empty());  // its tokens are kept and recomputed
  // Everything still completes.
  for (int i = 0; i < 400 && scheduler.HasWork(); ++i) Step(scheduler);
  EXPECT_FALSE(scheduler.HasWork());
  for (const auto& r : {a, b, c}) EXPECT_EQ(r->num_generated_tokens(), 40);
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 6);
}

TEST(SchedulerTest, AMoreUrgentRequestTakesTheBlocksOfALessUrgentOne) {
  EngineConfig config = Config("continuous");
  config.scheduler_policy = SchedulerPolicy::kPriority;
  config.enable_preemption = true;
  Scheduler scheduler(config, 4);
  auto low = MakeRequest("low", Tokens(40), 20, 5, 0.0);
  scheduler.Add(low);
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"low:40"}));    // 3 of the 4 blocks
  auto high = MakeRequest("high", Tokens(30, 100), 5, 0, 1.0);  // needs 2
  scheduler.Add(high);
  const SchedulerOutput output = Step(scheduler);
  ASSERT_EQ(output.preempted.size(), 1U);
  EXPECT_EQ(output.preempted.front(), low);
  EXPECT_EQ(Describe(output), (Strings{"high:30"}));  // low's decode token was given back
  EXPECT_EQ(low->state, RequestState::kWaiting);
  for (int i = 0; i < 100 && scheduler.HasWork(); ++i) Step(scheduler);
  EXPECT_EQ(low->num_generated_tokens(), 20);
  EXPECT_EQ(high->num_generated_tokens(), 5);
}

TEST(SchedulerTest, WithoutPreemptionAdmissionReservesPromptPlusMaxTokens) {
  Scheduler scheduler(Config("continuous"), 4);     // 64 tokens
  scheduler.Add(MakeRequest("a", Tokens(10), 30));  // 40 tokens: 3 blocks
  scheduler.Add(MakeRequest("b", Tokens(10), 30));  // would need 3 more
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:10"}));
  EXPECT_EQ(scheduler.num_waiting(), 1U);
  for (int i = 0; i < 29; ++i) Step(scheduler);
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"b:10"}));  // a's blocks came back
}

TEST(SchedulerTest, PrefixCacheHitSkipsTheCachedBlocks) {
  Scheduler scheduler(Config("continuous"), 32);
  scheduler.Add(MakeRequest("a", Tokens(40), 2));
  while (scheduler.HasWork()) Step(scheduler);
  std::vector<int32_t> shared = Tokens(32);
  shared.push_back(999);
  auto b = MakeRequest("b", shared, 2);
  scheduler.Add(b);
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"b:1"}));  // 32 of 33 tokens cached
  EXPECT_EQ(b->num_cached_prompt_tokens, 32);
  EXPECT_EQ(scheduler.stats().cached_prompt_tokens, 32);
  // A prompt that is entirely cached still computes its last block (its logits are needed).
  auto c = MakeRequest("c", Tokens(32), 2);
  scheduler.Add(c);
  while (scheduler.HasWork()) Step(scheduler);
  EXPECT_EQ(c->num_cached_prompt_tokens, 16);
}

TEST(SchedulerTest, RequestsArrivingTogetherComputeASharedPrefixOnce) {
  Scheduler scheduler(Config("continuous", 8, 16), 64);
  std::vector<std::shared_ptr<Request>> requests;
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> prompt = Tokens(48);
    prompt.push_back(100 + i);
    requests.push_back(MakeRequest("r" + std::to_string(i), prompt, 1));
    scheduler.Add(requests.back());
  }
  // r0 computes the 48-token prefix in 16-token steps; the others wait for its blocks.
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"r0:16"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"r0:16"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"r0:16"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"r0:1", "r1:1", "r2:1"}));
  EXPECT_EQ(requests[1]->num_cached_prompt_tokens, 48);
  EXPECT_EQ(requests[2]->num_cached_prompt_tokens, 48);
  EXPECT_EQ(scheduler.stats().computed_tokens, 48 + 3);
}

TEST(SchedulerTest, PrefixCachingOffComputesEverything) {
  EngineConfig config = Config("continuous");
  config.enable_prefix_caching = false;
  Scheduler scheduler(config, 32);
  scheduler.Add(MakeRequest("a", Tokens(40), 1));
  while (scheduler.HasWork()) Step(scheduler);
  auto b = MakeRequest("b", Tokens(40), 1);
  scheduler.Add(b);
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"b:40"}));
}

TEST(SchedulerTest, CachedBlocksAreEvictedOnlyWhenNeededOldestFirst) {
  Scheduler scheduler(Config("continuous"), 3);
  const auto a_tokens = Tokens(33, 1);
  scheduler.Add(MakeRequest("a", a_tokens, 1));  // 3 blocks (2 full, cached after)
  while (scheduler.HasWork()) Step(scheduler);
  EXPECT_EQ(scheduler.block_manager().Match(a_tokens).num_blocks, 2);
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 3);
  scheduler.Add(MakeRequest("b", Tokens(17, 500), 15));  // 2 blocks: one free, one evicted
  Step(scheduler);
  // a's first block is the one kept: its tail was freed first, so it went first.
  EXPECT_EQ(scheduler.block_manager().Match(a_tokens).num_blocks, 1);
}

TEST(SchedulerTest, AbortFreesBlocksOfWaitingAndRunningRequests) {
  Scheduler scheduler(Config("continuous", 1), 16);
  scheduler.Add(MakeRequest("a", Tokens(20), 100));
  scheduler.Add(MakeRequest("b", Tokens(20), 100));
  Step(scheduler);
  EXPECT_LT(scheduler.block_manager().num_free_blocks(), 16);
  const auto waiting = scheduler.Abort("b");
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(waiting->state, RequestState::kFailed);
  const auto running = scheduler.Abort("a");
  ASSERT_NE(running, nullptr);
  EXPECT_FALSE(scheduler.HasWork());
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 16);
  EXPECT_EQ(scheduler.Abort("a"), nullptr);
  EXPECT_EQ(scheduler.Abort("zzz"), nullptr);
}

}  // namespace
}  // namespace infer

namespace infer {
namespace {

// A block allocation that throws (fault::Arm, as INFER_FAULTS does for the server) fails only
// the request it was for: its blocks are freed and it leaves the queues, reported in the step's
// `failed`; the rest of the step is scheduled as usual, and later requests are admitted.
TEST(SchedulerTest, AnAllocationThatThrowsFailsOnlyItsRequest) {
  EngineConfig config = Config("continuous");
  config.enable_preemption = true;  // blocks as tokens come (off: all reserved at admission)
  Scheduler scheduler(config, 64);
  const auto a = MakeRequest("a", Tokens(15, 1), 8);
  const auto b = MakeRequest("b", Tokens(15, 100), 8);
  ASSERT_TRUE(scheduler.Add(a));
  ASSERT_TRUE(scheduler.Add(b));
  fault::Arm("kv_alloc@3");  // passes 1-2: the prompts' blocks; 3: a's second block
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:15", "b:15"}));
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"a:1", "b:1"}));  // 16 tokens: no new block
  const SchedulerOutput third = Step(scheduler);
  ASSERT_EQ(third.failed.size(), 1U);
  EXPECT_EQ(third.failed[0], a);
  EXPECT_EQ(a->state, RequestState::kFailed);
  EXPECT_NE(a->error.value_or("").find("injected fault: kv_alloc"), std::string::npos);
  EXPECT_EQ(Describe(third), (Strings{"b:1"}));
  EXPECT_EQ(scheduler.num_running(), 1U);
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 64 - 2);  // b's two blocks
  while (scheduler.HasWork()) EXPECT_TRUE(Step(scheduler).failed.empty());
  EXPECT_EQ(b->state, RequestState::kFinished);

  // Admission: the waiting request whose first blocks throw fails; the next one runs.
  fault::Arm("kv_alloc@1");
  const auto c = MakeRequest("c", Tokens(5, 200), 2);
  const auto d = MakeRequest("d", Tokens(5, 300), 2);
  ASSERT_TRUE(scheduler.Add(c));
  ASSERT_TRUE(scheduler.Add(d));
  const SchedulerOutput admit = Step(scheduler);
  ASSERT_EQ(admit.failed.size(), 1U);
  EXPECT_EQ(admit.failed[0], c);
  EXPECT_TRUE(admit.scheduled.empty());  // admission stops for the step that failed
  EXPECT_EQ(scheduler.num_waiting(), 1U);
  EXPECT_EQ(Describe(Step(scheduler)), (Strings{"d:5"}));
  fault::Arm("");
  while (scheduler.HasWork()) Step(scheduler);
  EXPECT_EQ(d->state, RequestState::kFinished);
  EXPECT_EQ(scheduler.block_manager().num_free_blocks(), 64);  // free or evictable, none lost
}

}  // namespace
}  // namespace infer

namespace infer {
namespace {

// A speculative draft (tokens proposed to follow the last drawn one): scheduled with it
// while the budget allows, cut to the budget, dropped first when blocks run out and on
// preemption; its blocks are not registered in the prefix cache until confirmed, and the
// rejected part's KV is not counted as computed.
TEST(SchedulerTest, SpeculativeDraftsAreOptionalAndNeverCachedUnconfirmed) {
  const auto add_draft = [](Request& request, int64_t count) {
    for (int64_t i = 0; i < count; ++i) {
      request.draft_token_ids.push_back(100 + static_cast<int32_t>(i));
    }
  };
  {
    EngineConfig config = Config("continuous", 8, /*budget=*/512);
    config.enable_preemption = true;  // blocks are taken as the sequence grows
    Scheduler scheduler(config, /*num_blocks=*/16);
    auto a = MakeRequest("a", Tokens(16), /*max_new_tokens=*/40);
    ASSERT_TRUE(scheduler.Add(a));
    Step(scheduler);  // prefill: the prompt's block is computed, token 7 drawn
    EXPECT_EQ(scheduler.block_manager().num_cached_blocks(), 1);
    add_draft(*a, 20);  // positions 17-36: a whole block (16-31) of draft tokens
    SchedulerOutput output = scheduler.Schedule(0.0);
    EXPECT_EQ(Describe(output), (Strings{"a:21"}));
    EXPECT_TRUE(output.scheduled.front().wants_logits);
    EXPECT_EQ(a->block_table.blocks.size(), 3U);
    EXPECT_EQ(scheduler.block_manager().num_cached_blocks(), 1);  // the draft's block is not
    // The draws kept 5 draft tokens, drew one more, and refused 15.
    SampledTokens sampled;
    for (int32_t t = 0; t < 6; ++t) sampled.tokens.push_back({.id = 100 + t});
    sampled.num_accepted_draft = 5;
    scheduler.Update(output, std::vector<SampledTokens>{sampled}, /*ran=*/true);
    EXPECT_EQ(a->num_computed_tokens, 16 + 1 + 5);
    EXPECT_EQ(a->num_uncomputed(), 1);
    EXPECT_EQ(a->num_draft_tokens(), 0);
    EXPECT_EQ(scheduler.stats().spec_decode_drafts, 1);
    EXPECT_EQ(scheduler.stats().spec_decode_draft_tokens, 20);
    EXPECT_EQ(scheduler.stats().spec_decode_accepted_tokens, 5);
    EXPECT_EQ(scheduler.block_manager().num_cached_blocks(), 1);  // 22 computed: one block
  }
  {
    // A budget of 4 keeps 3 draft tokens.
    Scheduler scheduler(Config("continuous", 8, /*budget=*/4), /*num_blocks=*/16);
    auto a = MakeRequest("a", Tokens(4), /*max_new_tokens=*/40);
    ASSERT_TRUE(scheduler.Add(a));
    Step(scheduler);
    add_draft(*a, 6);
    const SchedulerOutput output = scheduler.Schedule(0.0);
    EXPECT_EQ(Describe(output), (Strings{"a:4"}));
    EXPECT_TRUE(output.scheduled.front().wants_logits);
    EXPECT_EQ(a->num_draft_tokens(), 3);
    EXPECT_EQ(a->num_tokens() + a->num_draft_tokens(), 4 + 1 + 3);
  }
  {
    // Out of blocks: the draft goes before anyone is preempted.
    EngineConfig config = Config("continuous", 8, /*budget=*/512);
    config.enable_preemption = true;
    Scheduler scheduler(config, /*num_blocks=*/2);
    auto a = MakeRequest("a", Tokens(15), /*max_new_tokens=*/10);
    auto b = MakeRequest("b", Tokens(8, 50), /*max_new_tokens=*/10);
    ASSERT_TRUE(scheduler.Add(a));
    ASSERT_TRUE(scheduler.Add(b));
    Step(scheduler);   // a's 16th token (7) fills its block; b holds the other one
    add_draft(*a, 4);  // would need a third block
    const SchedulerOutput output = scheduler.Schedule(0.0);
    EXPECT_TRUE(output.preempted.empty());
    EXPECT_EQ(a->num_draft_tokens(), 0);
    EXPECT_EQ(Describe(output), (Strings{"a:1", "b:1"}));
  }
}

// Update appends what the pipeline drew one token at a time and stops at the end: the tokens
// drawn past it are dropped (with an error that came after them), a draft token counts as
// confirmed only where it was appended, and an ended request takes no next draft.
TEST(SchedulerTest, UpdateAppendsTheDrawnTokensUpToTheEnd) {
  Scheduler scheduler(Config("continuous", 8, /*budget=*/512), /*num_blocks=*/16);
  auto a = MakeRequest("a", Tokens(4), /*max_new_tokens=*/40);
  auto b = MakeRequest("b", Tokens(4, 50), /*max_new_tokens=*/40);
  ASSERT_TRUE(scheduler.Add(a));
  ASSERT_TRUE(scheduler.Add(b));
  Step(scheduler);  // prefill: both drew token 7
  a->draft_token_ids = {8, 9, 10};
  b->draft_token_ids = {8, 9};
  const SchedulerOutput output = scheduler.Schedule(0.0);
  ASSERT_EQ(Describe(output), (Strings{"a:4", "b:3"}));
  std::vector<SampledTokens> sampled(2);
  // a: the draws confirm 8, then draw an EOS, then (the pipeline cannot see every end) more.
  sampled[0].tokens = {{.id = 8}, {.id = 2, .is_eos = true}, {.id = 10}};
  sampled[0].num_accepted_draft = 3;
  sampled[0].next_draft = {11};
  sampled[0].error = "structured output: after the end";
  // b: confirms 8, then draws 5 and fails after it.
  sampled[1].tokens = {{.id = 8}, {.id = 5}};
  sampled[1].num_accepted_draft = 1;
  sampled[1].next_draft = {12};
  sampled[1].error = "structured output: refused";
  const auto outputs = scheduler.Update(output, sampled, /*ran=*/true);
  ASSERT_EQ(outputs.size(), 2U);
  ASSERT_EQ(outputs[0].size(), 2U);
  EXPECT_EQ(outputs[0][1].finish_reason, FinishReason::kEos);
  EXPECT_FALSE(outputs[0][1].error.has_value());
  EXPECT_EQ(a->generated_token_ids, (std::vector<int32_t>{7, 8, 2}));
  EXPECT_EQ(a->state, RequestState::kFinished);
  EXPECT_TRUE(a->draft_token_ids.empty());
  ASSERT_EQ(outputs[1].size(), 3U);  // two tokens, then the error
  EXPECT_FALSE(outputs[1][2].token_id.has_value());
  EXPECT_EQ(outputs[1][2].error, "structured output: refused");
  EXPECT_EQ(outputs[1][2].completion_tokens, 3);
  EXPECT_EQ(b->state, RequestState::kFailed);
  EXPECT_TRUE(b->draft_token_ids.empty());
  EXPECT_EQ(scheduler.stats().spec_decode_drafts, 2);
  EXPECT_EQ(scheduler.stats().spec_decode_draft_tokens, 5);
  EXPECT_EQ(scheduler.stats().spec_decode_accepted_tokens, 2 + 1);  // a's 10 was not appended
  EXPECT_EQ(scheduler.num_running(), 0U);
}

}  // namespace
}  // namespace infer
