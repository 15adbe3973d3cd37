#include "cpu/queue.h"

#include "core/error.h"

namespace tc {
namespace cpu {

WorkQueue::WorkQueue() : worker_([this] { loop(); }) {}

WorkQueue::~WorkQueue() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  worker_.join();
}

void WorkQueue::enqueue(std::function<tc_status()> task) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    tasks_.push_back(std::move(task));
  }
  work_cv_.notify_one();
}

tc_status WorkQueue::sync(std::string* detail) {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [this] { return tasks_.empty() && !busy_; });
  tc_status st = first_error_;
  if (detail) *detail = first_detail_;
  first_error_ = TC_OK;
  first_detail_.clear();
  return st;
}

void WorkQueue::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    work_cv_.wait(lock, [this] { return stop_ || !tasks_.empty(); });
    if (tasks_.empty()) return;  // stop requested and drained
    auto task = std::move(tasks_.front());
    tasks_.pop_front();
    busy_ = true;
    lock.unlock();
    tc_status st;
    try {
      st = task();
    } catch (const std::bad_alloc&) {
      st = fail(TC_ERR_ALLOC, "out of memory while running enqueued work");
    } catch (const std::exception& e) {
      st = fail(TC_ERR_INTERNAL, "enqueued work threw: %s", e.what());
    }
    std::string detail = st == TC_OK ? std::string() : last_detail();
    task = nullptr;  // release kept storage before reporting idle
    lock.lock();
    busy_ = false;
    if (st != TC_OK && first_error_ == TC_OK) {
      first_error_ = st;
      first_detail_ = std::move(detail);
    }
    if (tasks_.empty()) idle_cv_.notify_all();
  }
}

}  // namespace cpu
}  // namespace tc
