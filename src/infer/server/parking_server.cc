#include "infer/server/parking_server.h"

#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "infer/server/connection_pool.h"

namespace infer::server {
namespace {

using Clock = std::chrono::steady_clock;

// Waits up to `timeout_ms` (0: not at all) for `events` on `fd`.
bool WaitFor(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  while (true) {
    const int n = ::poll(&p, 1, timeout_ms);
    if (n >= 0) return n > 0;
    if (errno != EINTR) return false;
  }
}

int Milliseconds(time_t sec, time_t usec) {
  return static_cast<int>(std::min<int64_t>(static_cast<int64_t>(sec) * 1000 + usec / 1000,
                                            std::numeric_limits<int>::max()));
}

// A connection's socket as httplib's request parser reads it: buffered reads (the parser asks
// for a byte at a time), per-read and per-write timeouts, and a deadline for a request's head.
class SocketStream final : public httplib::Stream {
 public:
  SocketStream(int fd, int read_ms, int write_ms)
      : fd_(fd), read_ms_(read_ms), write_ms_(write_ms) {}

  void BeginHead(Clock::time_point deadline) {
    head_deadline_ = deadline;
    in_head_ = true;
  }
  void EndHead() { in_head_ = false; }
  bool buffered() const { return pos_ < end_; }

  bool is_readable() const override { return buffered() || WaitReadable(); }

  // As httplib's own stream: writable within the write timeout, and the peer has not hung up.
  bool is_writable() const override { return WaitFor(fd_, POLLOUT, write_ms_) && PeerOpen(); }

  ssize_t read(char* ptr, size_t size) override {
    if (size == 0) return 0;
    if (!buffered()) {
      if (!WaitReadable()) return -1;
      if (size >= buffer_.size()) return Recv(ptr, size);
      const ssize_t n = Recv(buffer_.data(), buffer_.size());
      if (n <= 0) return n;
      pos_ = 0;
      end_ = static_cast<size_t>(n);
    }
    const size_t n = std::min(size, end_ - pos_);
    std::memcpy(ptr, buffer_.data() + pos_, n);
    pos_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t size) override {
    if (!is_writable()) return -1;
    while (true) {
      const ssize_t n = ::send(fd_, ptr, size, MSG_NOSIGNAL);
      if (n >= 0 || errno != EINTR) return n;
    }
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    Address(true, ip, port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    Address(false, ip, port);
  }
  socket_t socket() const override { return fd_; }

 private:
  bool WaitReadable() const {
    int timeout_ms = read_ms_;
    if (in_head_) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(head_deadline_ - Clock::now());
      if (left.count() <= 0) return false;  // the head took too long in all
      timeout_ms = static_cast<int>(std::min<int64_t>(timeout_ms, left.count()));
    }
    return WaitFor(fd_, POLLIN, timeout_ms);
  }

  ssize_t Recv(char* ptr, size_t size) const {
    while (true) {
      const ssize_t n = ::recv(fd_, ptr, size, 0);
      if (n >= 0 || errno != EINTR) return n;
    }
  }

  // False once the peer closed its end (a read would return 0) or the connection failed.
  bool PeerOpen() const {
    if (!WaitFor(fd_, POLLIN, 0)) return true;
    char byte = 0;
    return ::recv(fd_, &byte, 1, MSG_PEEK | MSG_DONTWAIT) > 0;
  }

  void Address(bool peer, std::string& ip, int& port) const {
    sockaddr_storage address{};
    socklen_t length = sizeof(address);
    auto* generic = reinterpret_cast<sockaddr*>(&address);
    if ((peer ? ::getpeername(fd_, generic, &length) : ::getsockname(fd_, generic, &length)) != 0) {
      return;
    }
    std::array<char, NI_MAXHOST> host{};
    std::array<char, NI_MAXSERV> service{};
    if (::getnameinfo(generic, length, host.data(), host.size(), service.data(), service.size(),
                      NI_NUMERICHOST | NI_NUMERICSERV) == 0) {
      ip = host.data();
      port = std::atoi(service.data());
    }
  }

  const int fd_;
  const int read_ms_;
  const int write_ms_;
  std::array<char, 4096> buffer_{};
  size_t pos_ = 0;
  size_t end_ = 0;
  bool in_head_ = false;
  Clock::time_point head_deadline_;
};

thread_local SocketStream* t_stream = nullptr;

}  // namespace

ParkingServer::ParkingServer(size_t workers, double idle_s, size_t max_parked) : idle_s_(idle_s) {
  new_task_queue = [this, workers, max_parked] {
    return new ConnectionPool(
        workers, 2, [this](int fd, size_t requests_left) { Serve(fd, requests_left); }, max_parked);
  };
}

void ParkingServer::HeadRead() {
  if (t_stream != nullptr) t_stream->EndHead();
}

bool ParkingServer::process_and_close_socket(socket_t sock) {
  Serve(sock, keep_alive_max_count_);
  return true;
}

void ParkingServer::Serve(int fd, size_t requests_left) {
  // Always on a thread of the ConnectionPool that new_task_queue made.
  ConnectionPool& pool = *ConnectionPool::Current();
  const auto readable_now = [fd] { return WaitFor(fd, POLLIN, 0); };
  if (!readable_now()) {  // a new connection with no bytes yet
    pool.Park(fd, requests_left, idle_s_);
    return;
  }
  const int read_ms = Milliseconds(read_timeout_sec_, read_timeout_usec_);
  SocketStream stream(fd, read_ms, Milliseconds(write_timeout_sec_, write_timeout_usec_));
  while (true) {
    const bool last = requests_left <= 1 || ConnectionPool::OverCapacity() ||
                      svr_sock_ == INVALID_SOCKET;  // the server is stopping
    stream.BeginHead(Clock::now() + std::chrono::milliseconds(read_ms));
    t_stream = &stream;
    bool closed = false;
    const bool ok = process_request(stream, last, closed, nullptr);
    t_stream = nullptr;
    --requests_left;
    if (!ok || closed || last) break;
    if (stream.buffered() || readable_now()) continue;  // the next request is already here
    pool.Park(fd, requests_left, idle_s_);
    return;
  }
  pool.CloseWhenIdle(fd);
}

}  // namespace infer::server
