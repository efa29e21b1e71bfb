// The HTTP server's worker threads, one per open connection, with a cap: a connection that
// arrives while every worker is busy is not queued behind them (where its client would hang
// until one frees up) but handed to a small overflow lane, whose threads answer its request
// with 503 at once (the pre-routing handler asks OverCapacity()) and close it.
#pragma once

#include <httplib.h>

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace infer::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  // `workers`: the most connections served at once; `overflow_workers`: threads that turn the
  // others away.
  explicit ConnectionPool(size_t workers, size_t overflow_workers = 2);
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Lets queued connections finish, then joins every thread (httplib calls it on stop).
  void shutdown() override;

  // True on an overflow thread: the connection it serves is beyond the cap.
  static bool OverCapacity();

 private:
  struct Lane {
    std::deque<std::function<void()>> jobs;
    std::vector<std::thread> threads;
    std::condition_variable ready;
    size_t idle = 0;
  };
  void Work(Lane& lane, bool overflow);

  std::mutex mutex_;
  bool shutdown_ = false;
  Lane workers_;
  Lane overflow_;
};

}  // namespace infer::server
