#include "dist/store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>

namespace tc {
namespace dist {

namespace {

constexpr char kSet = 'S', kGet = 'G', kFound = 'F', kMissing = 'M', kDone = 'K', kRefused = 'E';
// Why a request was refused: the byte after 'E', then the reason as text.
constexpr char kWhyIntegrity = 'I', kWhyNamespace = 'N', kWhyBound = 'B', kWhyMalformed = 'X';
constexpr size_t kMaxRefusal = 512;  // an 'E' reply

std::string request(char op, const std::string& key, const std::string& value = std::string()) {
  std::string m(1, op);
  uint32_t n = uint32_t(key.size());
  m.append(reinterpret_cast<const char*>(&n), 4);
  m += key;
  m += value;
  return m;
}

std::string refused(char why_code, const std::string& why) {
  return std::string(1, kRefused) + why_code + why.substr(0, kMaxRefusal - 2);
}

// A key as error text: escaped, and cut short (keys may be long).
std::string key_text(const std::string& key) {
  return key.size() > 200 ? printable(key.substr(0, 200)) + "..." : printable(key);
}

void backoff(int* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*ms));
  *ms = *ms < 50 ? *ms * 2 : 50;
}

// The checks both sides make before a set leaves or is stored.
tc_status check_set(const std::string& key, const std::string& value, size_t max_message, std::string* why) {
  if (key.empty() || key.size() > kMaxStoreKey) {
    *why = "a rendezvous store key has 1 to " + std::to_string(kMaxStoreKey) + " bytes, not " +
           std::to_string(key.size());
    return TC_ERR_INVALID_ARG;
  }
  if (5 + key.size() + value.size() > max_message) {
    *why = "value of key '" + key_text(key) + "' (" + std::to_string(value.size()) +
           " bytes) is larger than a rendezvous store message (" + std::to_string(max_message) + " bytes)";
    return TC_ERR_INVALID_ARG;
  }
  return TC_OK;
}

}  // namespace

int key_owner(const std::string& key, int world) {
  // gloo's names: "r" (the rank's addresses) and "rank_r" (its host name).
  const size_t start = key.compare(0, 5, "rank_") == 0 ? 5 : 0;
  size_t i = start;
  uint64_t r = 0;
  while (i < key.size() && i - start < 10 && key[i] >= '0' && key[i] <= '9') r = r * 10 + uint64_t(key[i++] - '0');
  if (i == start || (key[start] == '0' && i > start + 1)) return 0;  // gloo writes no leading zeros
  if (i != key.size() && key[i] != '/') return 0;
  return r < uint64_t(world) ? int(r) : 0;
}

tc_status StoreServer::start(const std::string& host, int port, KeyringRef ring, int world,
                             std::vector<std::string> rank_identities, int64_t handshake_ms,
                             std::unique_ptr<StoreServer>* out, std::string* why, RefusalsRef refusals,
                             StoreLimits limits) {
  std::unique_ptr<StoreServer> s(new StoreServer());
  if (tc_status st = listen_tcp(host, port, &s->listener_, &s->port_, why)) return st;
  s->ring_ = std::move(ring);
  s->world_ = world;
  s->rank_identities_ = std::move(rank_identities);
  s->handshake_ms_ = handshake_ms;
  s->limits_ = limits;
  s->refusals_ = refusals ? std::move(refusals) : std::make_shared<Refusals>();
  s->rank_bytes_.assign(size_t(world > 0 ? world : 1), 0);
  // Each rank needs one connection; room for reconnections and a few strays.
  s->acceptor_.start(&s->listener_, size_t(2 * world + 8), [p = s.get()](Socket& c) { p->serve(c); });
  *out = std::move(s);
  return TC_OK;
}

StoreServer::~StoreServer() {
  stop_ = true;
  acceptor_.stop();
}

void StoreServer::close_listener() {
  acceptor_.stop_accepting();  // the accepting thread no longer touches the socket
  listener_.close();
}

tc_status StoreServer::put(const std::string& key, const std::string& value, int rank, std::string* why) {
  if (tc_status st = check_set(key, value, limits_.max_message, why)) {
    refuse(Refusals::Kind::Malformed, *why);
    return st;
  }
  const int owner = key_owner(key, world_);
  if (owner != rank) {
    *why = "rank " + std::to_string(rank) + " may not set key '" + key_text(key) + "' of rank " +
           std::to_string(owner) +
           "'s namespace (rank r sets only \"r\", \"r/...\", \"rank_r\" and \"rank_r/...\"; every other key is "
           "rank 0's)";
    refuse(Refusals::Kind::Namespace, *why);
    return TC_ERR_AUTH;
  }
  std::unique_lock<std::mutex> lock(mu_);
  auto it = data_.find(key);
  const size_t old = it == data_.end() ? 0 : it->first.size() + it->second.size();
  const size_t after = held_bytes_ + reserved_ - old + key.size() + value.size();
  if (after > limits_.max_bytes) {
    *why = "the rendezvous store holds " + std::to_string(held_bytes_) + " bytes; storing key '" + key_text(key) +
           "' (" + std::to_string(value.size()) + " bytes) would pass its bound of " +
           std::to_string(limits_.max_bytes) + " bytes";
    lock.unlock();
    refuse(Refusals::Kind::Bound, *why);
    return TC_ERR_ALLOC;
  }
  if (it == data_.end()) data_.emplace(key, value);
  else it->second = value;
  held_bytes_ = held_bytes_ - old + key.size() + value.size();
  rank_bytes_[size_t(owner)] = rank_bytes_[size_t(owner)] - old + key.size() + value.size();
  return TC_OK;
}

bool StoreServer::reserve(int rank, size_t bytes, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  // What the rank holds may be replaced by this set, so it counts as room.
  if (held_bytes_ + reserved_ + bytes > limits_.max_bytes + rank_bytes_[size_t(rank)]) {
    *why = "the rendezvous store holds " + std::to_string(held_bytes_) + " bytes; a set of " + std::to_string(bytes) +
           " bytes from rank " + std::to_string(rank) + " would pass its bound of " +
           std::to_string(limits_.max_bytes) + " bytes (refused on its length, unread)";
    return false;
  }
  reserved_ += bytes;
  return true;
}

void StoreServer::release(size_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  reserved_ -= bytes;
}

size_t StoreServer::held_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return held_bytes_;
}

bool StoreServer::lookup(const std::string& key, std::string* value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  *value = it->second;
  return true;
}

void StoreServer::serve(Socket& s) {
  PeerInfo peer;
  std::string why;
  AdmitFn admit = [this](const PeerInfo& p) -> std::string {
    if (p.claimed_rank < 1 || p.claimed_rank >= world_)
      return "a peer claimed rank " + std::to_string(p.claimed_rank) + " of a group of " + std::to_string(world_);
    if (!rank_identities_.empty() && rank_identities_[size_t(p.claimed_rank)] != p.identity)
      return "identity '" + printable(p.identity) + "' is not the one bound to rank " + std::to_string(p.claimed_rank) +
             " ('" + printable(rank_identities_[size_t(p.claimed_rank)]) + "')";
    return std::string();
  };
  Session session;
  tc_status st =
      server_handshake(s, ring_.get(), Purpose::Store, admit, deadline_after_ms(handshake_ms_), &peer, &why, &session);
  if (st == TC_ERR_AUTH) refuse(Refusals::Kind::Auth, why);
  if (st == TC_ERR_TIMEOUT)
    refuse(Refusals::Kind::Timeout,
           "a connection did not finish its handshake within " + std::to_string(handshake_ms_) + " ms (" + why + ")");
  if (st == TC_OK) serve_requests(s, session, peer.claimed_rank);
  // Shut down now, so the peer sees the end at once (a refused handshake, a
  // malformed or oversized frame end the connection); closed by the
  // destructor, after this thread is joined: closing here would race with
  // its shutdown() and could hit a reused descriptor.
  s.shutdown_both();
}

// Requests until the peer leaves, the server stops or a frame is refused.
// Each reply is sent at once; waiting for a missing key is the client's (it
// polls).
tc_status StoreServer::serve_requests(Socket& s, Session& session, int rank) {
  const std::string from = " from rank " + std::to_string(rank);
  const std::string late = "a request" + from + " did not arrive whole within " + std::to_string(handshake_ms_) + " ms";
  const std::string altered = "a request" + from + " failed its integrity check";
  while (!stop_) {
    tc_status rs = wait_readable(s, deadline_after_ms(200));
    if (rs == TC_ERR_TIMEOUT) continue;
    if (rs != TC_OK) return rs;
    // A frame, once started, must arrive whole within the short deadline.
    const Deadline d = deadline_after_ms(handshake_ms_);
    uint64_t n = 0;
    rs = recv_frame_length(s, session, &n, d);
    if (rs == TC_OK && n > limits_.max_message) {  // refused unread: the connection is out of step
      refuse(Refusals::Kind::Bound, "a request of " + std::to_string(n) + " bytes" + from +
                                        " is larger than a rendezvous store message (" +
                                        std::to_string(limits_.max_message) + " bytes)");
      return TC_ERR_CORRUPT;
    }
    size_t reserved = 0;
    if (rs == TC_OK && n > 5 + kMaxStoreKey) {  // only a set is this long
      std::string why;
      if (!reserve(rank, size_t(n) - 5, &why)) {
        // Answered at once; the bytes are then read through a small buffer
        // and dropped, so the connection stays in step.
        refuse(Refusals::Kind::Bound, why);
        if (send_frame(s, session, refused(kWhyBound, why), d) != TC_OK) return TC_ERR_IO;
        rs = skip_frame_payload(s, session, n, d);
        if (rs == TC_OK) continue;
      } else {
        reserved = size_t(n) - 5;
      }
    }
    std::string m;
    if (rs == TC_OK) rs = recv_frame_payload(s, session, n, &m, d);
    if (reserved) release(reserved);
    if (rs == TC_ERR_AUTH) {  // altered, replayed or reflected: say so, so the client can start afresh
      refuse(Refusals::Kind::Auth, altered);
      send_frame(s, session, refused(kWhyIntegrity, altered), d);
      return rs;
    }
    if (rs == TC_ERR_TIMEOUT) refuse(Refusals::Kind::Timeout, late);
    if (rs != TC_OK) return rs;
    uint32_t kn = 0;
    if (m.size() >= 5) std::memcpy(&kn, m.data() + 1, 4);
    if (m.size() < 5 || size_t(kn) > m.size() - 5 || (m[0] != kSet && m[0] != kGet)) {
      const std::string why = "a malformed request" + from + " (" + std::to_string(m.size()) + " bytes)";
      refuse(Refusals::Kind::Malformed, why);
      send_frame(s, session, refused(kWhyMalformed, why), d);
      return TC_ERR_CORRUPT;
    }
    std::string key = m.substr(5, kn), reply;
    if (m[0] == kSet) {
      std::string why;
      tc_status st = put(key, m.substr(5 + kn), rank, &why);
      reply = st == TC_OK            ? std::string(1, kDone)
              : st == TC_ERR_AUTH    ? refused(kWhyNamespace, why)
              : st == TC_ERR_ALLOC   ? refused(kWhyBound, why)
                                     : refused(kWhyMalformed, why);
    } else {
      std::string v;
      reply = lookup(key, &v) ? std::string(1, kFound) + v : std::string(1, kMissing);
    }
    if (send_frame(s, session, reply, d) != TC_OK) return TC_ERR_IO;
  }
  return TC_OK;
}

tc_status LocalStore::set(const std::string& key, const std::string& value, std::string* why) {
  return server_->put(key, value, 0, why);
}

tc_status LocalStore::get(const std::string& key, Deadline deadline, std::string* value, std::string* why) {
  int ms = 1;
  while (!server_->lookup(key, value)) {
    if (Clock::now() >= deadline) {
      *why = "key '" + key_text(key) + "' was not published before the deadline";
      server_->count_refusal(Refusals::Kind::Timeout, *why);
      return TC_ERR_TIMEOUT;
    }
    backoff(&ms);
  }
  return TC_OK;
}

tc_status TcpStoreClient::connect(const std::string& host, int port, KeyringRef ring, int rank, Deadline deadline,
                                  std::unique_ptr<TcpStoreClient>* out, std::string* why, RefusalsRef refusals) {
  std::unique_ptr<TcpStoreClient> c(new TcpStoreClient());
  c->host_ = host;
  c->port_ = port;
  c->ring_ = std::move(ring);
  c->rank_ = rank;
  c->refusals_ = refusals ? std::move(refusals) : std::make_shared<Refusals>();
  if (tc_status st = c->open(deadline, why)) return st;
  *out = std::move(c);
  return TC_OK;
}

tc_status TcpStoreClient::open(Deadline deadline, std::string* why) {
  sock_ = Socket();
  if (tc_status st = connect_tcp(host_, port_, deadline, &sock_, why)) {
    *why = "rendezvous: " + *why;
    if (st == TC_ERR_TIMEOUT) refusals_->count(Refusals::Kind::Timeout, *why);
    return st;
  }
  PeerInfo server;
  if (tc_status st =
          client_handshake(sock_, ring_.get(), Purpose::Store, rank_, "", deadline, &server, why, &session_)) {
    *why = "rendezvous at " + host_ + ":" + std::to_string(port_) + ": " + *why;
    if (st == TC_ERR_AUTH) refusals_->count(Refusals::Kind::Auth, *why);
    if (st == TC_ERR_TIMEOUT) refusals_->count(Refusals::Kind::Timeout, *why);
    return st;
  }
  return TC_OK;
}

tc_status TcpStoreClient::exchange(const std::string& req, size_t max_reply, Deadline deadline, std::string* reply,
                                   std::string* why) {
  for (;;) {
    uint64_t announced = 0;
    tc_status st = send_frame(sock_, session_, req, deadline);
    if (st == TC_OK) st = recv_frame(sock_, session_, reply, max_reply, deadline, &announced);
    std::string what;
    if (st == TC_ERR_AUTH)
      what = "a reply of the rendezvous store failed its integrity check (altered or replayed on the way)";
    else if (st == TC_OK && reply->size() >= 2 && (*reply)[0] == kRefused && (*reply)[1] == kWhyIntegrity)
      what = "the rendezvous store found our request altered on the way";
    if (what.empty()) {
      if (st == TC_ERR_CORRUPT) {
        *why = "the rendezvous store announced a reply of " + std::to_string(announced) + " bytes (at most " +
               std::to_string(max_reply) + " expected)";
        refusals_->count(Refusals::Kind::Bound, *why);
      } else if (st == TC_ERR_TIMEOUT) {
        *why = "the rendezvous store did not answer before the deadline";
        refusals_->count(Refusals::Kind::Timeout, *why);
      } else if (st != TC_OK) {
        *why = "rendezvous store connection lost (rank 0 gone?)";
      }
      return st;
    }
    refusals_->count(Refusals::Kind::Auth, what);
    if (reconnects_left_ == 0) {
      *why = what + "; given up after connecting again 3 times";
      return TC_ERR_AUTH;
    }
    reconnects_left_--;
    std::string again;
    if (tc_status rs = open(deadline, &again)) {
      *why = what + "; connecting again failed: " + again;
      return rs == TC_ERR_TIMEOUT ? rs : TC_ERR_AUTH;
    }
  }
}

tc_status TcpStoreClient::set(const std::string& key, const std::string& value, std::string* why) {
  if (tc_status st = check_set(key, value, kMaxStoreMessage, why)) return st;
  std::lock_guard<std::mutex> lock(mu_);
  std::string reply;
  tc_status st = exchange(request(kSet, key, value), kMaxRefusal, deadline_after_ms(60000), &reply, why);
  if (st == TC_ERR_AUTH || st == TC_ERR_CORRUPT) return st;
  if (st == TC_OK && reply.size() >= 2 && reply[0] == kRefused) {
    *why = printable(reply.substr(2));
    const char code = reply[1];
    refusals_->count(code == kWhyNamespace ? Refusals::Kind::Namespace
                     : code == kWhyBound   ? Refusals::Kind::Bound
                                           : Refusals::Kind::Malformed,
                     *why);
    return code == kWhyNamespace ? TC_ERR_AUTH : code == kWhyBound ? TC_ERR_ALLOC : TC_ERR_INVALID_ARG;
  }
  if (st != TC_OK || reply != std::string(1, kDone)) {
    if (st == TC_OK) refusals_->count(Refusals::Kind::Malformed, "a malformed reply to a set");
    *why = "rendezvous store connection lost while publishing '" + key_text(key) + "'" +
           (st != TC_OK ? ": " + *why : std::string());
    return TC_ERR_TIMEOUT;
  }
  return TC_OK;
}

tc_status TcpStoreClient::get(const std::string& key, Deadline deadline, std::string* value, std::string* why) {
  if (key.empty() || key.size() > kMaxStoreKey) {
    *why = "a rendezvous store key has 1 to " + std::to_string(kMaxStoreKey) + " bytes, not " +
           std::to_string(key.size());
    return TC_ERR_INVALID_ARG;
  }
  int ms = 1;
  for (;;) {
    std::string reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tc_status st = exchange(request(kGet, key), kMaxStoreMessage, deadline, &reply, why);
      if (st == TC_ERR_AUTH || st == TC_ERR_CORRUPT) return st;
      if (st != TC_OK) return TC_ERR_TIMEOUT;
      if (reply.empty() || (reply[0] != kFound && reply[0] != kMissing)) {
        *why = "the rendezvous store answered a read of '" + key_text(key) + "' with a malformed reply";
        refusals_->count(Refusals::Kind::Malformed, *why);
        return TC_ERR_CORRUPT;
      }
    }
    if (reply[0] == kFound) {
      *value = reply.substr(1);
      return TC_OK;
    }
    if (Clock::now() >= deadline) {
      *why = "key '" + key_text(key) + "' was not published before the deadline";
      refusals_->count(Refusals::Kind::Timeout, *why);
      return TC_ERR_TIMEOUT;
    }
    backoff(&ms);
  }
}

std::string FileStore::path(const std::string& key) const {
  std::string safe;
  for (char c : key) safe += (isalnum(uint8_t(c)) || c == '_' || c == '-' || c == '.') ? c : '_';
  return dir_ + "/" + safe;
}

tc_status FileStore::set(const std::string& key, const std::string& value, std::string* why) {
  if (value.size() > kMaxStoreMessage) {
    *why = "value of key '" + key_text(key) + "' (" + std::to_string(value.size()) +
           " bytes) is larger than a rendezvous store value (" + std::to_string(kMaxStoreMessage) + " bytes)";
    return TC_ERR_INVALID_ARG;
  }
  std::string final_path = path(key);
  // A fresh name, created exclusively and never through a link: a file or
  // link someone planted under a name we might pick is skipped, not opened.
  static std::mutex seed_mu;
  static std::mt19937_64 gen{std::random_device{}()};
  std::string tmp;
  int fd = -1;
  for (int attempt = 0; attempt < 64 && fd < 0; ++attempt) {
    uint64_t r;
    {
      std::lock_guard<std::mutex> lock(seed_mu);
      r = gen();
    }
    char suffix[40];
    std::snprintf(suffix, sizeof suffix, ".tmp.%d.%016llx", int(::getpid()), (unsigned long long)r);
    tmp = final_path + suffix;
    fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno != EEXIST) {
      *why = "cannot create " + tmp + ": " + std::strerror(errno);
      return TC_ERR_IO;
    }
  }
  if (fd < 0) {
    *why = "cannot create a temporary file next to " + final_path + ": every name tried was taken";
    return TC_ERR_IO;
  }
  const char* p = value.data();
  size_t left = value.size();
  while (left) {
    ssize_t w = ::write(fd, p, left);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) {
      *why = "cannot write " + tmp + ": " + std::strerror(w < 0 ? errno : ENOSPC);
      ::close(fd);
      ::unlink(tmp.c_str());
      return TC_ERR_IO;
    }
    p += w;
    left -= size_t(w);
  }
  if (::close(fd) != 0) {
    *why = "cannot write " + tmp + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return TC_ERR_IO;
  }
  // rename() replaces whatever is at the final name (a planted link
  // included) without following it.
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    *why = "cannot rename " + tmp + " to " + final_path + ": " + std::strerror(errno);
    ::unlink(tmp.c_str());
    return TC_ERR_IO;
  }
  return TC_OK;
}

// Reads a key's file (never through a link, at most kMaxStoreMessage
// bytes). 1: read, 0: absent, -1: refused (*why says why).
static int read_key_file(const std::string& path, std::string* value, std::string* why) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return 0;
    *why = "cannot open " + path + ": " + std::strerror(errno);
    return -1;
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || size_t(st.st_size) > kMaxStoreMessage) {
    ::close(fd);
    *why = path + " is not a regular file of at most " + std::to_string(kMaxStoreMessage) + " bytes";
    return -1;
  }
  std::string out(size_t(st.st_size), '\0');
  size_t got = 0;
  while (got < out.size()) {
    ssize_t r = ::read(fd, &out[got], out.size() - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) break;
    got += size_t(r);
  }
  ::close(fd);
  out.resize(got);
  *value = std::move(out);
  return 1;
}

tc_status FileStore::get(const std::string& key, Deadline deadline, std::string* value, std::string* why) {
  int ms = 1;
  for (;;) {
    int r = read_key_file(path(key), value, why);
    if (r > 0) return TC_OK;
    if (r < 0) return TC_ERR_IO;
    if (Clock::now() >= deadline) {
      *why = "key '" + key_text(key) + "' did not appear in " + dir_ + " before the deadline";
      return TC_ERR_TIMEOUT;
    }
    backoff(&ms);
  }
}

}  // namespace dist
}  // namespace tc
