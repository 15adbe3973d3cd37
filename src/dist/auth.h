// Mutual authentication of control connections: HMAC-SHA256 challenge-
// response over fresh nonces from both sides.
//
//   client -> server  HELLO   magic, mode (plain/auth), purpose, claimed rank, Nc
//   server -> client  CHALLENGE Ns                     (or REFUSE)
//   client -> server  PROOF   id_c, key_c, HMAC(K_c, "client" | T)
//   server -> client  ACCEPT  id_s, key_s, HMAC(K_s, "server" | T | id_c, key_c)   (or REFUSE)
//
// T = (purpose, claimed rank, Nc, Ns, id_c, key_c). The client proves itself
// first, so a peer without a valid key learns nothing about the server (not
// even its identity) before it is refused; both nonces are fresh per
// connection, so a recorded exchange cannot be replayed; MACs are compared
// in constant time. Nothing is encrypted.
//
// After the handshake both sides hold a session key that only holders of the
// two keys can derive, fresh per connection (it covers both nonces),
//   S = HMAC(K_s, HMAC(K_c, "tc-session-v2" | T_s)),  T_s = (T, id_s, key_s),
// and from it one frame key per direction (HKDF-Expand with HMAC-SHA256),
//   K_cs = HKDF-Expand(S, "tc-frame-v2 client->server"), K_sc likewise.
// Every later frame ends with a 16-byte AES-256-GCM tag over the frame's
// bytes (its length and payload, as additional data; nothing encrypted)
// under the sender's direction key, with the 96-bit nonce direction (4
// bytes) | sequence number (u64): a frame altered, replayed, reordered,
// dropped from the middle or reflected back ends the connection
// (TC_ERR_AUTH). A plain (unauthenticated) connection has no session key
// and its frames carry no MAC. The hello's magic carries the version
// (TCAUTH02), so a peer of another version is refused at the hello.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/crypto.h"
#include "dist/net.h"
#include "dist/slice_hasher.h"
#include "tensorcore/dist.h"

namespace tc {
namespace dist {

struct Key {
  std::string identity;
  uint64_t key_id = 0;
  std::string secret;
};

struct Keyring {
  std::string local_identity;
  uint64_t active_key_id = 0;
  std::vector<Key> keys;
  const Key* find(const std::string& identity, uint64_t key_id) const;
  const Key& active() const;
};
using KeyringRef = std::shared_ptr<const Keyring>;

// Validates (secrets >= 32 bytes, identities 1..127 bytes, no duplicate
// (identity, key_id), a resolvable local key) and deep-copies `cfg`.
tc_status make_keyring(const char* fn, const struct tc_auth_config* cfg, KeyringRef* out);

// `bytes` as text for an error message: printable ASCII stays, anything
// else (control bytes, quotes, backslashes, bytes >= 0x7f) becomes \xHH, so
// bytes a peer sent cannot forge lines or terminal sequences in our errors.
std::string printable(const std::string& bytes);

enum class Purpose : uint8_t { Store = 1, Remote = 2 };

struct PeerInfo {
  std::string identity;
  uint64_t key_id = 0;
  int32_t claimed_rank = -1;
};

// The frames of one connection after its handshake.
struct Session {
  std::string key;  // empty: a plain connection
  bool client = false;
  uint64_t sent = 0, received = 0;  // frames, per direction
  std::shared_ptr<Gmac> tx, rx;     // the direction keys' MACs (set with key)
  // Each direction's helper for long frames (slice_hasher.h), made at the
  // first frame that could use it; null where frames hash inline.
  struct Helper {
    std::shared_ptr<SliceHasher> hasher;
    bool decided = false;
  };
  Helper tx_helper, rx_helper;
};
constexpr size_t kFrameTagBytes = Gmac::kTagBytes;
// A frame's payload is sealed and checked in slices of this size as it
// travels, so each side hashes one slice while the other moves the next
// (16 MiB frames on loopback: 512 KiB slices moved them 1.2-1.4x faster than
// one pass, 256 KiB and 1 MiB slices less; one system call per slice; 1 MiB
// frames with 64-128 KiB slices: 1.35x slower than with 512 KiB), when one
// thread both moves and hashes them; with a helper thread hashing
// (slice_hasher.h) the slices are SliceHasher::kSliceBytes.
constexpr size_t kSealSliceBytes = 512 << 10;
// Keys `session` (its `client` side already set) with the session key S:
// derives the two direction keys and restarts both sequence numbers.
void key_session(Session* session, const std::string& key);

// Client side of the handshake; `ring` null runs the plain (unauthenticated)
// hello. expected_identity "" accepts any identity of the ring.
// TC_ERR_AUTH when either side's proof fails (detail in *why). *session
// (when given) is set for the frames that follow.
tc_status client_handshake(const Socket& s, const Keyring* ring, Purpose purpose, int32_t claimed_rank,
                           const std::string& expected_identity, Deadline deadline, PeerInfo* server,
                           std::string* why, Session* session = nullptr);

// Server side. `admit` may refuse a proven peer (e.g. an identity bound to
// another rank) by returning a reason; "" admits.
using AdmitFn = std::function<std::string(const PeerInfo&)>;
tc_status server_handshake(const Socket& s, const Keyring* ring, Purpose purpose, const AdmitFn& admit,
                           Deadline deadline, PeerInfo* client, std::string* why, Session* session = nullptr);

// Frames after the handshake (net.h's framing, plus the session's MAC when
// it has a key). recv_frame: max_bytes bounds the payload; a MAC that does
// not verify is TC_ERR_AUTH (the connection must then be dropped).
tc_status send_frame(const Socket& s, Session& session, const std::string& payload, Deadline deadline);
// One frame whose payload is the pieces in turn (at most kMaxPieces - 2),
// sent without joining them.
tc_status send_frame(const Socket& s, Session& session, const ConstBytes* parts, size_t count, Deadline deadline);
tc_status recv_frame(const Socket& s, Session& session, std::string* payload, size_t max_bytes, Deadline deadline,
                     uint64_t* announced = nullptr);
// The same frame read in two steps, for a reader that decides from the
// length alone whether to take it: recv_frame_length (the payload's length,
// the MAC left out), then either recv_frame_payload, or skip_frame_payload,
// which reads the payload through a small buffer (nothing is allocated for
// it) and still checks its MAC, so the connection stays in step.
tc_status recv_frame_length(const Socket& s, Session& session, uint64_t* payload_bytes, Deadline deadline);
tc_status recv_frame_payload(const Socket& s, Session& session, uint64_t payload_bytes, std::string* payload,
                             Deadline deadline);
tc_status skip_frame_payload(const Socket& s, Session& session, uint64_t payload_bytes, Deadline deadline);
// recv_frame_payload into `dst` (payload_bytes long) instead of a string.
tc_status recv_frame_payload_into(const Socket& s, Session& session, uint64_t payload_bytes, void* dst,
                                  Deadline deadline);

}  // namespace dist
}  // namespace tc
