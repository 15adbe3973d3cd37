// Entry points of include/tensorcore/channel.h: dist's handshake and MAC'd
// frames (src/dist/auth.h) over a socket the caller connected.
#include "tensorcore/channel.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "capi/api.h"
#include "core/handles.h"
#include "dist/auth.h"
#include "dist/net.h"

using namespace tc;
using namespace tc::capi;
using namespace tc::dist;

struct tc_channel_s {
  Socket sock;
  Session session;
  PeerInfo peer;
  // One lock per direction: the session's counters of each direction are
  // touched only by that direction's calls.
  std::mutex send_mu, recv_mu;
  std::unique_ptr<char[]> received;  // the last frame received (not zero-filled before)
  size_t received_cap = 0;
  std::atomic<bool> broken{false};
};

namespace {

const HandleKind& channel_kind() { return handle_kind("channel"); }

tc_status check_channel(const char* fn, tc_channel& ch) {
  if (!ch) return fail(TC_ERR_INVALID_ARG, "%s: channel is null", fn);
  return check_handle(fn, "channel", ch, channel_kind());
}

tc_status check_timeout(const char* fn, int64_t timeout_ms) {
  if (timeout_ms <= 0 || timeout_ms > (int64_t(1) << 40))
    return fail(TC_ERR_INVALID_ARG, "%s: timeout_ms %lld must be a positive number of milliseconds", fn,
                (long long)timeout_ms);
  return TC_OK;
}

const char* io_what(tc_status st) {
  switch (st) {
    case TC_ERR_TIMEOUT: return "the deadline passed";
    case TC_ERR_AUTH: return "a frame failed its MAC (altered, replayed or reordered)";
    case TC_ERR_CORRUPT: return "the peer announced a frame longer than allowed";
    default: return "the connection closed or failed";
  }
}

}  // namespace

tc_status tc_channel_open(int32_t fd, int32_t is_server, const struct tc_auth_config* auth,
                          const char* expected_peer_identity, int64_t timeout_ms, tc_channel* out) {
  const char* fn = "tc_channel_open";
  return guarded(fn, [&] {
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    *out = nullptr;
    if (fd < 0) return fail(TC_ERR_INVALID_ARG, "%s: fd %d is not a descriptor", fn, fd);
    if (is_server != 0 && is_server != 1) return fail(TC_ERR_INVALID_ARG, "%s: is_server must be 0 or 1", fn);
    if (tc_status st = check_timeout(fn, timeout_ms)) return st;
    KeyringRef ring;
    if (tc_status st = make_keyring(fn, auth, &ring)) return st;
    int dup = ::fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (dup < 0) return fail(TC_ERR_INVALID_ARG, "%s: fd %d cannot be duplicated", fn, fd);
    std::unique_ptr<tc_channel_s> ch(new tc_channel_s());
    ch->sock = Socket(dup);
    set_nodelay(dup);  // a frame's tail must not wait for the peer's delayed acknowledgement
    std::string why;
    Deadline deadline = deadline_after_ms(timeout_ms);
    tc_status st;
    if (is_server) {
      st = server_handshake(ch->sock, ring.get(), Purpose::Remote, nullptr, deadline, &ch->peer, &why, &ch->session);
    } else {
      st = client_handshake(ch->sock, ring.get(), Purpose::Remote, -1,
                            expected_peer_identity ? expected_peer_identity : "", deadline, &ch->peer, &why,
                            &ch->session);
    }
    if (st) return fail(st, "%s: handshake failed: %s", fn, why.empty() ? io_what(st) : why.c_str());
    *out = register_handle(ch.release(), channel_kind());
    return TC_OK;
  });
}

namespace {

tc_status send_parts(const char* fn, tc_channel ch, const tc_channel_part* parts, size_t count, int64_t timeout_ms) {
  if (tc_status st = check_channel(fn, ch)) return st;
  if (tc_status st = check_timeout(fn, timeout_ms)) return st;
  if (!parts) return fail(TC_ERR_INVALID_ARG, "%s: parts is null", fn);
  if (count == 0 || count > TC_CHANNEL_MAX_PARTS)
    return fail(TC_ERR_INVALID_ARG, "%s: %zu parts (1..%d)", fn, count, TC_CHANNEL_MAX_PARTS);
  ConstBytes pieces[TC_CHANNEL_MAX_PARTS];
  size_t total = 0;
  for (size_t i = 0; i < count; ++i) {
    if (parts[i].nbytes && !parts[i].data) return fail(TC_ERR_INVALID_ARG, "%s: part %zu's data is null", fn, i);
    if (parts[i].nbytes > TC_CHANNEL_MAX_FRAME_BYTES - total)
      return fail(TC_ERR_INVALID_ARG, "%s: the parts exceed the frame limit %d bytes", fn,
                  TC_CHANNEL_MAX_FRAME_BYTES);
    total += parts[i].nbytes;
    pieces[i] = ConstBytes{parts[i].data, parts[i].nbytes};
  }
  if (ch->broken) return fail(TC_ERR_IO, "%s: the channel failed earlier and must be closed", fn);
  std::lock_guard<std::mutex> lock(ch->send_mu);
  tc_status st = send_frame(ch->sock, ch->session, pieces, count, deadline_after_ms(timeout_ms));
  if (st) {
    ch->broken = true;  // a frame cut short leaves the peer out of step
    return fail(st, "%s: %s", fn, io_what(st));
  }
  return TC_OK;
}

}  // namespace

tc_status tc_channel_send(tc_channel ch, const void* data, size_t nbytes, int64_t timeout_ms) {
  const char* fn = "tc_channel_send";
  return guarded(fn, [&] {
    if (nbytes > TC_CHANNEL_MAX_FRAME_BYTES)
      return fail(TC_ERR_INVALID_ARG, "%s: %zu bytes exceed the frame limit %d", fn, nbytes,
                  TC_CHANNEL_MAX_FRAME_BYTES);
    if (nbytes && !data) return fail(TC_ERR_INVALID_ARG, "%s: data is null", fn);
    const tc_channel_part one{data, nbytes};
    return send_parts(fn, ch, &one, 1, timeout_ms);
  });
}

tc_status tc_channel_sendv(tc_channel ch, const tc_channel_part* parts, size_t count, int64_t timeout_ms) {
  const char* fn = "tc_channel_sendv";
  return guarded(fn, [&] { return send_parts(fn, ch, parts, count, timeout_ms); });
}

namespace {

// Reads the next frame into dst, or (dst null) into the channel's own
// buffer, grown as needed; the arguments were checked by the caller.
tc_status receive(const char* fn, tc_channel ch, void* dst, size_t max_bytes, int64_t timeout_ms,
                  uint64_t* announced) {
  if (ch->broken) return fail(TC_ERR_IO, "%s: the channel failed earlier and must be closed", fn);
  std::lock_guard<std::mutex> lock(ch->recv_mu);
  const Deadline deadline = deadline_after_ms(timeout_ms);
  // Waiting for a frame to begin: a timeout here leaves the channel in step.
  tc_status st = wait_readable(ch->sock, deadline);
  if (st == TC_ERR_TIMEOUT) return fail(st, "%s: no frame arrived within %lld ms", fn, (long long)timeout_ms);
  if (st == TC_OK) st = recv_frame_length(ch->sock, ch->session, announced, deadline);
  if (st == TC_OK && *announced > max_bytes) st = TC_ERR_CORRUPT;
  if (st == TC_OK && !dst && *announced > ch->received_cap) {
    const size_t cap = std::max<size_t>(size_t(*announced), std::min<size_t>(2 * ch->received_cap, max_bytes));
    ch->received.reset(new char[cap]);
    ch->received_cap = cap;
  }
  if (st == TC_OK)
    st = recv_frame_payload_into(ch->sock, ch->session, *announced, dst ? dst : ch->received.get(), deadline);
  if (st) {
    ch->broken = true;
    if (st == TC_ERR_CORRUPT)
      return fail(st, "%s: the peer announced a %llu-byte frame; at most %zu allowed", fn,
                  (unsigned long long)*announced, max_bytes);
    return fail(st, "%s: %s", fn, io_what(st));
  }
  return TC_OK;
}

tc_status check_receive(const char* fn, tc_channel& ch, size_t max_bytes, int64_t timeout_ms, size_t* nbytes) {
  if (tc_status st = check_channel(fn, ch)) return st;
  if (tc_status st = check_out_ptr(fn, "nbytes", nbytes)) return st;
  if (tc_status st = check_timeout(fn, timeout_ms)) return st;
  if (max_bytes > TC_CHANNEL_MAX_FRAME_BYTES)
    return fail(TC_ERR_INVALID_ARG, "%s: %zu bytes exceed the frame limit %d", fn, max_bytes,
                TC_CHANNEL_MAX_FRAME_BYTES);
  return TC_OK;
}

}  // namespace

tc_status tc_channel_recv(tc_channel ch, size_t max_bytes, int64_t timeout_ms, const void** data, size_t* nbytes) {
  const char* fn = "tc_channel_recv";
  return guarded(fn, [&] {
    if (tc_status st = check_out_ptr(fn, "data", data)) return st;
    if (tc_status st = check_receive(fn, ch, max_bytes, timeout_ms, nbytes)) return st;
    uint64_t announced = 0;
    if (tc_status st = receive(fn, ch, nullptr, max_bytes, timeout_ms, &announced)) return st;
    static const char empty = 0;
    *data = announced ? ch->received.get() : &empty;
    *nbytes = size_t(announced);
    return TC_OK;
  });
}

tc_status tc_channel_recv_into(tc_channel ch, void* dst, size_t capacity, int64_t timeout_ms, size_t* nbytes) {
  const char* fn = "tc_channel_recv_into";
  return guarded(fn, [&] {
    if (tc_status st = check_receive(fn, ch, capacity, timeout_ms, nbytes)) return st;
    if (!dst) return fail(TC_ERR_INVALID_ARG, "%s: dst is null", fn);
    uint64_t announced = 0;
    if (tc_status st = receive(fn, ch, dst, capacity, timeout_ms, &announced)) return st;
    *nbytes = size_t(announced);
    return TC_OK;
  });
}

tc_status tc_channel_set_spin(tc_channel ch, int64_t spin_us) {
  const char* fn = "tc_channel_set_spin";
  return guarded(fn, [&] {
    if (tc_status st = check_channel(fn, ch)) return st;
    if (spin_us < 0 || spin_us > 1000000)
      return fail(TC_ERR_INVALID_ARG, "%s: spin_us %lld is outside 0..1000000", fn, (long long)spin_us);
    ch->sock.set_spin_us(spin_us);  // a transfer in progress sees it at its next wait
    return TC_OK;
  });
}

tc_status tc_channel_peer_identity(tc_channel ch, const char** out) {
  const char* fn = "tc_channel_peer_identity";
  return guarded(fn, [&] {
    if (tc_status st = check_channel(fn, ch)) return st;
    if (tc_status st = check_out_ptr(fn, "out", out)) return st;
    *out = ch->peer.identity.c_str();
    return TC_OK;
  });
}

tc_status tc_channel_shutdown(tc_channel ch) {
  const char* fn = "tc_channel_shutdown";
  return guarded(fn, [&] {
    if (tc_status st = check_channel(fn, ch)) return st;
    ch->sock.shutdown_both();
    return TC_OK;
  });
}

tc_status tc_channel_close(tc_channel ch) {
  const char* fn = "tc_channel_close";
  return guarded(fn, [&] {
    if (tc_status st = check_channel(fn, ch)) return st;
    unregister_handle(ch);
    delete ch;
    return TC_OK;
  });
}
