// TCP plumbing for the control connections (rendezvous store, remote
// endpoint): URL parsing, connect/listen, and whole-message I/O that gives
// up at a deadline instead of blocking forever.
#pragma once

#include <chrono>
#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include "tensorcore/types.h"

namespace tc {
namespace dist {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;

inline Deadline deadline_after_ms(int64_t ms) { return Clock::now() + std::chrono::milliseconds(ms); }
inline int64_t ms_left(Deadline d) {
  auto left = std::chrono::duration_cast<std::chrono::milliseconds>(d - Clock::now()).count();
  return left > 0 ? left : 0;
}

// Little-endian u64 of the wire formats (handshake transcripts, requests).
inline void put_u64(std::string* s, uint64_t v) {
  for (int i = 0; i < 8; ++i) s->push_back(char(uint8_t(v >> (8 * i))));
}
inline uint64_t get_u64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}

// "scheme://host:port/path?k=v&k2=v2", split. host may be "[v6addr]".
struct Url {
  std::string scheme, host, path;
  int port = -1;
  std::vector<std::pair<std::string, std::string>> query;
  const std::string* param(const std::string& key) const;
};
// false with *why set when the text is not of that form.
bool parse_url(const std::string& text, Url* out, std::string* why);

// A socket closed on destruction.
class Socket {
 public:
  Socket() = default;
  explicit Socket(int fd) : fd_(fd) {}
  Socket(Socket&& o) noexcept : fd_(o.fd_), spin_us_(o.spin_us()) { o.fd_ = -1; }
  Socket& operator=(Socket&& o) noexcept;
  ~Socket() { close(); }
  int fd() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void close();
  void shutdown_both() const;  // wakes a thread blocked on it (a listener's too)
  // How long a transfer on this socket watches it before blocking when it
  // would block (0, the default: block at once). Spinning saves the
  // wake-up when the peer answers within it, and costs that much CPU
  // otherwise: for a process with a core of its own.
  void set_spin_us(int64_t us) { spin_us_.store(us, std::memory_order_relaxed); }
  int64_t spin_us() const { return spin_us_.load(std::memory_order_relaxed); }

 private:
  int fd_ = -1;
  std::atomic<int64_t> spin_us_{0};  // set while another thread may be waiting
};

// TCP_NODELAY: a frame's last segment leaves at once instead of waiting
// for the acknowledgement of the one before (Nagle), which the peer may
// delay by up to 40 ms. Sockets of connect_tcp and accept_tcp have it.
void set_nodelay(int fd);

// Connects, retrying refused connections until the deadline (the listener
// may not be up yet). TC_ERR_TIMEOUT when it never answers.
tc_status connect_tcp(const std::string& host, int port, Deadline deadline, Socket* out, std::string* why);
// Listens on host:port (port 0: any free port; *bound_port says which).
tc_status listen_tcp(const std::string& host, int port, Socket* out, int* bound_port, std::string* why);
// Accepts one connection, waiting at most `wait_ms`; TC_ERR_TIMEOUT if none came,
// TC_ERR_ALLOC when the process or system is out of descriptors.
tc_status accept_tcp(const Socket& listener, int wait_ms, Socket* out);

// Waits until `s` has bytes to read (or the peer closed it): TC_OK, or
// TC_ERR_TIMEOUT at the deadline, TC_ERR_IO on a socket error. A server
// polls with this between requests, then reads a whole frame under the
// request's own deadline (a frame cut by a poll interval would leave the
// connection out of step).
tc_status wait_readable(const Socket& s, Deadline deadline);

// Whole-buffer I/O with a deadline. TC_ERR_TIMEOUT on deadline, TC_ERR_IO
// when the peer closed or the socket failed. Each call first tries the
// socket and waits (poll) only when it would block.
tc_status send_all(const Socket& s, const void* data, size_t n, Deadline deadline);
tc_status recv_all(const Socket& s, void* data, size_t n, Deadline deadline);
// The same over several pieces, as one stream: sendmsg / recvmsg with the
// pieces gathered (scattered), so no piece is copied to join them.
struct ConstBytes {
  const void* data;
  size_t n;
};
struct MutBytes {
  void* data;
  size_t n;
};
constexpr size_t kMaxPieces = 64;  // per call
tc_status send_parts(const Socket& s, const ConstBytes* parts, size_t count, Deadline deadline);
tc_status recv_parts(const Socket& s, const MutBytes* parts, size_t count, Deadline deadline);
// Length-prefixed frames (u32 little-endian length). A frame carries at most
// kMaxFramePayload bytes: send_frame refuses a longer payload with
// TC_ERR_INVALID_ARG before sending anything (the length would not fit).
// recv_frame refuses a frame longer than max_bytes with TC_ERR_CORRUPT as
// soon as its length arrives, before allocating or reading the payload
// (the connection is then out of step and must be dropped); *announced, if
// given, gets the length the peer announced.
// `trailer`, when given, follows the payload inside the same frame (a MAC),
// sent without first joining the two.
constexpr size_t kMaxFramePayload = 0xFFFFFFFFu;
tc_status send_frame(const Socket& s, const std::string& payload, Deadline deadline,
                     const std::string& trailer = std::string());
tc_status recv_frame(const Socket& s, std::string* payload, size_t max_bytes, Deadline deadline,
                     uint64_t* announced = nullptr);

}  // namespace dist
}  // namespace tc
