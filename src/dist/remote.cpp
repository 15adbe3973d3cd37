#include "dist/remote.h"

#include <algorithm>
#include <cstring>

namespace tc {
namespace dist {

namespace {
constexpr size_t kMaxName = 1024;
constexpr size_t kMaxReplyText = kMaxName + 128;  // an 'E' reply: a reason naming the tensor
constexpr size_t kSizeBytes = 8;                 // the u64 byte count in a request
constexpr size_t kMaxConnections = 64;        // clients served at once; the rest wait in the backlog

}  // namespace

tc_status RemoteEndpoint::create(int32_t role, const std::string& host, int port, KeyringRef ring, int64_t timeout_ms,
                                 std::unique_ptr<RemoteEndpoint>* out, std::string* why) {
  std::unique_ptr<RemoteEndpoint> e(new RemoteEndpoint());
  e->role_ = role;
  e->authenticated_ = ring != nullptr;
  e->ring_ = std::move(ring);
  e->timeout_ms_ = timeout_ms;
  if (role == TC_REMOTE_ROLE_WEIGHT_SERVER) {
    if (tc_status st = listen_tcp(host, port, &e->listener_, &e->port_, why)) return st;
    e->acceptor_.start(&e->listener_, kMaxConnections, [p = e.get()](Socket& c) { p->serve(c); });
  }
  *out = std::move(e);
  return TC_OK;
}

RemoteEndpoint::~RemoteEndpoint() {
  stop_ = true;
  acceptor_.stop();
}

KeyringRef RemoteEndpoint::ring() const {
  std::lock_guard<std::mutex> lock(mu_);
  return ring_;
}

void RemoteEndpoint::rotate(KeyringRef ring) {
  std::lock_guard<std::mutex> lock(mu_);
  ring_ = std::move(ring);
}

void RemoteEndpoint::publish(const std::string& name, const void* ptr, size_t nbytes) {
  std::lock_guard<std::mutex> lock(mu_);
  tensors_[name] = {ptr, nbytes};
}

bool RemoteEndpoint::withdraw(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  return tensors_.erase(name) > 0;
}

size_t RemoteEndpoint::published() const {
  std::lock_guard<std::mutex> lock(mu_);
  return tensors_.size();
}

bool RemoteEndpoint::peer(int32_t id, const char** identity, uint64_t* key_id) const {
  std::lock_guard<std::mutex> lock(mu_);
  if (id < 0 || size_t(id) >= peers_.size()) return false;
  *identity = peers_[size_t(id)]->info.identity.c_str();
  *key_id = peers_[size_t(id)]->info.key_id;
  return true;
}

void RemoteEndpoint::serve(Socket& conn) {
  Socket* s = &conn;
  KeyringRef r = ring();  // the ring in force when the connection arrived
  PeerInfo info;
  std::string why;
  Session session;
  tc_status st = server_handshake(*s, r.get(), Purpose::Remote, nullptr, deadline_after_ms(timeout_ms_), &info, &why,
                                  &session);
  if (st) {
    if (st == TC_ERR_AUTH) refusals_.count(Refusals::Kind::Auth, why);
    if (st == TC_ERR_TIMEOUT)
      refusals_.count(Refusals::Kind::Timeout, "a connection did not finish its handshake in time");
    s->shutdown_both();
    return;  // the socket is closed by the destructor, after the join
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    peers_.push_back(std::unique_ptr<Peer>(new Peer{info, nullptr, nullptr, Session{}}));
  }
  while (!stop_) {
    std::string m;
    tc_status rs = wait_readable(*s, deadline_after_ms(200));
    if (rs == TC_ERR_TIMEOUT) continue;
    if (rs == TC_OK) rs = recv_frame(*s, session, &m, 1 + kSizeBytes + kMaxName, deadline_after_ms(timeout_ms_));
    if (rs == TC_ERR_AUTH) refusals_.count(Refusals::Kind::Auth, "a request failed its integrity check");
    if (rs == TC_ERR_TIMEOUT) refusals_.count(Refusals::Kind::Timeout, "a request did not arrive whole in time");
    if (rs == TC_ERR_CORRUPT) refusals_.count(Refusals::Kind::Bound, "a request longer than a tensor name allows");
    if (rs == TC_OK && (m.size() < 1 + kSizeBytes || m[0] != 'F'))
      refusals_.count(Refusals::Kind::Malformed, "a malformed request");
    if (rs != TC_OK || m.size() < 1 + kSizeBytes || m[0] != 'F') break;
    const uint64_t want = get_u64(m.data() + 1);
    std::string name = m.substr(1 + kSizeBytes), reply;
    {
      // The bytes are copied under the lock so a concurrent unregister
      // cannot pull the memory away mid-copy.
      std::lock_guard<std::mutex> lock(mu_);
      auto it = tensors_.find(name);
      if (it == tensors_.end()) {
        reply = "Eno tensor named '" + name + "' is registered";
      } else if (it->second.second != want) {
        reply = "Etensor '" + name + "' has " + std::to_string(it->second.second) + " bytes, not " +
                std::to_string(want);
      } else {
        reply.reserve(1 + it->second.second);
        reply.push_back('D');
        reply.append(static_cast<const char*>(it->second.first), it->second.second);
      }
    }
    if (reply[0] == 'E' && reply.size() > kMaxReplyText) reply.resize(kMaxReplyText);
    if (send_frame(*s, session, reply, deadline_after_ms(timeout_ms_)) != TC_OK) break;
    if (reply[0] == 'D') served_ += reply.size() - 1;
  }
  // Shut down now, so the peer sees the end at once (a malformed or
  // oversized frame ends the connection); closed by the destructor, after
  // this thread is joined: closing here would race with its shutdown() and
  // could hit a reused descriptor.
  s->shutdown_both();
}

tc_status RemoteEndpoint::connect(const std::string& host, int port, const std::string& expected_identity,
                                  int32_t* peer_id, std::string* why) {
  Deadline d = deadline_after_ms(timeout_ms_);
  auto sock = std::make_unique<Socket>();
  if (tc_status st = connect_tcp(host, port, d, sock.get(), why)) return st;
  KeyringRef r = ring();
  PeerInfo info;
  Session session;
  if (tc_status st = client_handshake(*sock, r.get(), Purpose::Remote, -1, expected_identity, d, &info, why, &session)) {
    if (st == TC_ERR_AUTH) refusals_.count(Refusals::Kind::Auth, *why);
    if (st == TC_ERR_TIMEOUT) refusals_.count(Refusals::Kind::Timeout, *why);
    return st;
  }
  std::lock_guard<std::mutex> lock(mu_);
  peers_.push_back(
      std::unique_ptr<Peer>(new Peer{info, std::move(sock), std::make_unique<std::mutex>(), std::move(session)}));
  *peer_id = int32_t(peers_.size() - 1);
  return TC_OK;
}

tc_status RemoteEndpoint::fetch(int32_t peer_id, const std::string& name, void* dst, size_t nbytes,
                                std::string* why) {
  Socket* s;
  std::mutex* io;
  Session* session;
  {
    std::lock_guard<std::mutex> lock(mu_);
    s = peers_[size_t(peer_id)]->sock.get();
    io = peers_[size_t(peer_id)]->io.get();
    session = &peers_[size_t(peer_id)]->session;
  }
  std::lock_guard<std::mutex> lock(*io);
  Deadline d = deadline_after_ms(timeout_ms_);
  std::string request(1, 'F'), reply;
  put_u64(&request, nbytes);
  request += name;
  uint64_t announced = 0;
  tc_status st = send_frame(*s, *session, request, d);
  // The reply is the bytes asked for, or a short reason: nothing longer is
  // read, or allocated for.
  if (!st) st = recv_frame(*s, *session, &reply, std::max(nbytes + 1, kMaxReplyText), d, &announced);
  if (st == TC_ERR_AUTH) {
    s->shutdown_both();
    *why = "a reply from the server failed its integrity check (altered or replayed on the way); the connection "
           "is closed";
    refusals_.count(Refusals::Kind::Auth, *why);
    return TC_ERR_AUTH;
  }
  if (st == TC_ERR_CORRUPT) {
    s->shutdown_both();  // out of step with the server: later fetches fail at once
    *why = "the server announced a reply of " + std::to_string(announced) + " bytes to a request for " +
           std::to_string(nbytes) + " bytes of tensor '" + printable(name) + "'; refused, and the connection closed";
    refusals_.count(Refusals::Kind::Bound, *why);
    return TC_ERR_CORRUPT;
  }
  if (st || reply.empty()) {
    *why = st == TC_ERR_TIMEOUT ? "the server did not answer before the deadline" : "the connection to the server was lost";
    if (st == TC_ERR_TIMEOUT) refusals_.count(Refusals::Kind::Timeout, *why);
    return TC_ERR_TIMEOUT;
  }
  if (reply[0] == 'E' && reply.size() <= kMaxReplyText) {
    *why = printable(reply.substr(1));
    return TC_ERR_INVALID_ARG;
  }
  if (reply[0] != 'D' || reply.size() - 1 != nbytes) {
    s->shutdown_both();
    *why = "the server sent a malformed reply (" + std::to_string(reply.size()) + " bytes, tag " +
           printable(reply.substr(0, 1)) + ") to a request for " + std::to_string(nbytes) + " bytes of tensor '" +
           printable(name) + "'; refused, and the connection closed";
    refusals_.count(Refusals::Kind::Malformed, *why);
    return TC_ERR_CORRUPT;
  }
  std::memcpy(dst, reply.data() + 1, nbytes);
  fetched_ += nbytes;
  return TC_OK;
}

}  // namespace dist
}  // namespace tc
