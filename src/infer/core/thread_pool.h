// A fixed pool of worker threads for data-parallel kernels; the calling thread takes part.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace infer {

// Number of CPUs this process may run on (sched_getaffinity), at least 1.
int AvailableCpus();

class ThreadPool {
 public:
  // num_threads <= 0 means AvailableCpus(). The pool starts num_threads - 1 workers.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return static_cast<int>(workers_.size()) + 1; }

  // Runs fn(task_idx) for task_idx in [0, num_tasks) across the pool and waits for all.
  // The first exception thrown by a task is rethrown here. Called from inside a task, it
  // runs the tasks inline (no nested parallelism).
  void RunTasks(int num_tasks, const std::function<void(int)>& fn);

  // Splits [0, n) into num_threads() contiguous chunks (multiples of `grain`, except the
  // last) and runs fn(begin, end) on each.
  void ParallelFor(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void WorkerLoop(uint64_t seen);
  // Claims and runs tasks of run `run` until none is left.
  void DrainTasks(uint32_t run, const std::function<void(int)>& fn, int num_tasks);

  std::vector<std::thread> workers_;
  std::mutex run_mutex_;  // one RunTasks at a time
  std::atomic<uint64_t> generation_{0};
  // The run in progress, written under wake_mutex_ before the ticket opens it.
  uint32_t run_id_ = 0;
  const std::function<void(int)>* run_fn_ = nullptr;
  int run_num_tasks_ = 0;
  // (run id << 32) | index of the next unclaimed task of that run. A task is claimed by a
  // compare-exchange that checks the run id and the bound, so a worker that wakes late, or is
  // preempted between claims, can neither take a task of a later run nor use up one of its
  // tickets.
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> pending_tasks_{0};
  std::mutex error_mutex_;
  std::exception_ptr first_error_;
  std::atomic<bool> stop_{false};
  // Sleeping after the spin uses a mutex + condition variable: libstdc++ 12's
  // std::atomic::wait can miss a notify_all.
  std::mutex wake_mutex_;
  std::condition_variable wake_cv_;
  std::mutex done_mutex_;
  std::condition_variable done_cv_;
};

// pool->ParallelFor(n, grain, fn), or fn(0, n) on this thread when `pool` is null (one-off
// work at load that may run with or without a pool); nothing when n is 0.
inline void ParallelForOn(ThreadPool* pool, int64_t n, int64_t grain,
                          const std::function<void(int64_t, int64_t)>& fn) {
  if (pool != nullptr) {
    pool->ParallelFor(n, grain, fn);
  } else if (n > 0) {
    fn(0, n);
  }
}

}  // namespace infer
