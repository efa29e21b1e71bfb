#include "testing/server_process.h"

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <fstream>
#include <string>
#include "testing/paths.h"

extern char** environ;

namespace infer::testing {

ServerProcess::ServerProcess(const std::vector<std::string>& args, int start_timeout_s) {
  std::vector<std::string> argv = {
      ::infer::testing::InferBinary(), "serve", "--host", "127.0.0.1", "--port", "0"};
  // The tests hold outputs to float64 references: f32 products unless a test asks otherwise
  // (the command line's default, auto, is bf16 on AVX512_BF16 and AMX CPUs).
  if (std::find(args.begin(), args.end(), "--matmul-precision") == args.end()) {
    argv.insert(argv.end(), {"--matmul-precision", "f32"});
  }
  argv.insert(argv.end(), args.begin(), args.end());
  int err_pipe[2];
  if (pipe2(err_pipe, O_CLOEXEC) != 0) return;
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, err_pipe[1], 2);
  std::vector<char*> raw;
  for (const auto& arg : argv) raw.push_back(const_cast<char*>(arg.c_str()));
  raw.push_back(nullptr);
  const int spawn_error = posix_spawn(&pid_, raw[0], &actions, nullptr, raw.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(err_pipe[1]);
  if (spawn_error != 0) {
    ::close(err_pipe[0]);
    pid_ = -1;
    return;
  }
  err_fd_ = err_pipe[0];
  drain_ = std::thread([this] { Drain(); });
  // Plain string search: std::regex trips gcc 12's -Wmaybe-uninitialized under ASan.
  const std::string listening = "listening on http://127.0.0.1:";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(start_timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    const std::string text = log();
    const size_t at = text.find(listening);
    if (at != std::string::npos) {
      size_t end = at + listening.size();
      while (end < text.size() && text[end] >= '0' && text[end] <= '9') ++end;
      if (end > at + listening.size() && end < text.size()) {  // the whole number has arrived
        port_ = std::stoi(text.substr(at + listening.size(), end - at - listening.size()));
        return;
      }
    }
    if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
      exited_ = true;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

void ServerProcess::Drain() {
  char buffer[4096];
  while (true) {
    const ssize_t count = ::read(err_fd_, buffer, sizeof(buffer));
    if (count <= 0) return;  // the child closed stderr (it exited)
    std::lock_guard lock(mutex_);
    log_.append(buffer, static_cast<size_t>(count));
  }
}

std::string ServerProcess::log() const {
  std::lock_guard lock(mutex_);
  return log_;
}

int ServerProcess::Stop(int signal, int timeout_s) {
  if (pid_ <= 0 || exited_) return -1;
  ::kill(pid_, signal);
  for (int i = 0; i < timeout_s * 50; ++i) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      exited_ = true;
      if (drain_.joinable()) drain_.join();
      return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return -1;
}

long ServerProcess::RssKib() const {
  std::ifstream status("/proc/" + std::to_string(pid_) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::stol(line.substr(6));
  }
  return -1;
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0 && !exited_) {
    ::kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (drain_.joinable()) drain_.join();
  if (err_fd_ >= 0) ::close(err_fd_);
}

}  // namespace infer::testing
