#include "dist/auth.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "core/error.h"
#include "core/crypto.h"

namespace tc {
namespace dist {

namespace {

// The last two characters are the handshake's (and the frames') version.
constexpr char kMagic[8] = {'T', 'C', 'A', 'U', 'T', 'H', '0', '2'};
constexpr size_t kMagicStem = 6;
constexpr size_t kNonce = 32;
constexpr uint8_t kModePlain = 0, kModeAuth = 1;
constexpr uint8_t kChallenge = 'C', kRefuse = 'R', kAccept = 'A', kPlainOk = 'P';
constexpr size_t kMaxFrame = 4096;

void put_str(std::string* s, const std::string& v) {
  put_u64(s, v.size());
  *s += v;
}

// The bytes both MACs cover; every field length-prefixed so no two
// transcripts share an encoding.
std::string transcript(const char* label, Purpose purpose, int32_t rank, const std::string& nc, const std::string& ns,
                       const std::string& id_c, uint64_t key_c) {
  std::string t;
  put_str(&t, label);
  t.push_back(char(purpose));
  put_u64(&t, uint64_t(uint32_t(rank)));
  put_str(&t, nc);
  put_str(&t, ns);
  put_str(&t, id_c);
  put_u64(&t, key_c);
  return t;
}

std::string mac(const std::string& secret, const std::string& data) {
  uint8_t out[kDigestBytes];
  hmac_sha256(secret.data(), secret.size(), data.data(), data.size(), out);
  return std::string(reinterpret_cast<char*>(out), kDigestBytes);
}

// S = HMAC(K_s, HMAC(K_c, "tc-session-v2" | T_s)), and from it the two
// direction keys of the frames (auth.h).
void start_session(Session* session, const std::string& client_secret, const std::string& server_secret,
                   const std::string& ts) {
  key_session(session, mac(server_secret, mac(client_secret, "tc-session-v2" + ts)));
}

}  // namespace

void key_session(Session* session, const std::string& key) {
  session->key = key;
  session->sent = session->received = 0;
  uint8_t cs[Gmac::kKeyBytes], sc[Gmac::kKeyBytes];
  hkdf_expand_sha256(session->key.data(), session->key.size(), "tc-frame-v2 client->server", cs, sizeof cs);
  hkdf_expand_sha256(session->key.data(), session->key.size(), "tc-frame-v2 server->client", sc, sizeof sc);
  auto to_server = std::make_shared<Gmac>(cs), to_client = std::make_shared<Gmac>(sc);
  session->tx = session->client ? to_server : to_client;
  session->rx = session->client ? to_client : to_server;
  std::memset(cs, 0, sizeof cs);
  std::memset(sc, 0, sizeof sc);
}

namespace {

std::string fresh_nonce() {
  std::string n(kNonce, '\0');
  if (!random_bytes(&n[0], kNonce)) throw std::runtime_error("libcrypto's random generator failed");
  return n;
}

// Reads "len(u8) identity, key_id(u64), mac(32)" from p.
bool parse_proof(const std::string& f, size_t pos, std::string* id, uint64_t* key, std::string* m) {
  if (pos >= f.size()) return false;
  size_t idn = uint8_t(f[pos++]);
  if (idn == 0 || idn > TC_AUTH_MAX_IDENTITY_BYTES || f.size() != pos + idn + 8 + kDigestBytes) return false;
  *id = f.substr(pos, idn);
  *key = get_u64(f.data() + pos + idn);
  *m = f.substr(pos + idn + 8);
  return true;
}

std::string proof(uint8_t tag, const std::string& id, uint64_t key, const std::string& m) {
  std::string s(1, char(tag));
  s.push_back(char(uint8_t(id.size())));
  s += id;
  put_u64(&s, key);
  s += m;
  return s;
}

tc_status io_fail(tc_status st, const char* step, std::string* why) {
  *why = std::string(step) + (st == TC_ERR_TIMEOUT ? ": timed out" : ": connection closed or failed");
  return st == TC_ERR_CORRUPT ? TC_ERR_AUTH : st;
}

}  // namespace

std::string printable(const std::string& bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size());
  for (char ch : bytes) {
    uint8_t c = uint8_t(ch);
    if (c >= 0x20 && c < 0x7f && c != '\\' && c != '\'') {
      out.push_back(char(c));
    } else {
      out += "\\x";
      out.push_back(kHex[c >> 4]);
      out.push_back(kHex[c & 15]);
    }
  }
  return out;
}

const Key* Keyring::find(const std::string& identity, uint64_t key_id) const {
  for (auto& k : keys)
    if (k.key_id == key_id && k.identity == identity) return &k;
  return nullptr;
}

const Key& Keyring::active() const { return *find(local_identity, active_key_id); }

tc_status make_keyring(const char* fn, const struct tc_auth_config* cfg, KeyringRef* out) {
  if (!cfg) return fail(TC_ERR_INVALID_ARG, "%s: auth config is null", fn);
  if (!cfg->keys || cfg->key_count == 0) return fail(TC_ERR_INVALID_ARG, "%s: the keyring is empty", fn);
  if (cfg->key_count > 4096) return fail(TC_ERR_INVALID_ARG, "%s: %zu keys (at most 4096)", fn, cfg->key_count);
  auto ring = std::make_shared<Keyring>();
  for (size_t i = 0; i < cfg->key_count; ++i) {
    const tc_auth_key& k = cfg->keys[i];
    if (!k.identity) return fail(TC_ERR_INVALID_ARG, "%s: key %zu has no identity", fn, i);
    size_t idn = std::strlen(k.identity);
    if (idn == 0 || idn > TC_AUTH_MAX_IDENTITY_BYTES)
      return fail(TC_ERR_INVALID_ARG, "%s: key %zu identity has %zu bytes (1..%d)", fn, i, idn,
                  TC_AUTH_MAX_IDENTITY_BYTES);
    if (!k.secret || k.secret_bytes < TC_AUTH_MIN_SECRET_BYTES)
      return fail(TC_ERR_INVALID_ARG, "%s: key %zu ('%s', id %llu) has a %zu-byte secret; at least %d bytes are required",
                  fn, i, k.identity, (unsigned long long)k.key_id, k.secret ? k.secret_bytes : 0,
                  TC_AUTH_MIN_SECRET_BYTES);
    if (k.secret_bytes > 4096) return fail(TC_ERR_INVALID_ARG, "%s: key %zu secret exceeds 4096 bytes", fn, i);
    if (ring->find(k.identity, k.key_id))
      return fail(TC_ERR_INVALID_ARG, "%s: key ('%s', id %llu) appears twice", fn, k.identity,
                  (unsigned long long)k.key_id);
    ring->keys.push_back(Key{k.identity, k.key_id, std::string(static_cast<const char*>(k.secret), k.secret_bytes)});
  }
  if (cfg->local_identity) {
    ring->local_identity = cfg->local_identity;
  } else {
    for (auto& k : ring->keys)
      if (k.identity != ring->keys[0].identity)
        return fail(TC_ERR_INVALID_ARG, "%s: local_identity is not set and the keyring holds several identities", fn);
    ring->local_identity = ring->keys[0].identity;
  }
  if (cfg->active_key_id == 0) {
    const Key* first = nullptr;
    for (auto& k : ring->keys)
      if (k.identity == ring->local_identity) {
        first = &k;
        break;
      }
    if (!first)
      return fail(TC_ERR_INVALID_ARG, "%s: no key of local identity '%s' in the keyring", fn,
                  ring->local_identity.c_str());
    ring->active_key_id = first->key_id;
  } else {
    ring->active_key_id = cfg->active_key_id;
    if (!ring->find(ring->local_identity, ring->active_key_id))
      return fail(TC_ERR_INVALID_ARG, "%s: active key ('%s', id %llu) is not in the keyring", fn,
                  ring->local_identity.c_str(), (unsigned long long)ring->active_key_id);
  }
  *out = ring;
  return TC_OK;
}

tc_status client_handshake(const Socket& s, const Keyring* ring, Purpose purpose, int32_t claimed_rank,
                           const std::string& expected_identity, Deadline deadline, PeerInfo* server,
                           std::string* why, Session* session) {
  if (session) *session = Session{std::string(), true, 0, 0, nullptr, nullptr, {}, {}};
  std::string nc = ring ? fresh_nonce() : std::string(kNonce, '\0');
  std::string hello(kMagic, 8);
  hello.push_back(char(ring ? kModeAuth : kModePlain));
  hello.push_back(char(purpose));
  put_u64(&hello, uint64_t(uint32_t(claimed_rank)));
  hello += nc;
  if (tc_status st = send_frame(s, hello, deadline)) return io_fail(st, "sending hello", why);
  std::string f;
  if (tc_status st = recv_frame(s, &f, kMaxFrame, deadline)) return io_fail(st, "waiting for the challenge", why);
  if (!f.empty() && uint8_t(f[0]) == kRefuse) {
    *why = ring ? "the peer refused the connection (it runs without authentication, for another purpose, or "
                  "speaks another handshake version than this side's " + std::string(kMagic + kMagicStem, 2) + ")"
                : "the peer requires authentication";
    return TC_ERR_AUTH;
  }
  if (!ring) {
    if (f.size() != 1 || uint8_t(f[0]) != kPlainOk) {
      *why = "unexpected reply to a plain hello";
      return TC_ERR_AUTH;
    }
    return TC_OK;
  }
  if (f.size() != 1 + kNonce || uint8_t(f[0]) != kChallenge) {
    *why = "malformed challenge";
    return TC_ERR_AUTH;
  }
  std::string ns = f.substr(1);
  const Key& me = ring->active();
  std::string t = transcript("tc-auth-v2/client", purpose, claimed_rank, nc, ns, me.identity, me.key_id);
  if (tc_status st = send_frame(s, proof(kAccept, me.identity, me.key_id, mac(me.secret, t)), deadline))
    return io_fail(st, "sending our proof", why);
  if (tc_status st = recv_frame(s, &f, kMaxFrame, deadline)) return io_fail(st, "waiting for the peer's proof", why);
  if (!f.empty() && uint8_t(f[0]) == kRefuse) {
    *why = "the peer refused our credentials (identity '" + me.identity + "', key id " + std::to_string(me.key_id) + ")";
    return TC_ERR_AUTH;
  }
  std::string id_s, m_s;
  uint64_t key_s = 0;
  if (f.empty() || uint8_t(f[0]) != kAccept || !parse_proof(f, 1, &id_s, &key_s, &m_s)) {
    *why = "malformed proof from the peer";
    return TC_ERR_AUTH;
  }
  const Key* k = ring->find(id_s, key_s);
  std::string ts = transcript("tc-auth-v2/server", purpose, claimed_rank, nc, ns, me.identity, me.key_id);
  put_str(&ts, id_s);
  put_u64(&ts, key_s);
  // Compute a MAC even for an unknown key so timing does not tell which keys exist.
  std::string expect = mac(k ? k->secret : std::string(32, '\0'), ts);
  bool ok = equal_ct(expect.data(), m_s.data(), kDigestBytes) && k != nullptr;
  if (!ok) {
    *why = "the peer failed to prove identity '" + printable(id_s) + "' (key id " + std::to_string(key_s) + ")";
    return TC_ERR_AUTH;
  }
  if (!expected_identity.empty() && id_s != expected_identity) {
    *why = "the peer proved identity '" + printable(id_s) + "' but '" + printable(expected_identity) + "' was expected";
    return TC_ERR_AUTH;
  }
  server->identity = id_s;
  server->key_id = key_s;
  if (session) start_session(session, me.secret, k->secret, ts);
  return TC_OK;
}

tc_status server_handshake(const Socket& s, const Keyring* ring, Purpose purpose, const AdmitFn& admit,
                           Deadline deadline, PeerInfo* client, std::string* why, Session* session) {
  if (session) *session = Session{std::string(), false, 0, 0, nullptr, nullptr, {}, {}};
  std::string f;
  if (tc_status st = recv_frame(s, &f, kMaxFrame, deadline)) return io_fail(st, "waiting for hello", why);
  const std::string refuse(1, char(kRefuse));
  if (f.size() >= 8 && std::memcmp(f.data(), kMagic, kMagicStem) == 0 && std::memcmp(f.data(), kMagic, 8) != 0) {
    send_frame(s, refuse, deadline);
    *why = "a peer speaking handshake version '" + printable(f.substr(kMagicStem, 2)) + "' tried to connect; this side "
           "speaks version '" + std::string(kMagic + kMagicStem, 2) + "' (upgrade both ends)";
    return TC_ERR_AUTH;
  }
  if (f.size() != 8 + 2 + 8 + kNonce || std::memcmp(f.data(), kMagic, 8) != 0) {
    send_frame(s, refuse, deadline);
    *why = "malformed hello";
    return TC_ERR_AUTH;
  }
  uint8_t mode = uint8_t(f[8]);
  Purpose p = Purpose(uint8_t(f[9]));
  int32_t rank = int32_t(uint32_t(get_u64(f.data() + 10)));
  std::string nc = f.substr(18);
  if (p != purpose || mode != (ring ? kModeAuth : kModePlain)) {
    send_frame(s, refuse, deadline);
    *why = mode == kModePlain && ring ? "a peer without credentials tried to connect"
                                      : "a peer connected with the wrong mode or purpose";
    return TC_ERR_AUTH;
  }
  client->claimed_rank = rank;
  if (!ring) {
    if (admit) {
      std::string reason = admit(*client);
      if (!reason.empty()) {
        send_frame(s, refuse, deadline);
        *why = reason;
        return TC_ERR_AUTH;
      }
    }
    return send_frame(s, std::string(1, char(kPlainOk)), deadline) ? io_fail(TC_ERR_IO, "accepting", why) : TC_OK;
  }
  std::string ns = fresh_nonce();
  if (tc_status st = send_frame(s, std::string(1, char(kChallenge)) + ns, deadline))
    return io_fail(st, "sending the challenge", why);
  if (tc_status st = recv_frame(s, &f, kMaxFrame, deadline)) return io_fail(st, "waiting for the proof", why);
  std::string id_c, m_c;
  uint64_t key_c = 0;
  if (f.empty() || uint8_t(f[0]) != kAccept || !parse_proof(f, 1, &id_c, &key_c, &m_c)) {
    send_frame(s, refuse, deadline);
    *why = "malformed proof";
    return TC_ERR_AUTH;
  }
  const Key* k = ring->find(id_c, key_c);
  std::string t = transcript("tc-auth-v2/client", purpose, rank, nc, ns, id_c, key_c);
  std::string expect = mac(k ? k->secret : std::string(32, '\0'), t);
  bool ok = equal_ct(expect.data(), m_c.data(), kDigestBytes) && k != nullptr;
  if (!ok) {
    send_frame(s, refuse, deadline);
    *why = "a peer claiming identity '" + printable(id_c) + "' (key id " + std::to_string(key_c) + ") failed to prove it";
    return TC_ERR_AUTH;
  }
  client->identity = id_c;
  client->key_id = key_c;
  if (admit) {
    std::string reason = admit(*client);
    if (!reason.empty()) {
      send_frame(s, refuse, deadline);
      *why = reason;
      return TC_ERR_AUTH;
    }
  }
  const Key& me = ring->active();
  std::string ts = transcript("tc-auth-v2/server", purpose, rank, nc, ns, id_c, key_c);
  put_str(&ts, me.identity);
  put_u64(&ts, me.key_id);
  if (tc_status st = send_frame(s, proof(kAccept, me.identity, me.key_id, mac(me.secret, ts)), deadline))
    return io_fail(st, "sending our proof", why);
  if (session) start_session(session, k->secret, me.secret, ts);
  return TC_OK;
}

namespace {

// The GCM nonce of a frame: its direction (1 client to server, 2 server to
// client; the keys differ too) and its sequence number in that direction.
void frame_nonce(bool from_client, uint64_t seq, uint8_t out[Gmac::kNonceBytes]) {
  out[0] = from_client ? 1 : 2;
  out[1] = out[2] = out[3] = 0;
  for (int i = 0; i < 8; ++i) out[4 + i] = uint8_t(seq >> (8 * i));
}

void frame_length(uint64_t n, unsigned char out[4]) {
  for (int i = 0; i < 4; ++i) out[i] = uint8_t(n >> (8 * i));
}

// Starts the receiving MAC of the next frame: nonce, then the length prefix
// (as it came on the wire: payload and tag).
void begin_check(Session& session, uint64_t payload_bytes) {
  uint8_t nonce[Gmac::kNonceBytes];
  frame_nonce(!session.client, session.received++, nonce);
  unsigned char len[4];
  frame_length(payload_bytes + kFrameTagBytes, len);
  session.rx->begin(nonce);
  session.rx->update(len, 4);
}

// The direction's helper for a frame of `bytes`, or null (hash inline):
// only frames longer than one of its slices use it.
SliceHasher* frame_helper(Session::Helper& h, uint64_t bytes) {
  if (bytes <= SliceHasher::kSliceBytes) return nullptr;
  if (!h.decided) {
    h.hasher = SliceHasher::make_if_useful();
    h.decided = true;
  }
  return SliceHasher::usable(h.hasher) ? h.hasher.get() : nullptr;
}

// A slice's hash: on the helper when there is one, else here.
void hash_slice(SliceHasher* helper, Gmac& mac, const void* p, size_t n) {
  if (helper) {
    helper->post(&mac, p, n);
  } else {
    mac.update(p, n);
  }
}

tc_status end_check(Session& session, const uint8_t got[kFrameTagBytes]) {
  uint8_t expect[kFrameTagBytes];
  session.rx->tag(expect);
  return equal_ct(expect, got, kFrameTagBytes) ? TC_OK : TC_ERR_AUTH;
}

}  // namespace

tc_status send_frame(const Socket& s, Session& session, const ConstBytes* parts, size_t count, Deadline deadline) {
  if (count + 2 > kMaxPieces) return TC_ERR_INVALID_ARG;
  const bool auth = !session.key.empty();
  const size_t trailer = auth ? kFrameTagBytes : 0;
  uint64_t total = 0;
  for (size_t i = 0; i < count; ++i) total += parts[i].n;
  if (total > kMaxFramePayload - trailer) return TC_ERR_INVALID_ARG;
  unsigned char len[4];
  frame_length(total + trailer, len);
  if (!auth) {
    ConstBytes wire[kMaxPieces];
    wire[0] = ConstBytes{len, 4};
    std::copy(parts, parts + count, wire + 1);
    return send_parts(s, wire, count + 1, deadline);
  }
  uint8_t nonce[Gmac::kNonceBytes];
  frame_nonce(session.client, session.sent++, nonce);
  session.tx->begin(nonce);
  session.tx->update(len, 4);
  // The payload goes out a slice at a time. A frame of one slice is sealed,
  // then sent with its tag (one system call). A longer one sends each slice
  // first and hashes it after (still in cache), so the peer receives and
  // checks slice k while this side hashes it; the tag follows the last
  // slice's hash alone, and the peer checks that slice meanwhile. Sealing
  // before sending instead left a slice's hash on each end of the frame's
  // path (about a tenth of a 1 MiB frame's time on loopback).
  // With a helper thread (slice_hasher.h) the slices hash on it, after
  // they are sent, while this thread sends the next.
  SliceHasher* helper = frame_helper(session.tx_helper, total);
  const size_t slice = helper ? SliceHasher::kSliceBytes : kSealSliceBytes;
  DrainOnExit drained(helper);
  const bool streamed = total > slice;
  ConstBytes wire[kMaxPieces];
  size_t k = 0, in_slice = 0;
  wire[k++] = ConstBytes{len, 4};
  auto flush = [&]() -> tc_status {
    if (tc_status st = send_parts(s, wire, k, deadline)) return st;
    if (streamed)
      for (size_t i = 0; i < k; ++i)
        if (wire[i].data != len) hash_slice(helper, *session.tx, wire[i].data, wire[i].n);
    k = 0, in_slice = 0;
    return TC_OK;
  };
  for (size_t i = 0; i < count; ++i) {
    const char* p = static_cast<const char*>(parts[i].data);
    for (size_t left = parts[i].n; left;) {
      const size_t n = std::min(left, slice - in_slice);
      if (!streamed) session.tx->update(p, n);
      wire[k++] = ConstBytes{p, n};
      p += n, left -= n, in_slice += n;
      if (in_slice == slice || k + 1 == kMaxPieces)
        if (tc_status st = flush()) return st;
    }
  }
  if (streamed && k)
    if (tc_status st = flush()) return st;
  if (helper && !helper->drain()) return TC_ERR_INTERNAL;
  uint8_t tag[kFrameTagBytes];
  session.tx->tag(tag);
  wire[k++] = ConstBytes{tag, kFrameTagBytes};
  return send_parts(s, wire, k, deadline);
}

tc_status send_frame(const Socket& s, Session& session, const std::string& payload, Deadline deadline) {
  if (session.key.empty()) return send_frame(s, payload, deadline);
  const ConstBytes one{payload.data(), payload.size()};
  return send_frame(s, session, &one, 1, deadline);
}

tc_status recv_frame_length(const Socket& s, Session& session, uint64_t* payload_bytes, Deadline deadline) {
  unsigned char len[4];
  if (tc_status st = recv_all(s, len, 4, deadline)) return st;
  const uint64_t n = uint64_t(len[0]) | uint64_t(len[1]) << 8 | uint64_t(len[2]) << 16 | uint64_t(len[3]) << 24;
  if (session.key.empty()) {
    *payload_bytes = n;
    return TC_OK;
  }
  *payload_bytes = n >= kFrameTagBytes ? n - kFrameTagBytes : 0;
  return n >= kFrameTagBytes ? TC_OK : TC_ERR_AUTH;  // too short to carry its MAC
}

tc_status recv_frame_payload_into(const Socket& s, Session& session, uint64_t payload_bytes, void* dst,
                                  Deadline deadline) {
  if (session.key.empty()) return recv_all(s, dst, size_t(payload_bytes), deadline);
  begin_check(session, payload_bytes);
  // All slices but the last are checked as they arrive (while the sender
  // hashes the one it just sent, and while they are in cache). The last
  // comes with the tag in a one-slice frame; in a longer one it is checked
  // while the sender hashes it, then the tag is read.
  char* p = static_cast<char*>(dst);
  uint64_t left = payload_bytes;
  SliceHasher* helper = frame_helper(session.rx_helper, payload_bytes);  // it hashes, this thread reads on
  const uint64_t slice = helper ? SliceHasher::kSliceBytes : kSealSliceBytes;
  DrainOnExit drained(helper);
  for (; left > slice; p += slice, left -= slice) {
    if (tc_status st = recv_all(s, p, size_t(slice), deadline)) return st;
    hash_slice(helper, *session.rx, p, size_t(slice));
  }
  uint8_t got[kFrameTagBytes];
  if (payload_bytes > slice) {
    // A longer frame's sender hashes its last slice after sending it: check
    // that slice here meanwhile, then take the tag.
    if (tc_status st = recv_all(s, p, size_t(left), deadline)) return st;
    hash_slice(helper, *session.rx, p, size_t(left));
    if (tc_status st = recv_all(s, got, kFrameTagBytes, deadline)) return st;
    if (helper && !helper->drain()) return TC_ERR_INTERNAL;
    return end_check(session, got);
  }
  const MutBytes last[2] = {{p, size_t(left)}, {got, kFrameTagBytes}};  // one read for both
  if (tc_status st = recv_parts(s, last, 2, deadline)) return st;
  session.rx->update(p, size_t(left));
  return end_check(session, got);
}

tc_status recv_frame_payload(const Socket& s, Session& session, uint64_t payload_bytes, std::string* payload,
                             Deadline deadline) {
  payload->resize(size_t(payload_bytes));
  return recv_frame_payload_into(s, session, payload_bytes, payload_bytes ? &(*payload)[0] : nullptr, deadline);
}

tc_status skip_frame_payload(const Socket& s, Session& session, uint64_t payload_bytes, Deadline deadline) {
  char buf[16384];
  const bool auth = !session.key.empty();
  if (auth) begin_check(session, payload_bytes);
  for (uint64_t left = payload_bytes; left;) {
    const size_t n = size_t(std::min<uint64_t>(left, sizeof buf));
    if (tc_status st = recv_all(s, buf, n, deadline)) return st;
    if (auth) session.rx->update(buf, n);
    left -= n;
  }
  if (!auth) return TC_OK;
  uint8_t got[kFrameTagBytes];
  if (tc_status st = recv_all(s, got, kFrameTagBytes, deadline)) return st;
  return end_check(session, got);
}

tc_status recv_frame(const Socket& s, Session& session, std::string* payload, size_t max_bytes, Deadline deadline,
                     uint64_t* announced) {
  uint64_t n = 0;
  tc_status st = recv_frame_length(s, session, &n, deadline);
  if (announced) *announced = n;
  if (st != TC_OK) return st;
  if (n > max_bytes) return TC_ERR_CORRUPT;
  return recv_frame_payload(s, session, n, payload, deadline);
}

}  // namespace dist
}  // namespace tc
