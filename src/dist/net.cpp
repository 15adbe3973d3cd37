#include "dist/net.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>

#include <algorithm>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <memory>
#include <mutex>
#include <thread>

namespace tc {
namespace dist {

const std::string* Url::param(const std::string& key) const {
  for (auto& kv : query)
    if (kv.first == key) return &kv.second;
  return nullptr;
}

bool parse_url(const std::string& text, Url* out, std::string* why) {
  *out = Url();
  auto sep = text.find("://");
  if (sep == std::string::npos || sep == 0) {
    *why = "expected scheme://...";
    return false;
  }
  out->scheme = text.substr(0, sep);
  std::string rest = text.substr(sep + 3);
  auto q = rest.find('?');
  if (q != std::string::npos) {
    std::string query = rest.substr(q + 1);
    rest = rest.substr(0, q);
    size_t pos = 0;
    while (pos <= query.size()) {
      size_t amp = query.find('&', pos);
      std::string item = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
      if (!item.empty()) {
        auto eq = item.find('=');
        if (eq == std::string::npos || eq == 0) {
          *why = "query item '" + item + "' is not key=value";
          return false;
        }
        out->query.emplace_back(item.substr(0, eq), item.substr(eq + 1));
      }
      if (amp == std::string::npos) break;
      pos = amp + 1;
    }
  }
  if (out->scheme == "file") {  // file:///abs/dir: everything after :// is the path
    out->path = rest;
    if (out->path.empty() || out->path[0] != '/') {
      *why = "file URL needs an absolute path (file:///dir)";
      return false;
    }
    return true;
  }
  auto slash = rest.find('/');
  std::string hostport = rest.substr(0, slash);
  if (slash != std::string::npos) out->path = rest.substr(slash);
  std::string port_text;
  if (!hostport.empty() && hostport[0] == '[') {
    auto close = hostport.find(']');
    if (close == std::string::npos) {
      *why = "unterminated [ipv6] host";
      return false;
    }
    out->host = hostport.substr(1, close - 1);
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') {
        *why = "expected :port after ]";
        return false;
      }
      port_text = hostport.substr(close + 2);
    }
  } else {
    auto colon = hostport.rfind(':');
    out->host = hostport.substr(0, colon);
    if (colon != std::string::npos) port_text = hostport.substr(colon + 1);
  }
  if (!port_text.empty()) {
    if (port_text.size() > 5 || port_text.find_first_not_of("0123456789") != std::string::npos) {
      *why = "port '" + port_text + "' is not a number in 0..65535";
      return false;
    }
    out->port = std::atoi(port_text.c_str());
    if (out->port > 65535) {
      *why = "port " + port_text + " is out of range";
      return false;
    }
  }
  return true;
}

Socket& Socket::operator=(Socket&& o) noexcept {
  if (this != &o) {
    close();
    fd_ = o.fd_;
    o.fd_ = -1;
    set_spin_us(o.spin_us());
  }
  return *this;
}

void Socket::close() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

void Socket::shutdown_both() const {
  if (fd_ >= 0) ::shutdown(fd_, SHUT_RDWR);
}

namespace {

std::string err_text(int e) { return std::strerror(e); }

// getaddrinfo under a deadline: it has none of its own (a slow or dead DNS
// server blocks it for the resolver's whole retry schedule), so it runs on
// a helper thread that owns its result; when the deadline passes first the
// caller leaves and the thread frees the result when it ends.
struct Resolution {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false, abandoned = false;
  int rc = 0;
  addrinfo* ai = nullptr;
};

bool resolve(const std::string& host, int port, bool passive, Deadline deadline, addrinfo** out, std::string* why) {
  auto r = std::make_shared<Resolution>();
  std::string node = host, service = std::to_string(port);
  try {
    std::thread([r, node, service, passive] {
      addrinfo hints{};
      hints.ai_family = AF_UNSPEC;
      hints.ai_socktype = SOCK_STREAM;
      if (passive) hints.ai_flags = AI_PASSIVE;
      addrinfo* ai = nullptr;
      int rc = getaddrinfo(node.empty() ? nullptr : node.c_str(), service.c_str(), &hints, &ai);
      std::lock_guard<std::mutex> lock(r->mu);
      if (r->abandoned) {
        if (rc == 0) freeaddrinfo(ai);
        return;
      }
      r->rc = rc, r->ai = ai, r->done = true;
      r->cv.notify_all();
    }).detach();
  } catch (const std::exception&) {
    *why = "cannot resolve '" + host + "': no thread for the lookup";
    return false;
  }
  std::unique_lock<std::mutex> lock(r->mu);
  if (!r->cv.wait_until(lock, deadline, [&] { return r->done; })) {
    r->abandoned = true;
    *why = "cannot resolve '" + host + "' before the deadline (no answer from the name service)";
    return false;
  }
  if (r->rc != 0) {
    *why = "cannot resolve '" + host + "': " + gai_strerror(r->rc);
    return false;
  }
  *out = r->ai;
  return true;
}

// poll() for `events` until the deadline, watching the descriptor for
// spin_us first; 1 ready, 0 timed out, -1 error.
int wait_fd(int fd, short events, Deadline deadline, int64_t spin_us = 0) {
  if (spin_us > 0) {
    const auto end = std::min(deadline, Clock::now() + std::chrono::microseconds(spin_us));
    pollfd p{fd, events, 0};
    do {
      p.revents = 0;
      if (::poll(&p, 1, 0) > 0) return 1;
    } while (Clock::now() < end);
  }
  for (;;) {
    int64_t left = ms_left(deadline);
    pollfd p{fd, events, 0};
    int rc = ::poll(&p, 1, static_cast<int>(left > 1000000 ? 1000000 : left));
    if (rc > 0) return 1;
    if (rc == 0) {
      if (Clock::now() >= deadline) return 0;
      continue;
    }
    if (errno != EINTR) return -1;
  }
}


}  // namespace

void set_nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // fails harmlessly on a non-TCP socket
}

tc_status connect_tcp(const std::string& host, int port, Deadline deadline, Socket* out, std::string* why) {
  addrinfo* ai = nullptr;
  if (!resolve(host, port, false, deadline, &ai, why))
    return Clock::now() >= deadline ? TC_ERR_TIMEOUT : TC_ERR_INVALID_ARG;
  std::string last = "no address";
  int backoff_ms = 5;
  for (;;) {
    for (addrinfo* a = ai; a; a = a->ai_next) {
      int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
      if (fd < 0) {
        last = err_text(errno);
        continue;
      }
      Socket s(fd);
      int flags = fcntl(fd, F_GETFL, 0);
      fcntl(fd, F_SETFL, flags | O_NONBLOCK);
      int rc = ::connect(fd, a->ai_addr, a->ai_addrlen);
      if (rc != 0 && errno == EINPROGRESS) {
        int w = wait_fd(fd, POLLOUT, deadline);
        if (w == 1) {
          int err = 0;
          socklen_t len = sizeof err;
          getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
          rc = err == 0 ? 0 : -1;
          errno = err;
        } else {
          rc = -1;
          errno = w == 0 ? ETIMEDOUT : errno;
        }
      }
      if (rc == 0) {
        fcntl(fd, F_SETFL, flags);
        set_nodelay(fd);
        freeaddrinfo(ai);
        *out = std::move(s);
        return TC_OK;
      }
      last = err_text(errno);
    }
    if (Clock::now() + std::chrono::milliseconds(backoff_ms) >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
    backoff_ms = backoff_ms < 200 ? backoff_ms * 2 : 200;
  }
  freeaddrinfo(ai);
  *why = "could not connect to " + host + ":" + std::to_string(port) + " before the deadline (last error: " + last + ")";
  return TC_ERR_TIMEOUT;
}

tc_status listen_tcp(const std::string& host, int port, Socket* out, int* bound_port, std::string* why) {
  addrinfo* ai = nullptr;
  // A local name: resolved at once, or the name service is broken.
  if (!resolve(host, port, true, deadline_after_ms(30000), &ai, why)) return TC_ERR_INVALID_ARG;
  std::string last = "no address";
  for (addrinfo* a = ai; a; a = a->ai_next) {
    int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) {
      last = err_text(errno);
      continue;
    }
    Socket s(fd);
    int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, 128) != 0) {
      last = err_text(errno);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len);
    *bound_port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                           : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    freeaddrinfo(ai);
    *out = std::move(s);
    return TC_OK;
  }
  freeaddrinfo(ai);
  *why = "cannot listen on " + host + ":" + std::to_string(port) + ": " + last;
  return TC_ERR_IO;
}

tc_status accept_tcp(const Socket& listener, int wait_ms, Socket* out) {
  int w = wait_fd(listener.fd(), POLLIN, deadline_after_ms(wait_ms));
  if (w == 0) return TC_ERR_TIMEOUT;
  if (w < 0) return TC_ERR_IO;
  int fd = ::accept4(listener.fd(), nullptr, nullptr, SOCK_CLOEXEC);
  if (fd < 0) {
    if (errno == EAGAIN || errno == EINTR || errno == ECONNABORTED) return TC_ERR_TIMEOUT;
    return errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM ? TC_ERR_ALLOC : TC_ERR_IO;
  }
  set_nodelay(fd);
  *out = Socket(fd);
  return TC_OK;
}

tc_status wait_readable(const Socket& s, Deadline deadline) {
  int w = wait_fd(s.fd(), POLLIN, deadline, s.spin_us());
  return w == 1 ? TC_OK : w == 0 ? TC_ERR_TIMEOUT : TC_ERR_IO;
}

namespace {

// Moves `done` bytes past the front of iov[*first..count).
void advance(iovec* iov, size_t count, size_t* first, size_t done) {
  while (*first < count && done >= iov[*first].iov_len) done -= iov[(*first)++].iov_len;
  if (*first < count) {
    iov[*first].iov_base = static_cast<char*>(iov[*first].iov_base) + done;
    iov[*first].iov_len -= done;
  }
}

// The pieces of one transfer, empty ones left out.
template <class Bytes>
size_t to_iov(const Bytes* parts, size_t count, iovec* iov, size_t* total) {
  size_t k = 0;
  *total = 0;
  for (size_t i = 0; i < count; ++i)
    if (parts[i].n) {
      iov[k].iov_base = const_cast<void*>(static_cast<const void*>(parts[i].data));
      iov[k++].iov_len = parts[i].n;
      *total += parts[i].n;
    }
  return k;
}

// Sends (sending) or receives the iovecs whole: tries the socket first and
// polls only when it would block.
tc_status transfer(const Socket& s, iovec* iov, size_t count, bool sending, Deadline deadline) {
  size_t first = 0;
  while (first < count) {
    msghdr m{};
    m.msg_iov = iov + first;
    m.msg_iovlen = count - first;
    ssize_t k = sending ? ::sendmsg(s.fd(), &m, MSG_NOSIGNAL | MSG_DONTWAIT) : ::recvmsg(s.fd(), &m, MSG_DONTWAIT);
    if (k > 0) {
      advance(iov, count, &first, size_t(k));
      continue;
    }
    if (k == 0 && !sending) return TC_ERR_IO;  // closed by the peer
    if (k < 0 && errno == EINTR) continue;
    if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK) return TC_ERR_IO;
    int w = wait_fd(s.fd(), sending ? POLLOUT : POLLIN, deadline, s.spin_us());
    if (w == 0) return TC_ERR_TIMEOUT;
    if (w < 0) return TC_ERR_IO;
  }
  return TC_OK;
}

}  // namespace

tc_status send_all(const Socket& s, const void* data, size_t n, Deadline deadline) {
  ConstBytes one{data, n};
  return send_parts(s, &one, 1, deadline);
}

tc_status recv_all(const Socket& s, void* data, size_t n, Deadline deadline) {
  MutBytes one{data, n};
  return recv_parts(s, &one, 1, deadline);
}

tc_status send_parts(const Socket& s, const ConstBytes* parts, size_t count, Deadline deadline) {
  if (count > kMaxPieces) return TC_ERR_INVALID_ARG;
  iovec iov[kMaxPieces];
  size_t total = 0;
  return transfer(s, iov, to_iov(parts, count, iov, &total), true, deadline);
}

tc_status recv_parts(const Socket& s, const MutBytes* parts, size_t count, Deadline deadline) {
  if (count > kMaxPieces) return TC_ERR_INVALID_ARG;
  iovec iov[kMaxPieces];
  size_t total = 0;
  return transfer(s, iov, to_iov(parts, count, iov, &total), false, deadline);
}

tc_status send_frame(const Socket& s, const std::string& payload, Deadline deadline, const std::string& trailer) {
  if (payload.size() > kMaxFramePayload - trailer.size()) return TC_ERR_INVALID_ARG;
  uint32_t n = static_cast<uint32_t>(payload.size() + trailer.size());
  unsigned char len[4] = {uint8_t(n), uint8_t(n >> 8), uint8_t(n >> 16), uint8_t(n >> 24)};
  // One gathered write: the frame leaves as few segments as possible.
  const ConstBytes parts[3] = {{len, 4}, {payload.data(), payload.size()}, {trailer.data(), trailer.size()}};
  return send_parts(s, parts, 3, deadline);
}

tc_status recv_frame(const Socket& s, std::string* payload, size_t max_bytes, Deadline deadline,
                     uint64_t* announced) {
  unsigned char len[4];
  if (tc_status st = recv_all(s, len, 4, deadline)) return st;
  uint32_t n = uint32_t(len[0]) | uint32_t(len[1]) << 8 | uint32_t(len[2]) << 16 | uint32_t(len[3]) << 24;
  if (announced) *announced = n;
  if (n > max_bytes) return TC_ERR_CORRUPT;
  payload->assign(n, '\0');
  return n ? recv_all(s, &(*payload)[0], n, deadline) : TC_OK;
}

}  // namespace dist
}  // namespace tc
