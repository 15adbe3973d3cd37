#include "dist/store.h"

#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

namespace tc {
namespace dist {

namespace {

constexpr size_t kMaxMessage = 64u << 20;
constexpr char kSet = 'S', kGet = 'G', kFound = 'F', kMissing = 'M', kDone = 'K';

std::string request(char op, const std::string& key, const std::string& value = std::string()) {
  std::string m(1, op);
  uint32_t n = uint32_t(key.size());
  m.append(reinterpret_cast<const char*>(&n), 4);
  m += key;
  m += value;
  return m;
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
  s->acceptor_ = std::thread([p = s.get()] { p->accept_loop(); });
  *out = std::move(s);
  return TC_OK;
}

StoreServer::~StoreServer() {
  stop_ = true;
  if (acceptor_.joinable()) acceptor_.join();
  {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& c : conns_) c->shutdown_both();
  }
  for (auto& t : workers_) t.join();
}

std::string StoreServer::last_refusal() const {
  std::lock_guard<std::mutex> lock(mu_);
  return last_refusal_;
}

void StoreServer::put(const std::string& key, const std::string& value) {
  std::lock_guard<std::mutex> lock(mu_);
  data_[key] = value;
}

bool StoreServer::lookup(const std::string& key, std::string* value) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = data_.find(key);
  if (it == data_.end()) return false;
  *value = it->second;
  return true;
}

void StoreServer::accept_loop() {
  while (!stop_) {
    Socket s;
    if (accept_tcp(listener_, 100, &s) != TC_OK) continue;
    auto conn = std::make_unique<Socket>(std::move(s));
    Socket* raw = conn.get();
    std::lock_guard<std::mutex> lock(mu_);
    conns_.push_back(std::move(conn));
    workers_.emplace_back([this, raw] { serve(raw); });
  }
}

void StoreServer::serve(Socket* s) {
  PeerInfo peer;
  std::string why;
  AdmitFn admit = [this](const PeerInfo& p) -> std::string {
    if (p.claimed_rank < 1 || p.claimed_rank >= world_)
      return "a peer claimed rank " + std::to_string(p.claimed_rank) + " of a group of " + std::to_string(world_);
    if (!rank_identities_.empty() && rank_identities_[size_t(p.claimed_rank)] != p.identity)
      return "identity '" + p.identity + "' is not the one bound to rank " + std::to_string(p.claimed_rank) + " ('" +
             rank_identities_[size_t(p.claimed_rank)] + "')";
    return std::string();
  };
  tc_status st = server_handshake(*s, ring_.get(), Purpose::Store, admit, deadline_after_ms(handshake_ms_), &peer, &why);
  if (st != TC_OK) {
    if (st == TC_ERR_AUTH) {
      auth_failures_++;
      std::lock_guard<std::mutex> lock(mu_);
      last_refusal_ = why;
    }
    return;  // the socket is closed by the destructor, after the join
  }
  // Requests until the peer leaves or the server stops. Each reply is sent
  // at once; waiting for a missing key is the client's (it polls).
  while (!stop_) {
    std::string m;
    tc_status rs = recv_frame(*s, &m, kMaxMessage, deadline_after_ms(200));
    if (rs == TC_ERR_TIMEOUT) continue;
    if (rs != TC_OK || m.size() < 5) break;
    uint32_t kn;
    std::memcpy(&kn, m.data() + 1, 4);
    if (size_t(kn) > m.size() - 5) break;
    std::string key = m.substr(5, kn);
    std::string reply;
    if (m[0] == kSet) {
      put(key, m.substr(5 + kn));
      reply.assign(1, kDone);
    } else if (m[0] == kGet) {
      std::string v;
      reply = lookup(key, &v) ? std::string(1, kFound) + v : std::string(1, kMissing);
    } else {
      break;
    }
    if (send_frame(*s, reply, deadline_after_ms(handshake_ms_)) != TC_OK) break;
  }
  // Closed by the destructor, after this thread is joined: closing here
  // would race with its shutdown() and could hit a reused descriptor.
}

tc_status LocalStore::set(const std::string& key, const std::string& value, std::string*) {
  server_->put(key, value);
  return TC_OK;
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
  if (tc_status st = client_handshake(c->sock_, ring, Purpose::Store, rank, "", deadline, &server, why)) {
    *why = "rendezvous at " + host + ":" + std::to_string(port) + ": " + *why;
    return st;
  }
  *out = std::move(c);
  return TC_OK;
}

tc_status TcpStoreClient::set(const std::string& key, const std::string& value, std::string* why) {
  std::lock_guard<std::mutex> lock(mu_);
  Deadline d = deadline_after_ms(60000);
  std::string reply;
  tc_status st = send_frame(sock_, request(kSet, key, value), d);
  if (!st) st = recv_frame(sock_, &reply, 16, d);
  if (st || reply != std::string(1, kDone)) {
    *why = "rendezvous store connection lost while publishing '" + key + "'";
    return st == TC_ERR_TIMEOUT ? st : TC_ERR_TIMEOUT;
  }
  return TC_OK;
}

tc_status TcpStoreClient::get(const std::string& key, Deadline deadline, std::string* value, std::string* why) {
  int ms = 1;
  for (;;) {
    std::string reply;
    {
      std::lock_guard<std::mutex> lock(mu_);
      tc_status st = send_frame(sock_, request(kGet, key), deadline);
      if (!st) st = recv_frame(sock_, &reply, kMaxMessage, deadline);
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
  std::string final_path = path(key);
  std::string tmp = final_path + ".tmp." + std::to_string(getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    f.write(value.data(), std::streamsize(value.size()));
    if (!f) {
      *why = "cannot write " + tmp;
      return TC_ERR_IO;
    }
  }
  if (std::rename(tmp.c_str(), final_path.c_str()) != 0) {
    *why = "cannot rename " + tmp + " to " + final_path;
    return TC_ERR_IO;
  }
  return TC_OK;
}

tc_status FileStore::get(const std::string& key, Deadline deadline, std::string* value, std::string* why) {
  int ms = 1;
  for (;;) {
    std::ifstream f(path(key), std::ios::binary);
    if (f) {
      std::stringstream ss;
      ss << f.rdbuf();
      *value = ss.str();
      return TC_OK;
    }
    if (Clock::now() >= deadline) {
      *why = "key '" + key + "' did not appear in " + dir_ + " before the deadline";
      return TC_ERR_TIMEOUT;
    }
    backoff(&ms);
  }
}

}  // namespace dist
}  // namespace tc
