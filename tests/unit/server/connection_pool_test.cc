// ConnectionPool without a server: socket pairs stand in for connections. A parked connection
// holds no worker; its next bytes hand it to `serve`, its client's hang-up or silence closes it,
// and the cap on parked connections closes the one idle longest.
#include "infer/server/connection_pool.h"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <atomic>
#include <chrono>
#include <future>
#include <mutex>
#include <thread>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

namespace infer::server {
namespace {

using Clock = std::chrono::steady_clock;

struct Pair {
  int server = -1;  // parked in the pool (the pool closes it)
  int client = -1;  // the test's end
};

Pair MakePair() {
  std::array<int, 2> fds{};
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM, 0, fds.data()), 0);
  return {fds[0], fds[1]};
}

// True once the other end was closed (a read returns 0) within `timeout_ms`.
bool ClosedWithin(int fd, int timeout_ms) {
  pollfd p{fd, POLLIN, 0};
  if (::poll(&p, 1, timeout_ms) <= 0) return false;
  char byte = 0;
  return ::recv(fd, &byte, 1, MSG_DONTWAIT) == 0;
}

TEST(ConnectionPool, ParkedConnectionIsServedWhenItsBytesArriveAndHoldsNoWorker) {
  std::promise<std::pair<int, size_t>> served;
  // One worker: were it waiting on the parked connection, the job below would go to the
  // overflow lane.
  std::promise<void> parked;
  std::promise<bool> other_job;
  ConnectionPool pool(1, 1, [&](int fd, size_t left) { served.set_value({fd, left}); });
  const Pair pair = MakePair();
  pool.enqueue([&] {
    ConnectionPool::Current()->Park(pair.server, 4, 10.0);
    parked.set_value();
  });
  parked.get_future().wait();
  EXPECT_EQ(pool.parked(), 1u);
  // (The worker signals before it is back waiting for jobs: give it a moment.)
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  pool.enqueue([&] { other_job.set_value(ConnectionPool::OverCapacity()); });
  EXPECT_FALSE(other_job.get_future().get());  // a worker, not the overflow lane, ran it

  auto result = served.get_future();
  EXPECT_EQ(result.wait_for(std::chrono::milliseconds(300)), std::future_status::timeout);
  ASSERT_EQ(::send(pair.client, "G", 1, 0), 1);
  ASSERT_EQ(result.wait_for(std::chrono::seconds(5)), std::future_status::ready);
  const auto [fd, left] = result.get();
  EXPECT_EQ(fd, pair.server);
  EXPECT_EQ(left, 4u);
  EXPECT_EQ(pool.parked(), 0u);
  char byte = 0;
  EXPECT_EQ(::recv(pair.server, &byte, 1, 0), 1);  // the byte is still there for the parser
  EXPECT_EQ(byte, 'G');
  ::close(pair.server);
  ::close(pair.client);
}

TEST(ConnectionPool, SilentConnectionIsClosedAfterItsIdleTime) {
  std::atomic<int> served{0};
  ConnectionPool pool(1, 1, [&](int, size_t) { ++served; });
  const Pair pair = MakePair();
  const auto start = Clock::now();
  pool.Park(pair.server, 1, 0.3);
  EXPECT_TRUE(ClosedWithin(pair.client, 5000));
  const double waited = std::chrono::duration<double>(Clock::now() - start).count();
  EXPECT_GT(waited, 0.25);
  EXPECT_LT(waited, 2.0);
  EXPECT_EQ(served, 0);
  EXPECT_EQ(pool.parked(), 0u);
  ::close(pair.client);
}

TEST(ConnectionPool, ClientHangUpClosesTheParkedConnectionWithoutServingIt) {
  std::atomic<int> served{0};
  ConnectionPool pool(1, 1, [&](int, size_t) { ++served; });
  const Pair pair = MakePair();
  pool.Park(pair.server, 1, 30.0);
  ::close(pair.client);
  const auto deadline = Clock::now() + std::chrono::seconds(5);
  while (pool.parked() > 0 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(pool.parked(), 0u);
  EXPECT_EQ(served, 0);
}

TEST(ConnectionPool, BeyondTheCapTheConnectionIdleLongestIsClosed) {
  ConnectionPool pool(
      1, 0, [](int fd, size_t) { ::close(fd); }, /*max_parked=*/2);
  const Pair first = MakePair();
  const Pair second = MakePair();
  const Pair third = MakePair();
  pool.Park(first.server, 1, 30.0);
  pool.Park(second.server, 1, 30.0);
  pool.Park(third.server, 1, 30.0);
  EXPECT_EQ(pool.parked(), 2u);
  EXPECT_TRUE(ClosedWithin(first.client, 1000));
  EXPECT_FALSE(ClosedWithin(second.client, 100));
  EXPECT_FALSE(ClosedWithin(third.client, 100));
  for (const Pair& pair : {first, second, third}) ::close(pair.client);
}

TEST(ConnectionPool, ShutdownClosesParkedConnectionsAndLaterParksClose) {
  const Pair before = MakePair();
  const Pair after = MakePair();
  {
    ConnectionPool pool(1, 1, [](int fd, size_t) { ::close(fd); });
    pool.Park(before.server, 1, 30.0);
    pool.shutdown();
    EXPECT_TRUE(ClosedWithin(before.client, 1000));
    pool.Park(after.server, 1, 30.0);
    EXPECT_TRUE(ClosedWithin(after.client, 1000));
  }
  ::close(before.client);
  ::close(after.client);
}

TEST(ConnectionPool, JobsBeyondTheWorkersGoToTheOverflowLane) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<bool> first;
  std::promise<bool> second;
  ConnectionPool pool(1, 1);  // after what its jobs use: joined before they are destroyed
  pool.enqueue([&] {
    first.set_value(ConnectionPool::OverCapacity());
    released.wait();
  });
  EXPECT_FALSE(first.get_future().get());
  pool.enqueue([&] { second.set_value(ConnectionPool::OverCapacity()); });
  EXPECT_TRUE(second.get_future().get());
  release.set_value();
}

}  // namespace
}  // namespace infer::server
