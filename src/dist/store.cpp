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
constexpr size_t kMaxRefusal = 512;  // an 'E' reply: why a set was refused

std::string request(char op, const std::string& key, const std::string& value = std::string()) {
  std::string m(1, op);
  uint32_t n = uint32_t(key.size());
  m.append(reinterpret_cast<const char*>(&n), 4);
  m += key;
  m += value;
  return m;
}

// A key as error text: escaped, and cut short (keys may be long).
std::string key_text(const std::string& key) {
  return key.size() > 200 ? printable(key.substr(0, 200)) + "..." : printable(key);
}

void backoff(int* ms) {
  std::this_thread::sleep_for(std::chrono::milliseconds(*ms));
  *ms = *ms < 50 ? *ms * 2 : 50;
}

}  // namespace

tc_status StoreServer::start(const std::string& host, int port, KeyringRef ring, int world,
                             std::vector<std::string> rank_identities, int64_t handshake_ms,
                             std::unique_ptr<StoreServer>* out, std::string* why) {
  std::unique_ptr<StoreServer> s(new StoreServer());
  if (tc_status st = listen_tcp(host, port, &s->listener_, &s->port_, why)) return st;
  s->ring_ = std::move(ring);
  s->world_ = world;
  s->rank_identities_ = std::move(rank_identities);
  s->handshake_ms_ = handshake_ms;
  // Each rank needs one connection; room for reconnections and a few strays.
  s->acceptor_.start(&s->listener_, size_t(2 * world + 8), [p = s.get()](Socket& c) { p->serve(&c); });
  *out = std::move(s);
  return TC_OK;
}

StoreServer::~StoreServer() {
  stop_ = true;
  acceptor_.stop();
}

std::string StoreServer::last_refusal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_refusal_;
}

bool StoreServer::put(const std::string& key, const std::string& value, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  const size_t old = it == data_.end() ? 0 : it->first.size() + it->second.size();
  const size_t after = held_bytes_ - old + key.size() + value.size();
  if (after > kMaxStoreBytes) {
    *why = "the rendezvous store holds " + std::to_string(held_bytes_) + " bytes; storing key '" + key_text(key) +
           "' (" + std::to_string(value.size()) + " bytes) would pass its bound of " +
           std::to_string(kMaxStoreBytes) + " bytes";
    return false;
  }
  if (it == data_.end()) data_.emplace(key, value);
  else it->second = value;
  held_bytes_ = after;
  return true;
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

void StoreServer::serve(Socket* s) {
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
      server_handshake(*s, ring_.get(), Purpose::Store, admit, deadline_after_ms(handshake_ms_), &peer, &why, &session);
  if (st != TC_OK) {
    if (st == TC_ERR_AUTH) {
      auth_failures_++;
      std::lock_guard<std::mutex> lock(mu_);
      last_refusal_ = why;
    }
    s->shutdown_both();
    return;  // the socket is closed by the destructor, after the join
  }
  // Requests until the peer leaves or the server stops. Each reply is sent
  // at once; waiting for a missing key is the client's (it polls).
  while (!stop_) {
    std::string m;
    tc_status rs = wait_readable(*s, deadline_after_ms(200));
    if (rs == TC_ERR_TIMEOUT) continue;
    if (rs == TC_OK) rs = recv_frame(*s, session, &m, kMaxStoreMessage, deadline_after_ms(handshake_ms_));
    if (rs == TC_ERR_AUTH) {  // a frame altered or replayed after the handshake
      auth_failures_++;
      std::lock_guard<std::mutex> lock(mu_);
      last_refusal_ = "a request from rank " + std::to_string(peer.claimed_rank) + " failed its integrity check";
    }
    if (rs != TC_OK || m.size() < 5) break;
    uint32_t kn;
    std::memcpy(&kn, m.data() + 1, 4);
    if (size_t(kn) > m.size() - 5) break;
    std::string key = m.substr(5, kn);
    std::string reply;
    if (m[0] == kSet) {
      std::string refusal;
      if (put(key, m.substr(5 + kn), &refusal)) reply.assign(1, kDone);
      else reply = std::string(1, kRefused) + refusal.substr(0, kMaxRefusal - 1);
    } else if (m[0] == kGet) {
      std::string v;
      reply = lookup(key, &v) ? std::string(1, kFound) + v : std::string(1, kMissing);
    } else {
      break;
    }
    if (send_frame(*s, session, reply, deadline_after_ms(handshake_ms_)) != TC_OK) break;
  }
  // Shut down now, so the peer sees the end at once (a malformed or
  // oversized frame ends the connection); closed by the destructor, after
  // this thread is joined: closing here would race with its shutdown() and
  // could hit a reused descriptor.
  s->shutdown_both();
}

tc_status LocalStore::set(const std::string& key, const std::string& value, std::string* why) {
  if (5 + key.size() + value.size() > kMaxStoreMessage) {
    *why = "value of key '" + key_text(key) + "' (" + std::to_string(value.size()) +
           " bytes) is larger than a rendezvous store message (" + std::to_string(kMaxStoreMessage) + " bytes)";
    return TC_ERR_INVALID_ARG;
  }
  return server_->put(key, value, why) ? TC_OK : TC_ERR_ALLOC;
}

tc_status LocalStore::get(const std::string& key, Deadline deadline, std::string* value, std::string* why) {
  int ms = 1;
  while (!server_->lookup(key, value)) {
    if (Clock::now() >= deadline) {
      *why = "key '" + key + "' was not published before the deadline";
      return TC_ERR_TIMEOUT;
    }
    backoff(&ms);
  }
  return TC_OK;
}

tc_status TcpStoreClient::connect(const std::string& host, int port, const Keyring* ring, int rank, Deadline deadline,
                                  std::unique_ptr<TcpStoreClient>* out, std::string* why) {
  std::unique_ptr<TcpStoreClient> c(new TcpStoreClient());
  if (tc_status st = connect_tcp(host, port, deadline, &c->sock_, why)) {
    *why = "rendezvous: " + *why;
    return st;
  }
  PeerInfo server;
  if (tc_status st = client_handshake(c->sock_, ring, Purpose::Store, rank, "", deadline, &server, why, &c->session_)) {
    *why = "rendezvous at " + host + ":" + std::to_string(port) + ": " + *why;
    return st;
  }
  *out = std::move(c);
  return TC_OK;
}

tc_status TcpStoreClient::set(const std::string& key, const std::string& value, std::string* why) {
  if (5 + key.size() + value.size() > kMaxStoreMessage) {
    *why = "value of key '" + key_text(key) + "' (" + std::to_string(value.size()) +
           " bytes) is larger than a rendezvous store message (" + std::to_string(kMaxStoreMessage) + " bytes)";
    return TC_ERR_INVALID_ARG;
  }
  std::lock_guard<std::mutex> lock(mu_);
  Deadline d = deadline_after_ms(60000);
  std::string reply;
  tc_status st = send_frame(sock_, session_, request(kSet, key, value), d);
  if (!st) st = recv_frame(sock_, session_, &reply, kMaxRefusal, d);
  if (st == TC_ERR_AUTH) {
    *why = "a reply of the rendezvous store failed its integrity check (altered or replayed on the way)";
    return TC_ERR_AUTH;
  }
  if (!st && !reply.empty() && reply[0] == kRefused) {
    *why = printable(reply.substr(1));
    return TC_ERR_ALLOC;
  }
  if (st || reply != std::string(1, kDone)) {
    *why = "rendezvous store connection lost while publishing '" + key_text(key) + "'";
    return TC_ERR_TIMEOUT;
  }
  return TC_OK;
}

tc_status TcpStoreClient::get(const std::string& key, Deadline deadline, std::string* value, std::string* why) {
  int ms = 1;
  for (;;) {
    std::string reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tc_status st = send_frame(sock_, session_, request(kGet, key), deadline);
      if (!st) st = recv_frame(sock_, session_, &reply, kMaxStoreMessage, deadline);
      if (st == TC_ERR_AUTH) {
        *why = "a reply of the rendezvous store failed its integrity check (altered or replayed on the way)";
        return TC_ERR_AUTH;
      }
      if (st || reply.empty()) {
        *why = st == TC_ERR_TIMEOUT ? "rendezvous store did not answer before the deadline"
                                    : "rendezvous store connection lost (rank 0 gone?)";
        return TC_ERR_TIMEOUT;
      }
    }
    if (reply[0] == kFound) {
      *value = reply.substr(1);
      return TC_OK;
    }
    if (Clock::now() >= deadline) {
      *why = "key '" + key + "' was not published before the deadline";
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
