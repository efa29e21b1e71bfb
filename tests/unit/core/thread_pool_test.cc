#include "infer/core/thread_pool.h"

#include <atomic>
#include <stdexcept>
#include <vector>

#include <gtest/gtest.h>

namespace infer {
namespace {

TEST(ThreadPool, ParallelForCoversEveryIndexOnce) {
  ThreadPool pool(3);
  for (int64_t n : {0, 1, 2, 7, 64, 1001}) {
    for (int64_t grain : {1, 4, 16}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      pool.ParallelFor(n, grain, [&](int64_t begin, int64_t end) {
        EXPECT_EQ(begin % grain, 0);
        for (int64_t i = begin; i < end; ++i) hits[static_cast<size_t>(i)]++;
      });
      for (auto& hit : hits) EXPECT_EQ(hit.load(), 1);
    }
  }
}

TEST(ThreadPool, ManyRunsInARow) {
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  for (int run = 0; run < 2000; ++run) {
    pool.RunTasks(4, [&](int task) { total += task; });
  }
  EXPECT_EQ(total.load(), 2000 * 6);
}

// Back-to-back runs of different sizes on an oversubscribed pool (workers get preempted at
// any point): every task of every run runs exactly once, and none is still running when
// RunTasks returns. A worker that claimed past the end of one run and was preempted must not
// take a task of the next run (it once did: the task ran twice, the run ended while one copy
// was still running, and the kernel's captured locals were gone).
TEST(ThreadPool, BackToBackRunsRunEachTaskOnceAndFinishInside) {
  ThreadPool pool(8);
  constexpr int kMaxTasks = 9;
  std::vector<std::atomic<int>> runs(kMaxTasks);
  std::atomic<int> running{0};
  int failures = 0;
  for (int run = 0; run < 20000 && failures < 5; ++run) {
    const int num_tasks = 2 + run % (kMaxTasks - 1);
    for (auto& count : runs) count.store(0);
    pool.RunTasks(num_tasks, [&](int task) {
      ++running;
      runs[static_cast<size_t>(task)]++;
      --running;
    });
    failures += running.load() != 0;
    EXPECT_EQ(running.load(), 0) << "a task still running after run " << run;
    for (int task = 0; task < kMaxTasks; ++task) {
      const int expected = task < num_tasks ? 1 : 0;
      failures += runs[static_cast<size_t>(task)].load() != expected;
      EXPECT_EQ(runs[static_cast<size_t>(task)].load(), expected)
          << "run " << run << " task " << task;
    }
  }
}

TEST(ThreadPool, RethrowsTheFirstError) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.RunTasks(8,
                             [](int task) {
                               if (task == 5) throw std::runtime_error("task 5 failed");
                             }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> count{0};
  pool.RunTasks(8, [&](int) { count++; });
  EXPECT_EQ(count.load(), 8);
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadPool pool(2);
  std::atomic<int> count{0};
  pool.RunTasks(2, [&](int) { pool.RunTasks(3, [&](int) { count++; }); });
  EXPECT_EQ(count.load(), 6);
}

TEST(ThreadPool, SizedFromTheMachine) {
  ThreadPool pool;
  EXPECT_EQ(pool.num_threads(), AvailableCpus());
  EXPECT_GE(AvailableCpus(), 1);
}

}  // namespace
}  // namespace infer
