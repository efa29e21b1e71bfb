#include "infer/server/connection_pool.h"

namespace infer::server {
namespace {
thread_local bool t_over_capacity = false;
}  // namespace

ConnectionPool::ConnectionPool(size_t workers, size_t overflow_workers) {
  for (size_t i = 0; i < workers; ++i) {
    workers_.threads.emplace_back([this] { Work(workers_, false); });
  }
  for (size_t i = 0; i < overflow_workers; ++i) {
    overflow_.threads.emplace_back([this] { Work(overflow_, true); });
  }
}

ConnectionPool::~ConnectionPool() { shutdown(); }

bool ConnectionPool::OverCapacity() { return t_over_capacity; }

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard lock(mutex_);
  // A worker that is idle and not already promised to a queued connection takes it.
  Lane& lane = workers_.idle > workers_.jobs.size() ? workers_ : overflow_;
  lane.jobs.push_back(std::move(fn));
  lane.ready.notify_one();
}

void ConnectionPool::shutdown() {
  {
    std::lock_guard lock(mutex_);
    if (shutdown_) return;
    shutdown_ = true;
  }
  workers_.ready.notify_all();
  overflow_.ready.notify_all();
  for (Lane* lane : {&workers_, &overflow_}) {
    for (std::thread& thread : lane->threads) thread.join();
  }
}

void ConnectionPool::Work(Lane& lane, bool overflow) {
  t_over_capacity = overflow;
  while (true) {
    std::function<void()> fn;
    {
      std::unique_lock lock(mutex_);
      ++lane.idle;
      lane.ready.wait(lock, [&] { return !lane.jobs.empty() || shutdown_; });
      --lane.idle;
      if (lane.jobs.empty()) return;  // shutting down, nothing left
      fn = std::move(lane.jobs.front());
      lane.jobs.pop_front();
    }
    fn();
  }
}

}  // namespace infer::server
