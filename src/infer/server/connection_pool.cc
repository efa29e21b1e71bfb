#include "infer/server/connection_pool.h"

#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include <spdlog/spdlog.h>

namespace infer::server {
namespace {

thread_local bool t_over_capacity = false;
thread_local ConnectionPool* t_pool = nullptr;
thread_local int t_close_when_idle = -1;  // a worker's connection, closed when it is idle

constexpr uint32_t kParkedEvents = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
// The parking thread looks at the idle deadlines at least this often.
constexpr int kSweepMs = 200;

}  // namespace

ConnectionPool::ConnectionPool(size_t workers, size_t overflow_workers, Serve serve,
                               size_t max_parked)
    : serve_(std::move(serve)), max_parked_(std::max<size_t>(max_parked, 1)) {
  if (serve_) {
    epoll_fd_ = ::epoll_create1(EPOLL_CLOEXEC);
    wake_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    epoll_event wake{};
    wake.events = EPOLLIN;
    wake.data.fd = wake_fd_;
    if (epoll_fd_ < 0 || wake_fd_ < 0 ||
        ::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, wake_fd_, &wake) != 0) {
      // Without epoll, idle connections are closed rather than parked.
      spdlog::warn("cannot wait on idle connections ({}): they are closed instead",
                   std::strerror(errno));
      parking_stopped_ = true;
    } else {
      parking_thread_ = std::thread([this] { WatchParked(); });
    }
  }
  for (size_t i = 0; i < workers; ++i) {
    workers_.threads.emplace_back([this] { Work(workers_, false); });
  }
  for (size_t i = 0; i < overflow_workers; ++i) {
    overflow_.threads.emplace_back([this] { Work(overflow_, true); });
  }
  // Every thread waits for jobs before the first is taken: a job would otherwise find no idle
  // worker yet and go to the overflow lane (or, with none, wait forever).
  std::unique_lock lock(mutex_);
  all_started_.wait(lock,
                    [&] { return workers_.idle == workers && overflow_.idle == overflow_workers; });
}

ConnectionPool::~ConnectionPool() {
  shutdown();
  if (epoll_fd_ >= 0) ::close(epoll_fd_);
  if (wake_fd_ >= 0) ::close(wake_fd_);
}

bool ConnectionPool::OverCapacity() { return t_over_capacity; }

ConnectionPool* ConnectionPool::Current() { return t_pool; }

void ConnectionPool::CloseConnection(int fd) {
  ::shutdown(fd, SHUT_RDWR);
  ::close(fd);
}

void ConnectionPool::CloseWhenIdle(int fd) {
  if (t_pool != this) {
    CloseConnection(fd);
    return;
  }
  if (t_close_when_idle >= 0) CloseConnection(t_close_when_idle);
  t_close_when_idle = fd;
}

void ConnectionPool::enqueue(std::function<void()> fn) {
  std::lock_guard lock(mutex_);
  // A worker that is idle and not already promised to a queued job takes it.
  Lane& lane = workers_.idle > workers_.jobs.size() ? workers_ : overflow_;
  lane.jobs.push_back(std::move(fn));
  lane.ready.notify_one();
}

void ConnectionPool::shutdown() {
  // The parking thread first: it may still hand connections to the workers.
  std::vector<int> parked;
  {
    std::lock_guard lock(parked_mutex_);
    parking_stopped_ = true;
    for (const auto& [fd, entry] : parked_) parked.push_back(fd);
    parked_.clear();
    by_deadline_.clear();
  }
  if (parking_thread_.joinable()) {
    const uint64_t one = 1;
    if (::write(wake_fd_, &one, sizeof(one)) < 0) {
      spdlog::warn("cannot wake the parking thread: {}", std::strerror(errno));
    }
    parking_thread_.join();
  }
  for (const int fd : parked) CloseConnection(fd);
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

void ConnectionPool::Park(int fd, size_t requests_left, double idle_s) {
  int evicted = -1;
  {
    std::lock_guard lock(parked_mutex_);
    if (parking_stopped_) {
      evicted = fd;
    } else {
      if (parked_.size() >= max_parked_) {
        // The connection idle longest makes room (nginx does the same with keep-alive ones).
        evicted = by_deadline_.begin()->second;
        Unpark(evicted);
      }
      const auto deadline = Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                               std::chrono::duration<double>(idle_s));
      epoll_event event{};
      event.events = kParkedEvents;
      event.data.fd = fd;
      parked_[fd] = Parked{deadline, requests_left};
      by_deadline_.emplace(deadline, fd);
      if (::epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, fd, &event) != 0) {
        spdlog::warn("cannot wait on an idle connection: {}", std::strerror(errno));
        parked_.erase(fd);
        by_deadline_.erase({deadline, fd});
        if (evicted >= 0) CloseConnection(evicted);
        evicted = fd;
      }
    }
  }
  if (evicted >= 0) CloseConnection(evicted);
}

size_t ConnectionPool::parked() const {
  std::lock_guard lock(parked_mutex_);
  return parked_.size();
}

void ConnectionPool::Unpark(int fd) {
  const auto it = parked_.find(fd);
  if (it == parked_.end()) return;
  ::epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, fd, nullptr);
  by_deadline_.erase({it->second.deadline, fd});
  parked_.erase(it);
}

void ConnectionPool::WatchParked() {
  std::array<epoll_event, 64> events{};
  while (true) {
    int timeout_ms = kSweepMs;
    {
      std::lock_guard lock(parked_mutex_);
      if (parking_stopped_) return;
      if (!by_deadline_.empty()) {
        const auto until = std::chrono::ceil<std::chrono::milliseconds>(
            by_deadline_.begin()->first - Clock::now());
        timeout_ms = static_cast<int>(std::clamp<int64_t>(until.count(), 0, kSweepMs));
      }
    }
    const int n =
        ::epoll_wait(epoll_fd_, events.data(), static_cast<int>(events.size()), timeout_ms);
    if (n < 0 && errno != EINTR) {
      spdlog::error("waiting on idle connections failed: {}", std::strerror(errno));
      std::this_thread::sleep_for(std::chrono::milliseconds(kSweepMs));
    }
    std::vector<int> to_close;
    std::vector<std::pair<int, size_t>> to_serve;
    {
      std::lock_guard lock(parked_mutex_);
      if (parking_stopped_) return;
      for (int i = 0; i < n; ++i) {
        const int fd = events[static_cast<size_t>(i)].data.fd;
        const auto it = parked_.find(fd);
        if (fd == wake_fd_ || it == parked_.end()) continue;
        char byte = 0;
        const ssize_t peeked = ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT);
        if (peeked > 0) {  // the next request began
          to_serve.emplace_back(fd, it->second.requests_left);
          Unpark(fd);
        } else if (peeked < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) {
          epoll_event event{};
          event.events = kParkedEvents;
          event.data.fd = fd;
          ::epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, fd, &event);
        } else {  // the client hung up (0) or the connection failed
          to_close.push_back(fd);
          Unpark(fd);
        }
      }
      const auto now = Clock::now();
      while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
        const int fd = by_deadline_.begin()->second;
        to_close.push_back(fd);
        Unpark(fd);
      }
    }
    for (const int fd : to_close) CloseConnection(fd);
    for (const auto& [fd, left] : to_serve) {
      enqueue([this, fd = fd, left = left] { serve_(fd, left); });
    }
  }
}

void ConnectionPool::Work(Lane& lane, bool overflow) {
  t_over_capacity = overflow;
  t_pool = this;
  bool announced = false;  // the constructor waits until every thread is idle once
  while (true) {
    std::function<void()> fn;
    {
      std::unique_lock lock(mutex_);
      ++lane.idle;
      if (t_close_when_idle >= 0) {
        // Idle before the client can see its connection end (CloseWhenIdle).
        const int fd = std::exchange(t_close_when_idle, -1);
        lock.unlock();
        CloseConnection(fd);
        lock.lock();
      }
      if (!announced) {
        announced = true;
        all_started_.notify_all();
      }
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
