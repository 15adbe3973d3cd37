// What a member turned down on its control connections, as its servers
// (rank 0's rendezvous store, a weight server) and its clients (every
// rank's store connection, a compute client) saw it: connections, frames
// and requests refused for their credentials, their integrity, a bound, a
// namespace, their shape or a deadline. One record per group or endpoint,
// shared by its server and client sides, so every rank counts what it
// refused, not only the one hosting the store.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

namespace tc {
namespace dist {

class Refusals {
 public:
  enum class Kind {
    Auth,       // a handshake's proof, or a frame's MAC, failed
    Timeout,    // a handshake or a frame did not finish by its deadline
    Bound,      // a frame or a value larger than allowed, a full store
    Namespace,  // a key outside the setter's namespace
    Malformed,  // bytes that are not a request or reply of the protocol
  };
  void count(Kind kind, const std::string& why) {
    total_++;
    if (kind == Kind::Auth) auth_++;
    std::lock_guard<std::mutex> lock(mu_);
    last_ = why;
  }
  uint64_t total() const { return total_.load(); }
  uint64_t auth() const { return auth_.load(); }
  std::string last() const {
    std::lock_guard<std::mutex> lock(mu_);
    return last_;
  }

 private:
  std::atomic<uint64_t> total_{0}, auth_{0};
  mutable std::mutex mu_;
  std::string last_;
};
using RefusalsRef = std::shared_ptr<Refusals>;

}  // namespace dist
}  // namespace tc
