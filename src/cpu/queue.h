// A CPU stream: an ordered queue of work run by one worker thread.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "core/backend.h"
#include "core/trace.h"

namespace tc {
namespace cpu {

class WorkQueue final : public Queue {
 public:
  WorkQueue();
  ~WorkQueue() override;  // drains the queue, then joins the worker

  void enqueue(std::function<tc_status()> task);
  tc_status sync(std::string* detail) override;

 private:
  void loop();

  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<std::function<tc_status()>> tasks_;
  bool busy_ = false;
  bool stop_ = false;
  tc_status first_error_ = TC_OK;
  std::string first_detail_;
  std::thread worker_;
};

// Runs kernel(args) on `queue` when one is given (returning at once), else
// now in the caller's thread; traced either way. The queued copy of `args`
// keeps the op's storage alive until the kernel has run.
template <class Args>
tc_status run_on(Queue* queue, const Args& args, tc_status (*kernel)(const Args&)) {
  if (!queue) return trace::run(args.info, TC_BACKEND_PORTABLE_CPU, [&] { return kernel(args); });
  static_cast<WorkQueue*>(queue)->enqueue(
      [args, kernel] { return trace::run(args.info, TC_BACKEND_PORTABLE_CPU, [&] { return kernel(args); }); });
  return TC_OK;
}

}  // namespace cpu
}  // namespace tc
