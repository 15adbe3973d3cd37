// The remote tensor endpoint: a weight server publishes named host byte
// ranges, compute clients connect (through the handshake of auth.h) and
// fetch them by name. One request at a time per connection:
//   client -> server  'F' u64 nbytes, name    server -> client  'D' bytes | 'E' reason
// The request says how many bytes the client expects: the server sends
// exactly that many ('D') or a reason ('E', at most kMaxReplyText bytes),
// and the client refuses any other reply as soon as its length arrives,
// before allocating for it. A tensor is at most kMaxTensorBytes: its 'D'
// reply must fit one frame. Frames after an authenticated handshake carry
// the session's MAC (auth.h).
#pragma once

#include <atomic>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "dist/acceptor.h"
#include "dist/auth.h"
#include "dist/net.h"
#include "dist/refusals.h"
#include "tensorcore/dist.h"

namespace tc {
namespace dist {

// Largest tensor an endpoint publishes: a 'D' frame (tag + bytes) must fit
// the u32 frame length.
constexpr size_t kMaxTensorBytes = kMaxFramePayload - 1;

class RemoteEndpoint {
 public:
  // Server: listens on host:port; client: host empty.
  static tc_status create(int32_t role, const std::string& host, int port, KeyringRef ring, int64_t timeout_ms,
                          std::unique_ptr<RemoteEndpoint>* out, std::string* why);
  ~RemoteEndpoint();

  int32_t role() const { return role_; }
  bool authenticated() const { return authenticated_; }
  int port() const { return port_; }

  void publish(const std::string& name, const void* ptr, size_t nbytes);
  bool withdraw(const std::string& name);
  size_t published() const;

  tc_status connect(const std::string& host, int port, const std::string& expected_identity, int32_t* peer_id,
                    std::string* why);
  tc_status fetch(int32_t peer_id, const std::string& name, void* dst, size_t nbytes, std::string* why);

  void rotate(KeyringRef ring);
  // The proven identity/key of a peer; false for an unknown id. The
  // identity string stays where it is until the endpoint is destroyed.
  bool peer(int32_t id, const char** identity, uint64_t* key_id) const;

  uint64_t auth_failures() const { return refusals_.auth(); }
  uint64_t refusal_count() const { return refusals_.total(); }
  uint64_t bytes_served() const { return served_.load(); }
  uint64_t bytes_fetched() const { return fetched_.load(); }

  // Serves one connection until it ends (a server's acceptor threads call
  // it; a fuzz target may hand it one end of a socket pair).
  void serve(Socket& s);

 private:
  RemoteEndpoint() = default;
  KeyringRef ring() const;

  int32_t role_ = TC_REMOTE_ROLE_COMPUTE_CLIENT;
  bool authenticated_ = false;
  int port_ = 0;
  int64_t timeout_ms_ = 120000;
  mutable std::mutex mu_;
  KeyringRef ring_;
  std::map<std::string, std::pair<const void*, size_t>> tensors_;
  struct Peer {
    PeerInfo info;
    std::unique_ptr<Socket> sock;  // clients: the connection
    std::unique_ptr<std::mutex> io;
    Session session;               // clients: its frames' MAC state (under io)
  };
  // Each peer on its own allocation: peer() hands out pointers into it that
  // must survive later connections.
  std::vector<std::unique_ptr<Peer>> peers_;
  Socket listener_;
  std::atomic<bool> stop_{false};
  Acceptor acceptor_;  // last: stopped first, while the state above is alive
  Refusals refusals_;
  std::atomic<uint64_t> served_{0}, fetched_{0};
};

}  // namespace dist
}  // namespace tc

struct tc_remote_s {
  tc_context ctx = nullptr;
  std::unique_ptr<tc::dist::RemoteEndpoint> ep;
};
