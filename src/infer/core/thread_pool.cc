#include "infer/core/thread_pool.h"

#include <sched.h>

#include <algorithm>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace infer {

namespace {
thread_local bool tls_inside_task = false;

// Spinning briefly before sleeping keeps decode-step dispatch in the microseconds: a
// decode step issues ~100 parallel kernels, and a futex wake-up costs tens of microseconds.
constexpr int kSpinIterations = 20000;

inline void CpuRelax() {
#if defined(__x86_64__)
  _mm_pause();
#endif
}
}  // namespace

int AvailableCpus() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1U, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = AvailableCpus();
  workers_.reserve(static_cast<size_t>(num_threads - 1));
  // Workers start from the generation current now, not when they first run: a worker that
  // is scheduled late must still see every later run (and the destructor's stop).
  const uint64_t start_generation = generation_.load();
  for (int i = 1; i < num_threads; ++i) {
    workers_.emplace_back([this, start_generation] { WorkerLoop(start_generation); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(wake_mutex_);
    stop_.store(true);
    generation_.fetch_add(1);
  }
  wake_cv_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::DrainTasks(uint32_t run, const std::function<void(int)>& fn, int num_tasks) {
  tls_inside_task = true;
  while (true) {
    uint64_t ticket = ticket_.load();
    do {
      if (static_cast<uint32_t>(ticket >> 32) != run ||
          static_cast<uint32_t>(ticket) >= static_cast<uint32_t>(num_tasks)) {
        tls_inside_task = false;
        return;
      }
    } while (!ticket_.compare_exchange_weak(ticket, ticket + 1));
    try {
      fn(static_cast<int>(static_cast<uint32_t>(ticket)));
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!first_error_) first_error_ = std::current_exception();
    }
    if (pending_tasks_.fetch_sub(1) == 1) {
      std::lock_guard<std::mutex> lock(done_mutex_);
      done_cv_.notify_all();
    }
  }
}

void ThreadPool::WorkerLoop(uint64_t seen) {
  while (true) {
    for (int spin = 0; spin < kSpinIterations && generation_.load() == seen; ++spin) CpuRelax();
    uint32_t run = 0;
    const std::function<void(int)>* fn = nullptr;
    int num_tasks = 0;
    {
      std::unique_lock<std::mutex> lock(wake_mutex_);
      wake_cv_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_.load()) return;
      // The latest run, which may already be over: then every claim fails.
      run = run_id_;
      fn = run_fn_;
      num_tasks = run_num_tasks_;
    }
    if (fn != nullptr) DrainTasks(run, *fn, num_tasks);
  }
}

void ThreadPool::RunTasks(int num_tasks, const std::function<void(int)>& fn) {
  if (num_tasks <= 0) return;
  if (tls_inside_task || workers_.empty() || num_tasks == 1) {
    for (int task = 0; task < num_tasks; ++task) fn(task);
    return;
  }
  std::lock_guard<std::mutex> lock(run_mutex_);
  first_error_ = nullptr;
  pending_tasks_.store(num_tasks);
  uint32_t run = 0;
  {
    std::lock_guard<std::mutex> wake_lock(wake_mutex_);
    run = ++run_id_;
    run_fn_ = &fn;
    run_num_tasks_ = num_tasks;
    ticket_.store(static_cast<uint64_t>(run) << 32);  // opens the run
    generation_.fetch_add(1);
  }
  wake_cv_.notify_all();
  DrainTasks(run, fn, num_tasks);
  for (int spin = 0; spin < kSpinIterations && pending_tasks_.load() != 0; ++spin) CpuRelax();
  if (pending_tasks_.load() != 0) {
    std::unique_lock<std::mutex> done_lock(done_mutex_);
    done_cv_.wait(done_lock, [&] { return pending_tasks_.load() == 0; });
  }
  if (first_error_) std::rethrow_exception(first_error_);
}

void ThreadPool::ParallelFor(int64_t n, int64_t grain,
                             const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  grain = std::max<int64_t>(grain, 1);
  const int64_t num_grains = (n + grain - 1) / grain;
  const int num_chunks = static_cast<int>(std::min<int64_t>(num_threads(), num_grains));
  const int64_t grains_per_chunk = num_grains / num_chunks;
  const int64_t extra = num_grains % num_chunks;
  RunTasks(num_chunks, [&](int chunk) {
    const int64_t first = chunk * grains_per_chunk + std::min<int64_t>(chunk, extra);
    const int64_t count = grains_per_chunk + (chunk < extra ? 1 : 0);
    const int64_t begin = first * grain;
    const int64_t end = std::min(n, (first + count) * grain);
    if (begin < end) fn(begin, end);
  });
}

}  // namespace infer
