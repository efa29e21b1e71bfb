#include "infer/engine/scheduler.h"

#include <algorithm>

#include "infer/core/error.h"

namespace infer {

StaticScheduler::StaticScheduler(const EngineConfig& config)
    : max_batch_size_(config.max_batch_size),
      max_waiting_requests_(config.max_waiting_requests),
      batch_wait_timeout_s_(config.batch_wait_timeout_s) {
  config.Validate();
}

bool StaticScheduler::Add(std::shared_ptr<Request> request) {
  INFER_CHECK(request != nullptr, "scheduler: null request");
  if (static_cast<int64_t>(waiting_.size()) >= max_waiting_requests_) return false;
  waiting_.push_back(std::move(request));
  return true;
}

bool StaticScheduler::ActiveRunning() const {
  return std::any_of(active_.begin(), active_.end(), [](const auto& r) { return !r->done(); });
}

const std::vector<std::shared_ptr<Request>>& StaticScheduler::Schedule(double now_s) {
  if (ActiveRunning()) return active_;
  active_.clear();
  if (waiting_.empty()) {
    batch_wait_deadline_s_.reset();
    return active_;
  }
  if (!batch_wait_deadline_s_) batch_wait_deadline_s_ = now_s + batch_wait_timeout_s_;
  const bool full = static_cast<int64_t>(waiting_.size()) >= max_batch_size_;
  if (!full && now_s < *batch_wait_deadline_s_) return active_;
  const auto take = std::min<size_t>(waiting_.size(), static_cast<size_t>(max_batch_size_));
  active_.assign(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(take));
  waiting_.erase(waiting_.begin(), waiting_.begin() + static_cast<std::ptrdiff_t>(take));
  batch_wait_deadline_s_.reset();
  return active_;
}

std::shared_ptr<Request> StaticScheduler::Abort(std::string_view request_id) {
  const auto matches = [&](const auto& r) { return r->request_id == request_id; };
  if (auto it = std::find_if(waiting_.begin(), waiting_.end(), matches); it != waiting_.end()) {
    std::shared_ptr<Request> request = *it;
    waiting_.erase(it);
    if (waiting_.empty()) batch_wait_deadline_s_.reset();
    request->state = RequestState::kFailed;
    request->error = "request cancelled";
    return request;
  }
  if (auto it = std::find_if(active_.begin(), active_.end(), matches);
      it != active_.end() && !(*it)->done()) {
    (*it)->state = RequestState::kFailed;
    (*it)->error = "request cancelled";
    return *it;
  }
  return nullptr;
}

bool StaticScheduler::HasWork() const { return !waiting_.empty() || ActiveRunning(); }

}  // namespace infer
