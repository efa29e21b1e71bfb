// The HTTP server's threads. Worker threads serve requests, one connection each while its
// request is read and answered, with a cap: a connection whose bytes arrive while every worker
// is busy is not queued behind them (where its client would hang until one frees up) but handed
// to a small overflow lane, whose threads answer its request with 503 at once (the pre-routing
// handler asks OverCapacity()) and close it.
//
// Between requests a connection holds no thread: Park() hands it to one parking thread that
// waits on every idle connection at once (epoll), gives it back to a worker when its next bytes
// arrive, and closes it when its client hangs up or stays silent for the idle timeout. So
// thousands of idle keep-alive or silent new connections cost a file descriptor each, not a
// worker, and /health keeps answering beside them.
#pragma once

#include <httplib.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

namespace infer::server {

class ConnectionPool : public httplib::TaskQueue {
 public:
  // Serves a parked connection whose next bytes arrived: its socket and how many more requests
  // it may make. Runs on a worker (or an overflow thread); it closes or parks the socket again.
  using Serve = std::function<void(int fd, size_t requests_left)>;

  // `workers`: the most requests served at once; `overflow_workers`: threads that turn the
  // others away; `max_parked`: the most idle connections kept (beyond it the one idle longest is
  // closed). Without `serve`, Park() closes the socket at once.
  explicit ConnectionPool(size_t workers, size_t overflow_workers = 2, Serve serve = nullptr,
                          size_t max_parked = 4096);
  ~ConnectionPool() override;
  ConnectionPool(const ConnectionPool&) = delete;
  ConnectionPool& operator=(const ConnectionPool&) = delete;

  void enqueue(std::function<void()> fn) override;
  // Closes every parked connection, lets queued jobs finish, then joins every thread (httplib
  // calls it on stop).
  void shutdown() override;

  // Waits for `fd`'s next bytes without a thread: then `serve(fd, requests_left)` runs on a
  // worker. Closed instead if its client hangs up, after `idle_s` of silence, or when the pool
  // is shutting down.
  void Park(int fd, size_t requests_left, double idle_s);
  size_t parked() const;

  // shutdown() and close() of a connection's socket: how every connection ends.
  static void CloseConnection(int fd);
  // The same for the connection this worker served, done once the worker counts as idle again:
  // a client that sees the close and connects at once then finds the worker free, not a 503
  // from the overflow threads. On another thread it closes at once.
  void CloseWhenIdle(int fd);

  // True on an overflow thread: the connection it serves is beyond the cap.
  static bool OverCapacity();
  // The pool whose thread this is (null on other threads).
  static ConnectionPool* Current();

 private:
  using Clock = std::chrono::steady_clock;
  struct Lane {
    std::deque<std::function<void()>> jobs;
    std::vector<std::thread> threads;
    std::condition_variable ready;
    size_t idle = 0;
  };
  struct Parked {
    Clock::time_point deadline;
    size_t requests_left = 0;
  };
  void Work(Lane& lane, bool overflow);
  void WatchParked();
  // Forgets a parked socket (the parking mutex held); the caller closes or serves it.
  void Unpark(int fd);
  void EnqueueLocked(std::function<void()> fn);

  std::mutex mutex_;
  bool shutdown_ = false;
  Lane workers_;
  Lane overflow_;
  std::condition_variable all_started_;

  const Serve serve_;
  const size_t max_parked_;
  mutable std::mutex parked_mutex_;
  bool parking_stopped_ = false;
  std::unordered_map<int, Parked> parked_;
  std::set<std::pair<Clock::time_point, int>> by_deadline_;
  int epoll_fd_ = -1;
  int wake_fd_ = -1;  // eventfd: ends the parking thread's wait
  std::thread parking_thread_;
};

}  // namespace infer::server
