// The accept loop of the control servers (rendezvous store, remote
// endpoint), with bounded resources: each connection is served on its own
// thread, at most `max_live` at once; past that, connections wait in the
// listen backlog (not in our descriptors) until a slot frees, which a silent
// peer's handshake deadline guarantees. Finished connections are reaped as
// new ones arrive, so a stream of short connections leaves the descriptor
// and thread counts flat. Running out of descriptors (EMFILE) backs off
// instead of spinning, and a thread that cannot be started closes its
// connection instead of throwing out of the loop.
#pragma once

#include <atomic>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <thread>

#include "dist/net.h"

namespace tc {
namespace dist {

class Acceptor {
 public:
  using Serve = std::function<void(Socket&)>;
  // Starts accepting on `listener` (which must outlive stop()).
  void start(const Socket* listener, size_t max_live, Serve serve);
  // Stops accepting (the listener is no longer touched afterwards); the
  // connections being served go on.
  void stop_accepting();
  // Stops accepting, shuts every connection down and joins every thread.
  void stop();
  ~Acceptor() { stop(); }

  size_t live() const;  // connections being served
  uint64_t accepted() const { return accepted_.load(); }

 private:
  struct Conn {
    Socket sock;
    std::thread thread;
    std::atomic<bool> done{false};
  };
  void loop();
  void reap(bool all);

  const Socket* listener_ = nullptr;
  size_t max_live_ = 0;
  Serve serve_;
  std::atomic<bool> accepting_{false};
  std::atomic<uint64_t> accepted_{0};
  mutable std::mutex mu_;
  std::list<std::unique_ptr<Conn>> conns_;
  std::thread thread_;
};

}  // namespace dist
}  // namespace tc
