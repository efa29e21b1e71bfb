// StaticScheduler with scripted requests and a caller-supplied clock: batch formation, FCFS,
// bounded wait, run-to-completion, queue bound and abort. No model, no sleeps.
#include "infer/engine/scheduler.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "infer/core/error.h"

namespace infer {
namespace {

EngineConfig Config(int64_t max_batch_size, int64_t max_waiting = 64, double wait_s = 0.0) {
  EngineConfig config;
  config.max_batch_size = max_batch_size;
  config.max_waiting_requests = max_waiting;
  config.batch_wait_timeout_s = wait_s;
  return config;
}

std::shared_ptr<Request> MakeRequest(const std::string& id) {
  return std::make_shared<Request>(id, std::vector<int32_t>{1, 2, 3}, SamplingParams{}, 0.0);
}

std::vector<std::string> Ids(const std::vector<std::shared_ptr<Request>>& batch) {
  std::vector<std::string> ids;
  ids.reserve(batch.size());
  for (const auto& request : batch) ids.push_back(request->request_id);
  return ids;
}

void FinishAll(const std::vector<std::shared_ptr<Request>>& batch) {
  for (const auto& request : batch) request->state = RequestState::kFinished;
}

TEST(RequestTest, StartsWaitingWithNothingGenerated) {
  const Request request("a", {5, 6}, SamplingParams{}, 1.5);
  EXPECT_EQ(request.state, RequestState::kWaiting);
  EXPECT_TRUE(request.generated_token_ids.empty());
  EXPECT_FALSE(request.finish_reason.has_value());
  EXPECT_FALSE(request.error.has_value());
  EXPECT_EQ(request.num_prompt_tokens(), 2);
  EXPECT_FALSE(request.done());
  EXPECT_EQ(RequestStateName(RequestState::kDecode), "decode");
}

TEST(RequestTest, SeededRequestsDrawTheSameTokens) {
  SamplingParams params;
  params.seed = 7;
  Request a("a", {1}, params, 0.0);
  Request b("b", {1}, params, 0.0);
  std::vector<float> logits_a(50, 0.0F);
  std::vector<float> logits_b(50, 0.0F);
  for (int i = 0; i < 5; ++i) {
    EXPECT_EQ(a.sampler.Sample(logits_a, a.prompt_token_ids),
              b.sampler.Sample(logits_b, b.prompt_token_ids));
  }
}

TEST(EngineConfigTest, DefaultsMatchTheSeedAndValidate) {
  const EngineConfig config;
  EXPECT_EQ(config.max_seq_len, 4096);
  EXPECT_EQ(config.max_batch_size, 8);
  EXPECT_EQ(config.max_waiting_requests, 64);
  EXPECT_DOUBLE_EQ(config.batch_wait_timeout_s, 0.05);
  EXPECT_EQ(config.batching_mode, "static");
  EXPECT_EQ(config.scheduler_policy, "fcfs");
  EXPECT_EQ(config.kv_cache_backend, "contiguous");
  EXPECT_NO_THROW(config.Validate());
}

TEST(EngineConfigTest, RejectsUnsupportedValues) {
  const auto rejects = [](auto mutate) {
    EngineConfig config;
    mutate(config);
    EXPECT_THROW(config.Validate(), Error);
  };
  rejects([](EngineConfig& c) { c.batching_mode = "continuous"; });
  rejects([](EngineConfig& c) { c.scheduler_policy = "priority"; });
  rejects([](EngineConfig& c) { c.kv_cache_backend = "paged"; });
  rejects([](EngineConfig& c) { c.max_batch_size = 0; });
  rejects([](EngineConfig& c) { c.max_waiting_requests = 0; });
  rejects([](EngineConfig& c) { c.max_seq_len = 1; });
  rejects([](EngineConfig& c) { c.batch_wait_timeout_s = -1; });
}

TEST(SchedulerTest, FormsABatchAndKeepsItWhileRunning) {
  StaticScheduler scheduler(Config(4));
  for (const char* id : {"a", "b", "c"}) ASSERT_TRUE(scheduler.Add(MakeRequest(id)));
  const auto batch = scheduler.Schedule(0.0);
  EXPECT_EQ(Ids(batch), (std::vector<std::string>{"a", "b", "c"}));  // FCFS
  EXPECT_EQ(scheduler.num_waiting(), 0U);
  EXPECT_EQ(Ids(scheduler.Schedule(1.0)), Ids(batch));
}

TEST(SchedulerTest, ClearsAFinishedBatch) {
  StaticScheduler scheduler(Config(4));
  scheduler.Add(MakeRequest("a"));
  scheduler.Add(MakeRequest("b"));
  FinishAll(scheduler.Schedule(0.0));
  EXPECT_FALSE(scheduler.HasWork());
  EXPECT_TRUE(scheduler.Schedule(0.0).empty());
  EXPECT_TRUE(scheduler.active().empty());
}

TEST(SchedulerTest, PartiallyFinishedBatchRunsToCompletion) {
  StaticScheduler scheduler(Config(4));
  for (const char* id : {"a", "b", "c"}) scheduler.Add(MakeRequest(id));
  const auto batch = scheduler.Schedule(0.0);
  batch[0]->state = RequestState::kFinished;
  batch[1]->state = RequestState::kFailed;
  batch[2]->state = RequestState::kDecode;
  scheduler.Add(MakeRequest("d"));  // does not join the running batch
  EXPECT_EQ(Ids(scheduler.Schedule(1.0)), (std::vector<std::string>{"a", "b", "c"}));
  batch[2]->state = RequestState::kFinished;
  EXPECT_EQ(Ids(scheduler.Schedule(2.0)), (std::vector<std::string>{"d"}));
}

TEST(SchedulerTest, RejectsPastMaxWaitingRequests) {
  StaticScheduler scheduler(Config(4, 2));
  EXPECT_TRUE(scheduler.Add(MakeRequest("a")));
  EXPECT_TRUE(scheduler.Add(MakeRequest("b")));
  EXPECT_FALSE(scheduler.Add(MakeRequest("c")));
  EXPECT_EQ(scheduler.num_waiting(), 2U);
}

TEST(SchedulerTest, RespectsMaxBatchSize) {
  StaticScheduler scheduler(Config(2));
  for (const char* id : {"a", "b", "c", "d", "e"}) scheduler.Add(MakeRequest(id));
  EXPECT_EQ(Ids(scheduler.Schedule(0.0)), (std::vector<std::string>{"a", "b"}));
  FinishAll(scheduler.active());
  EXPECT_EQ(Ids(scheduler.Schedule(0.0)), (std::vector<std::string>{"c", "d"}));
  FinishAll(scheduler.active());
  EXPECT_EQ(Ids(scheduler.Schedule(0.0)), (std::vector<std::string>{"e"}));
  FinishAll(scheduler.active());
  EXPECT_FALSE(scheduler.HasWork());
}

TEST(SchedulerTest, HasWork) {
  StaticScheduler scheduler(Config(4));
  EXPECT_FALSE(scheduler.HasWork());
  scheduler.Add(MakeRequest("a"));
  EXPECT_TRUE(scheduler.HasWork());
  FinishAll(scheduler.Schedule(0.0));
  EXPECT_FALSE(scheduler.HasWork());
}

TEST(SchedulerTest, FullBatchDispatchesWithoutWaiting) {
  StaticScheduler scheduler(Config(4, 64, 1.0));
  for (const char* id : {"a", "b", "c", "d"}) scheduler.Add(MakeRequest(id));
  EXPECT_EQ(scheduler.Schedule(10.0).size(), 4U);
}

TEST(SchedulerTest, PartialBatchDispatchesWhenTheWaitExpires) {
  StaticScheduler scheduler(Config(4, 64, 0.01));
  scheduler.Add(MakeRequest("a"));
  scheduler.Add(MakeRequest("b"));
  EXPECT_TRUE(scheduler.Schedule(10.0).empty());
  ASSERT_TRUE(scheduler.batch_wait_deadline_s().has_value());
  EXPECT_DOUBLE_EQ(*scheduler.batch_wait_deadline_s(), 10.01);
  scheduler.Add(MakeRequest("c"));  // joins the forming batch; the deadline stays
  EXPECT_TRUE(scheduler.Schedule(10.005).empty());
  EXPECT_EQ(Ids(scheduler.Schedule(10.015)), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_FALSE(scheduler.batch_wait_deadline_s().has_value());
}

TEST(SchedulerTest, WaitTimerStartsFreshForTheNextBatch) {
  StaticScheduler scheduler(Config(4, 64, 0.01));
  scheduler.Add(MakeRequest("a"));
  EXPECT_TRUE(scheduler.Schedule(0.0).empty());
  FinishAll(scheduler.Schedule(0.02));
  scheduler.Add(MakeRequest("b"));
  EXPECT_TRUE(scheduler.Schedule(5.0).empty());  // not dispatched on the old deadline
  EXPECT_DOUBLE_EQ(*scheduler.batch_wait_deadline_s(), 5.01);
  EXPECT_EQ(Ids(scheduler.Schedule(5.02)), (std::vector<std::string>{"b"}));
}

TEST(SchedulerTest, AbortRemovesWaitingAndFailsActiveRequests) {
  StaticScheduler scheduler(Config(1));
  scheduler.Add(MakeRequest("a"));
  scheduler.Add(MakeRequest("b"));
  ASSERT_EQ(Ids(scheduler.Schedule(0.0)), (std::vector<std::string>{"a"}));
  const auto waiting = scheduler.Abort("b");
  ASSERT_NE(waiting, nullptr);
  EXPECT_EQ(waiting->state, RequestState::kFailed);
  EXPECT_EQ(scheduler.num_waiting(), 0U);
  const auto active = scheduler.Abort("a");
  ASSERT_NE(active, nullptr);
  EXPECT_TRUE(active->done());
  EXPECT_FALSE(scheduler.HasWork());
  EXPECT_EQ(scheduler.Abort("a"), nullptr);  // already done
  EXPECT_EQ(scheduler.Abort("zzz"), nullptr);
}

}  // namespace
}  // namespace infer
