// The fuzz targets of the control connections feed the library's own
// decoders, which read from sockets, through a socket pair: the input is
// written into one end (then shut, so a decoder that wants more sees the
// peer leave), the decoder reads the other, and whatever it answers is
// drained by a thread so that it never blocks on a full buffer. No decoder
// is duplicated for the harness.
#pragma once

#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>

#include "dist/net.h"

namespace fuzz {

class SocketPair {
 public:
  // `input` is what the decoder's peer sends.
  explicit SocketPair(const std::string& input) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
    near_ = tc::dist::Socket(sv[0]);
    far_ = sv[1];
    writer_ = std::thread([this, input] {
      size_t off = 0;
      while (off < input.size()) {
        ssize_t w = ::send(far_, input.data() + off, input.size() - off, MSG_NOSIGNAL);
        if (w <= 0) break;
        off += size_t(w);
      }
      ::shutdown(far_, SHUT_WR);
    });
    drainer_ = std::thread([this] {
      char buf[65536];
      while (::recv(far_, buf, sizeof buf, 0) > 0) {
      }
    });
  }
  ~SocketPair() {
    near_.shutdown_both();
    writer_.join();
    drainer_.join();
    ::close(far_);
  }
  tc::dist::Socket& decoder_end() { return near_; }

 private:
  tc::dist::Socket near_;
  int far_ = -1;
  std::thread writer_, drainer_;
};

}  // namespace fuzz
