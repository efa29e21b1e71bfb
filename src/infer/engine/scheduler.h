// The static-batching scheduler (seed phase 4): FCFS waiting queue with a bound, a bounded wait
// for a batch to fill, and a batch that runs to completion before the next one forms. Pure: no
// model, threads, clock or I/O (the caller passes the time in).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string_view>
#include <vector>

#include "infer/engine/engine_config.h"
#include "infer/engine/request.h"

namespace infer {

class StaticScheduler {
 public:
  explicit StaticScheduler(const EngineConfig& config);

  // Queues a request; false when max_waiting_requests are already waiting (HTTP 503).
  bool Add(std::shared_ptr<Request> request);

  // The batch to run at time `now_s`: the active batch while any of it is not done; otherwise
  // (the finished batch is dropped) a new batch of up to max_batch_size waiting requests, once
  // the batch is full or batch_wait_timeout_s has passed since the first of them was seen;
  // otherwise empty. Requests of a new batch are still kWaiting.
  const std::vector<std::shared_ptr<Request>>& Schedule(double now_s);

  // Cancels a request: a waiting one leaves the queue, an active one becomes kFailed (its slot
  // is skipped from the next step on). Returns it, or null if unknown or already done.
  std::shared_ptr<Request> Abort(std::string_view request_id);

  bool HasWork() const;
  size_t num_waiting() const { return waiting_.size(); }
  const std::vector<std::shared_ptr<Request>>& active() const { return active_; }
  // When the forming batch will be dispatched if it does not fill first (nullopt: none forming).
  std::optional<double> batch_wait_deadline_s() const { return batch_wait_deadline_s_; }

 private:
  bool ActiveRunning() const;

  int64_t max_batch_size_;
  int64_t max_waiting_requests_;
  double batch_wait_timeout_s_;
  std::deque<std::shared_ptr<Request>> waiting_;
  std::vector<std::shared_ptr<Request>> active_;
  std::optional<double> batch_wait_deadline_s_;
};

}  // namespace infer
