// Runs `infer serve` as a child process on 127.0.0.1 with a free port, for tests that talk to
// the real server over loopback.
#pragma once

#include <sys/types.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace infer::testing {

class ServerProcess {
 public:
  // `args` follow `infer serve` (e.g. --model DIR ...); --host 127.0.0.1 --port 0 are added.
  // Waits (up to `start_timeout_s`) for the "listening on" line; started() says if it came.
  explicit ServerProcess(const std::vector<std::string>& args, int start_timeout_s = 120);
  ~ServerProcess();  // SIGKILLs the child if it is still running
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  bool started() const { return port_ > 0; }
  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  // Everything the child wrote to stderr so far.
  std::string log() const;
  // Sends `signal` and waits up to `timeout_s` for the exit; returns the exit code
  // (128 + signal when killed by one), or -1 on timeout.
  int Stop(int signal, int timeout_s = 30);
  // The child's resident memory (VmRSS) in KiB, or -1.
  long RssKib() const;

 private:
  void Drain();

  pid_t pid_ = -1;
  int port_ = -1;
  int err_fd_ = -1;
  bool exited_ = false;
  mutable std::mutex mutex_;
  std::string log_;
  std::thread drain_;
};

}  // namespace infer::testing
