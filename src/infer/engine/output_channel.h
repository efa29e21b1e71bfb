// A thread-safe queue of StepOutputs from the engine thread to the one reader of a request
// (the HTTP handler streaming it), with a bounded wait on the reader side.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <optional>

#include "infer/engine/request.h"

namespace infer {

class OutputChannel {
 public:
  void Push(StepOutput output) {
    {
      std::lock_guard lock(mutex_);
      queue_.push_back(std::move(output));
    }
    ready_.notify_one();
  }

  // The next output, or nullopt if none arrived within `timeout`.
  std::optional<StepOutput> Pop(std::chrono::milliseconds timeout) {
    std::unique_lock lock(mutex_);
    if (!ready_.wait_for(lock, timeout, [&] { return !queue_.empty(); })) return std::nullopt;
    StepOutput output = std::move(queue_.front());
    queue_.pop_front();
    return output;
  }

 private:
  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<StepOutput> queue_;
};

}  // namespace infer
