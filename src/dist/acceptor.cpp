#include "dist/acceptor.h"

#include <chrono>

namespace tc {
namespace dist {

void Acceptor::start(const Socket* listener, size_t max_live, Serve serve) {
  listener_ = listener;
  max_live_ = max_live;
  serve_ = std::move(serve);
  accepting_ = true;
  thread_ = std::thread([this] { loop(); });
}

void Acceptor::stop_accepting() {
  accepting_ = false;
  if (!thread_.joinable()) return;
  listener_->shutdown_both();  // ends the accepting thread's wait at once
  thread_.join();
}

void Acceptor::stop() {
  stop_accepting();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) c->sock.shutdown_both();
  }
  reap(true);
}

size_t Acceptor::live() const {
  std::lock_guard<std::mutex> lock(mu_);
  size_t n = 0;
  for (const auto& c : conns_) n += !c->done;
  return n;
}

// Joins finished connections (every one when `all`) and closes their sockets.
void Acceptor::reap(bool all) {
  std::list<std::unique_ptr<Conn>> finished;
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = conns_.begin(); it != conns_.end();) {
      if (all || (*it)->done) {
        finished.push_back(std::move(*it));
        it = conns_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (auto& c : finished)
    if (c->thread.joinable()) c->thread.join();
}

void Acceptor::loop() {
  while (accepting_) {
    reap(false);
    if (live() >= max_live_) {  // leave the rest in the backlog until a slot frees
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    Socket s;
    tc_status st = accept_tcp(*listener_, 100, &s);
    if (st == TC_ERR_TIMEOUT) continue;
    if (st != TC_OK) {  // out of descriptors or a transient error: back off
      if (!accepting_) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    auto conn = std::make_unique<Conn>();
    conn->sock = std::move(s);
    Conn* raw = conn.get();
    std::lock_guard<std::mutex> lock(mu_);
    try {
      raw->thread = std::thread([this, raw] {
        serve_(raw->sock);
        raw->done = true;
      });
    } catch (const std::exception&) {
      continue;  // no thread: the connection is closed with `conn`
    }
    accepted_++;
    conns_.push_back(std::move(conn));
  }
}

}  // namespace dist
}  // namespace tc
